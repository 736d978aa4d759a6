"""Prometheus metrics, in a registry owned by the app (no module-level global state).

Per collection (`service.engine.registry`): the `strata_collection_*` families carry a `collection` label;
the unlabelled index/swap/write families they mirror (`strata_index_size`, `strata_ready`, …) keep describing the
default collection only, so the dashboards of a one-root server read what they always read. `CollectionMetrics`
updates both: one call per event."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Sub-millisecond to seconds: search is ~0.1 ms, encoding a batch of 64 ~100 ms.
LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1,
                   0.15, 0.25, 0.5, 1.0, 2.5, 5.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.request_latency = Histogram("strata_request_latency_seconds", "HTTP request latency by endpoint",
                                         ["endpoint", "method"], buckets=LATENCY_BUCKETS, registry=r)
        self.requests = Counter("strata_requests_total", "HTTP requests by endpoint and status",
                                ["endpoint", "method", "status"], registry=r)
        self.errors = Counter("strata_errors_total", "HTTP responses with status >= 400", ["endpoint", "status"],
                              registry=r)
        self.encode_seconds = Histogram("strata_encode_seconds", "Time encoding texts with ONNX Runtime",
                                        ["endpoint"], buckets=LATENCY_BUCKETS, registry=r)
        self.search_seconds = Histogram("strata_search_seconds", "Time searching FAISS and fetching texts",
                                        buckets=LATENCY_BUCKETS, registry=r)
        self.texts_encoded = Counter("strata_texts_encoded_total", "Texts encoded", ["endpoint"], registry=r)
        self.searches = Counter("strata_searches_total", "/search requests answered, by the mode that ran "
                                "(dense, lexical, hybrid)", ["mode"], registry=r)
        self.stage_seconds = Histogram("strata_search_stage_seconds", "Time per /search stage (encode, dense, "
                                       "lexical, fusion, lookup), by mode", ["mode", "stage"],
                                       buckets=LATENCY_BUCKETS, registry=r)
        self.index_size = Gauge("strata_index_size", "Vectors in the served index", registry=r)
        self.index_mrr = Gauge("strata_index_mrr_at_10", "MRR@10 of the served index, from its manifest",
                               registry=r)
        self.index_info = Gauge("strata_index_info", "The served index version (value 1)", ["version", "pooling"],
                                registry=r)
        self.ready = Gauge("strata_ready", "1 when an encoder and an index are loaded", registry=r)
        self.swaps = Counter("strata_index_swaps_total", "Index swap attempts by result", ["result"], registry=r)
        self.swap_refused = Counter("strata_index_swap_refused_total", "Refused index swaps by reason "
                                    "(corrupt, mismatch, quality, shrink, probe, missing, writes, error)",
                                    ["reason"], registry=r)
        self.swap_refused_now = Gauge("strata_index_last_swap_refused", "1 while the latest swap attempt was refused "
                                      "(the previous index keeps serving)", registry=r)
        self.verify_seconds = Gauge("strata_index_verify_seconds", "Time checking the checksums of the latest version "
                                    "opened (startup or swap), before it was loaded", registry=r)
        self.engines_loaded = Gauge("strata_engines_loaded", "Encoder+index engines in memory (1 between swaps)",
                                    registry=r)
        self.rejected = Counter("strata_rejected_total", "Requests turned away before inference",
                                ["reason"], registry=r)  # busy (429), timeout (504), too_large (413)
        self.batch_texts = Histogram("strata_batch_texts", "Texts per micro-batch ONNX run",
                                     buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256), registry=r)
        self.in_flight = Gauge("strata_inference_in_flight", "Inference requests running or queued", registry=r)
        self.writes = Counter("strata_writes_total", "Documents written through the API, by op (upsert, delete)",
                              ["op"], registry=r)
        self.write_seconds = Histogram("strata_write_seconds", "Time to log (fsync) and apply a write, by op",
                                       ["op"], buckets=LATENCY_BUCKETS, registry=r)
        self.write_log_seq = Gauge("strata_write_log_seq", "The write log's last acknowledged seq", registry=r)
        self._per_collection(r)

    def _per_collection(self, r: CollectorRegistry) -> None:
        """The `collection`-labelled families (see CollectionMetrics)."""
        self.c_ready = Gauge("strata_collection_ready", "1 when the collection serves a version", ["collection"],
                             registry=r)
        self.c_size = Gauge("strata_collection_index_size", "Documents served by the collection (writes included)",
                            ["collection"], registry=r)
        self.c_mrr = Gauge("strata_collection_index_mrr_at_10", "MRR@10 of the collection's served version, from its "
                           "manifest", ["collection"], registry=r)
        self.c_info = Gauge("strata_collection_index_info", "The collection's served version (value 1)",
                            ["collection", "version", "pooling"], registry=r)
        self.c_searches = Counter("strata_collection_searches_total", "/search requests answered, by collection and "
                                  "mode", ["collection", "mode"], registry=r)
        self.c_swaps = Counter("strata_collection_swaps_total", "Index swap attempts, by collection and result",
                               ["collection", "result"], registry=r)
        self.c_refused_now = Gauge("strata_collection_last_swap_refused", "1 while the collection's latest swap "
                                   "attempt was refused", ["collection"], registry=r)
        self.c_writes = Counter("strata_collection_writes_total", "Documents written, by collection and op",
                                ["collection", "op"], registry=r)
        self.c_write_log_seq = Gauge("strata_collection_write_log_seq", "The collection's write log's last "
                                     "acknowledged seq", ["collection"], registry=r)
        # background compaction (`service.engine.compactor`)
        self.compaction_pending = Gauge("strata_collection_compaction_pending_entries", "Write-log entries the "
                                        "collection's served version does not hold yet", ["collection"], registry=r)
        self.compaction_running = Gauge("strata_collection_compaction_running", "1 while the collection compacts",
                                        ["collection"], registry=r)
        self.compactions = Counter("strata_collection_compactions_total", "Background compactions, by outcome "
                                   "(swapped, unchanged, failed, refused)", ["collection", "outcome"], registry=r)
        self.compaction_seconds = Gauge("strata_collection_compaction_last_seconds", "How long the collection's last "
                                        "compaction took, its swap included", ["collection"], registry=r)

    def collection(self, name: str, *, primary: bool | Callable[[], bool] = True) -> CollectionMetrics:
        return CollectionMetrics(self, name, primary)


class CollectionMetrics:
    """One collection's view of the metrics: the labelled `strata_collection_*` series always, the unlabelled
    ones they mirror only for the `primary` (default) collection."""

    def __init__(self, metrics: Metrics, name: str, primary: bool | Callable[[], bool]) -> None:
        self.metrics, self.name, self._primary = metrics, name, primary

    @property
    def primary(self) -> bool:
        """Whether this is the default collection (asked each time: a collections folder's default may appear)."""
        return self._primary() if callable(self._primary) else self._primary

    def not_ready(self) -> None:
        self.metrics.c_ready.labels(self.name).set(0)
        if self.primary:
            self.metrics.ready.set(0)

    def served(self, version: str, pooling: str, size: int, mrr: float, *, swapped: bool) -> None:
        metrics, n = self.metrics, self.name
        metrics.c_ready.labels(n).set(1)
        metrics.c_size.labels(n).set(size)
        metrics.c_mrr.labels(n).set(mrr)
        metrics.c_refused_now.labels(n).set(0)
        for labels in list(metrics.c_info._metrics):  # noqa: SLF001 (one info series per collection)
            if labels[0] == n:
                metrics.c_info.remove(*labels)
        metrics.c_info.labels(n, version, pooling).set(1)
        if swapped:
            metrics.c_swaps.labels(n, "swapped").inc()
        if self.primary:
            if swapped:
                metrics.swaps.labels("swapped").inc()
            metrics.swap_refused_now.set(0)
            metrics.ready.set(1)
            metrics.index_size.set(size)
            metrics.index_mrr.set(mrr)
            metrics.index_info.clear()
            metrics.index_info.labels(version, pooling).set(1)

    def forget(self, was_default: bool) -> None:
        """The collection is deleted: its labelled series go (a deleted collection must not read as one that
        serves, `strata_collection_ready` 1), and when it `was_default` (asked before it left the registry: it is
        no one's default now) the unlabelled ones it mirrored say not ready."""
        m = self.metrics
        for family in (m.c_ready, m.c_size, m.c_mrr, m.c_info, m.c_searches, m.c_swaps, m.c_refused_now, m.c_writes,
                       m.c_write_log_seq, m.compaction_pending, m.compaction_running, m.compactions,
                       m.compaction_seconds):
            for labels in list(family._metrics):  # noqa: SLF001 (prometheus_client lists its series nowhere else)
                if labels[0] == self.name:
                    family.remove(*labels)
        if was_default:
            m.ready.set(0)
            m.index_info.clear()

    def refused(self, kind: str) -> None:
        self.metrics.c_swaps.labels(self.name, "refused").inc()
        self.metrics.c_refused_now.labels(self.name).set(1)
        if self.primary:
            self.metrics.swaps.labels("refused").inc()
            self.metrics.swap_refused.labels(kind).inc()
            self.metrics.swap_refused_now.set(1)

    def refusal_cleared(self) -> None:
        self.metrics.c_refused_now.labels(self.name).set(0)
        if self.primary:
            self.metrics.swap_refused_now.set(0)

    def searched(self, mode: str) -> None:
        self.metrics.c_searches.labels(self.name, mode).inc()

    def wrote(self, op: str, docs: int, seq: int, size: int) -> None:
        self.metrics.c_writes.labels(self.name, op).inc(docs)
        self.metrics.c_write_log_seq.labels(self.name).set(seq)
        self.metrics.c_size.labels(self.name).set(size)
        if self.primary:
            self.metrics.write_log_seq.set(seq)
            self.metrics.index_size.set(size)
