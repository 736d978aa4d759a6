"""A collection's front door: `search`, `encode`, `upsert`, `delete`, `reload` and `status`, the same for every
backend.

A `Collection` is one index root served: its served version (`leases`), its swaps behind their gates
(`swap`), its write log and overlay (`writes`), its model names (`model_names`) and its metrics series. The calls pass
the shared `scheduler` (admission: the in-flight cap, `NotReady`, the timeout; micro-batching per encoder; the
inference workers; the write lane). Each batch leases the collection's current searcher for its whole run, so a
swap never mixes two versions in one answer.

Writes (`upsert`, `delete`) pass the same door (admission, timeout), but their texts are encoded on the write lane
(`write_lane`: threads of their own, at a lower CPU priority, in small chunks) rather than micro-batched with
searches, so a stream of writes does not take the searches' workers or cores; then they are logged and applied on a
thread of the collection's own (`document_writes`: passages split as the build split them; the log and overlay are
`indexer.runtime.writes`'): an fsync never holds an inference worker. Its settings are `live_config`'s
(collection.json, read again when it changes), its search metrics `search_metrics`'.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from indexer.runtime.ann import served_search_params
from indexer.runtime.collection_config import CollectionConfig, ConfigError
from indexer.runtime.live_index import served_counts, served_fields
from indexer.runtime.manifest import Manifest, SearchMode
from indexer.runtime.query import Query
from indexer.runtime.vectors import VectorError, check_vector
from indexer.runtime.writelog import ExtId
from indexer.runtime.writes import Document, WriteResult
from service.engine.backends import Backend, make_backend
from service.engine.compactor import Compactor
from service.engine.document_writes import DocumentWrites
from service.engine.errors import BadConfig, BadVector, NotReady
from service.engine.leases import Leases
from service.engine.live_config import LiveConfig
from service.engine.metrics import Metrics
from service.engine.model_names import Encoder, ModelNames
from service.engine.scheduler import Scheduler
from service.engine.search_metrics import SearchMetrics
from service.engine.searcher import Hit, Searcher, SearchResult, Stages
from service.engine.settings import EngineSettings
from service.engine.snapshots import Snapshots
from service.engine.swap import Refusal, Swapper, SwapResult
from service.engine.tracing import Tracing
from service.engine.triggers import Triggers
from service.engine.write_lane import WriteLane

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Hits:
    """`Collection.search`'s answer: per query, its hits best first."""

    version: str  # the version that answered, all of it
    hits: list[list[Hit]]
    truncated: list[bool]
    encode_ms: float
    search_ms: float
    mode: SearchMode = "dense"  # the mode that ran
    stages: Stages = field(default_factory=Stages)


@dataclass(frozen=True)
class Vectors:
    """`Collection.encode`'s answer: L2-normalised vectors, one row per text."""

    version: str  # the version whose encoder produced them
    vectors: np.ndarray
    truncated: list[bool]
    dim: int
    tokens: list[int] = field(default_factory=list)  # per text: tokens the model ran ([CLS], [SEP] included)
    model: str = ""  # the name of the encoder that produced them (`Collection.served_model`)


@dataclass(frozen=True)
class ServedModel:
    """The encoder of the served version: `name` is its stable id in /v1 (`model_names`), `encoder` its folder's
    name."""

    name: str
    encoder: str
    dim: int
    max_length: int
    pooling: str
    exported_at: datetime


@dataclass(frozen=True)
class Status:
    ready: bool
    backend: str
    version: str | None = None
    size: int | None = None  # the served vectors (rows), writes included
    model: str | None = None
    pooling: str | None = None
    reason: str | None = None  # why not ready
    refused: Refusal | None = None  # the latest swap attempt, when it was refused
    in_flight: int = 0
    manifest: Manifest | None = None  # the served version's (build, eval figures)
    nprobe: int | None = None  # IVF's lists probed per query: collection.json's, else STRATA_NPROBE, else the
    # manifest's, clamped to nlist
    search_params: dict[str, int] | None = None  # what a search uses by default ({} for flat: exact)
    since: datetime | None = None  # when the served version was swapped in
    adaptation: dict[str, Any] | None = None  # the served encoder's `encoder adapt --data` record (encoder.json)
    damaged: str | None = None  # a file of the served version gone or resized on disk (`Swapper.served_damage`)
    documents: int | None = None  # documents served, writes included (a version of passages: each once)
    passages: int | None = None  # a version of passages: its passage rows (= size); None: documents whole


class Collection:
    """One collection: its served version (`leases`), its swaps (`swapper`), its writes, its model names, and its
    share of the metrics. The work runs on a `Scheduler` shared by every collection of the process (admission,
    workers, micro-batching per encoder, the write lane); a collection built without one gets its own (one root)."""

    def __init__(self, settings: EngineSettings, metrics: Metrics | None = None, backend: Backend | None = None,
                 tracing: Tracing | None = None, *, scheduler: Scheduler | None = None, name: str = "default",
                 primary: bool | Callable[[], bool] = True, config: CollectionConfig | None = None) -> None:
        self.settings, self.name = settings, name
        # the collection's own settings (collection.json); ConfigError for a bad file, before anything is started
        self.live_config = LiveConfig(settings.index_root, name, config)
        self.metrics = metrics or Metrics()
        self.tracing = tracing or Tracing()  # off
        self.backend = backend or make_backend(settings)
        self._owns_scheduler = scheduler is None
        self.scheduler = scheduler or Scheduler(settings, self.metrics, self.tracing)
        self.leases = Leases(settings.write_nice)
        self.collection_metrics = self.metrics.collection(name, primary=primary)
        self.documents = DocumentWrites(settings.index_root, name, settings.threads, self.leases, self.metrics,
                                        self.collection_metrics, self._call, self.not_ready_reason,
                                        nice=settings.write_nice)
        self.writes, self.write_pool = self.documents.writes, self.documents.write_pool
        self.swapper = Swapper(settings, self.backend, self.leases, self.metrics, writes=self.writes,
                               encoders=self.scheduler.encoders, collection=self.collection_metrics)
        self.names = ModelNames(settings.index_root, settings.model_name, settings.model_aliases)
        self.snapshots = Snapshots(settings.index_root, self._served_for_snapshot, self.not_ready_reason, name)
        self.compactor = Compactor(name, settings, self.leases, lambda: self.config.compaction,
                                   lambda: self.swapper.attempt("compaction", retry=True),
                                   self.scheduler.compactions, self.metrics)
        if self._owns_scheduler:
            self.metrics.engines_loaded.set_function(self.leases.alive)
        self.triggers = Triggers()
        self.search_metrics = SearchMetrics(self.metrics, name)

    @property
    def config(self) -> CollectionConfig:
        """The collection's own settings (its collection.json), as served now."""
        return self.live_config.current

    # the scheduler's parts, as a collection of one root always had them
    @property
    def pool(self) -> Executor:  # the inference workers (`workers.Workers`)
        return self.scheduler.pool

    @property
    def write_lane(self) -> WriteLane:
        return self.scheduler.write_lane

    @property
    def in_flight(self) -> int:
        return self.scheduler.in_flight

    # -- lifecycle ---------------------------------------------------------------------------------------------
    async def start(self, *, signals: bool = True) -> None:
        """Start the backend, load the current version, and start the reload triggers (the `current` watcher and,
        with `signals`, SIGHUP; a registry of collections handles SIGHUP for all of them). A refused startup load
        leaves the collection running but not ready."""
        s = self.settings
        if self._owns_scheduler:
            await self.scheduler.start()
        self.backend.start()
        await self.swapper.start()
        if self.leases.current is None:
            self.collection_metrics.not_ready()
            log.error("collection %s not ready: %s", self.name, self.not_ready_reason())
        if signals:
            self.triggers.on_sighup(lambda: self.swapper.attempt("sighup", retry=True))
        if s.watch_interval_s > 0:
            self.triggers.spawn(self.swapper.watch)
        if s.compact_interval_s > 0:  # the sharded backend's too: `indexer compact` folds its shards one by one
            self.triggers.spawn(self.compactor.run)

    async def stop(self) -> None:
        """Stop the triggers (and the scheduler, when it is this collection's own), wait for running batches, close
        every version and the backend. (The HTTP server has already stopped accepting and waited for in-flight
        requests.)"""
        await self.triggers.stop()
        await self.snapshots.close()  # a snapshot being made finishes first: it reads the collection's files
        self.compactor.stop_child()
        if self._owns_scheduler:
            await self.scheduler.stop()
        self.documents.close()
        self.swapper.close()
        self.leases.close()
        self.backend.close()

    # -- the front door ----------------------------------------------------------------------------------------
    async def search(self, query: Query, vector: Sequence[float] | None = None) -> Hits:
        """The `top_k` best documents of each of the query's texts, from one version, by `mode` (dense: nearest
        vectors; lexical: BM25; hybrid: both, fused by `fusion`; None: the version's default); with a `filter` (see
        `indexer.runtime.filters`), among the documents whose metadata match it only; with `search_params`, at those
        search parameters of the vector search (nprobe for IVF, ef_search for HNSW). Raises `BadFilter` when the
        filter does not fit the version's metadata, `BadSearchParams` when its index kind takes no such
        parameter, `ModeUnavailable` when the version cannot run the mode.

        `vector`: one query's vector, brought instead of encoding (the query's text then serves BM25, or ""
        alone: mode dense); `BadVector` when it is not of the served encoder's space."""
        if query.search_params == {}:
            query = replace(query, search_params=None)
        served = self.leases.current
        try:  # request > collection.json > process-wide
            query = self.config.shape(query, served.manifest.index.kind if served else None,
                                      brought_vector=vector is not None,
                                      version_mode=served.manifest.search_mode() if served else None)
        except ConfigError as exc:
            raise BadConfig(str(exc), [exc.field or "config"]) from None
        if vector is not None:
            texts = query.texts
            query = replace(query, vectors=self._brought_query(vector),
                            mode=query.mode or ("hybrid" if texts and texts[0] else "dense"))
        searcher, r = await self._call(query)
        ran = r.mode or "dense"
        self.search_metrics.record(ran, r, texts_encoded=len(query.texts) if ran != "lexical" and query.vectors is None
                                   else 0)
        return Hits(searcher.version, r.hits, r.truncated, r.encode_ms, r.search_ms, ran, r.stages)

    def _brought_query(self, vector: Sequence[float]) -> np.ndarray:
        searcher = self.leases.current
        if searcher is None:
            raise NotReady(self.not_ready_reason())
        try:
            return check_vector(vector, searcher.encoder.dim)[None, :]
        except VectorError as exc:
            raise BadVector(str(exc), ["vector"]) from None

    async def encode(self, texts: list[str], *, endpoint: str = "/encode") -> Vectors:
        """The texts' vectors, with the encoder of the served version (`endpoint` labels the metrics)."""
        searcher, r = await self._call(Query(texts, None))
        assert r.vectors is not None  # encode-only jobs always carry their vectors
        self.metrics.encode_seconds.labels(endpoint).observe(r.encode_ms / 1000)
        self.metrics.texts_encoded.labels(endpoint).inc(len(texts))
        return Vectors(searcher.version, r.vectors, r.truncated, searcher.encoder.dim, r.tokens,
                       searcher.encoder.model_dir.name)

    def served_model(self, asked: str | None = None, *, aliases: bool = True) -> ServedModel:
        """The served version's encoder; NotReady when none is loaded. With `asked` (a request's `model`): raises
        UnknownModel, or DimensionChanged for a name whose vectors had another dimension (see `model_names`;
        `aliases` False: the encoders' own names only)."""
        searcher = self.leases.current
        if searcher is None:
            raise NotReady(self.not_ready_reason())
        meta, encoder = searcher.encoder.meta, searcher.encoder.model_dir.name
        if asked is not None:
            self.names.resolve(asked, Encoder(encoder, meta.dim), aliases=aliases)
        return ServedModel(self.names.served_id(meta.dim), encoder, meta.dim, meta.max_length, meta.pooling,
                           meta.exported_at)

    async def upsert(self, docs: list[Document]) -> WriteResult:
        """Write documents (an id already served is replaced): encoded with the served encoder, logged durably,
        then searchable — all before this returns. Raises WriteRefused / WritesUnsupported / WritesUnavailable,
        and WritesHeldBack while the overlay is at its bound (the compaction policy's `max_unfolded_docs`)."""
        self.compactor.check_room()
        return await self.documents.upsert(docs)

    async def delete(self, ids: list[ExtId]) -> WriteResult:
        """Delete documents by id, durably; a deleted id stays deleted in every version served later (also one
        built from source data that still holds it) until it is written again."""
        return await self.documents.delete(ids)

    async def reload(self, trigger: str, force: bool = False) -> SwapResult:
        """Swap to the version `current` points at now (a version refused before is tried again); raises
        SwapRefused when it is refused (the served version keeps answering). `force` overrides the shrink guard
        (`max_shrink`) only. The collection's config is read again first (kept as it was if it does not validate)."""
        self.refresh_config()
        return await self.swapper.reload(trigger, force=force)

    # -- the collection's config (`live_config`) -------------------------------------------------------------------
    def refresh_config(self) -> bool:
        """Read collection.json again if it changed on disk (`indexer collection --set`); True when a new config
        applies. One that does not validate is logged and the served config kept."""
        return self.live_config.refresh()

    def set_config(self, config: CollectionConfig) -> None:
        """Check `config` against the served version (`BadConfig` naming the field), write it atomically, and
        apply it from the next request."""
        self.live_config.replace(config, self.leases.current)

    def status(self) -> Status:
        self.swapper.refresh_report()  # a report running after publishing: its figures once they are written
        searcher, refused = self.leases.current, self.swapper.current_refusal()
        if searcher is None:
            return Status(False, self.backend.name, reason=self.not_ready_reason(), refused=refused,
                          in_flight=self.in_flight)
        return Status(True, self.backend.name, searcher.version, searcher.index.ntotal, str(searcher.encoder.model_dir),
                      searcher.encoder.meta.pooling, refused=refused, in_flight=self.in_flight,
                      manifest=searcher.manifest, since=self.swapper.served_since,
                      adaptation=searcher.encoder.meta.adaptation, damaged=self.swapper.served_damage(searcher.version),
                      **self._search_params(searcher.manifest), **self._counts(searcher))

    @staticmethod
    def _counts(searcher: Searcher) -> dict[str, int | None]:
        documents, passages = served_counts(searcher.index)
        return {"documents": documents, "passages": passages}

    def fields(self) -> dict[str, str] | None:
        """The served documents' metadata fields and their types (None: nothing served); read on asking (`GET
        /collections`), not with every `status` (`/ready` probes)."""
        searcher = self.leases.current
        return None if searcher is None else served_fields(searcher.index)

    def _search_params(self, manifest: Manifest) -> dict[str, Any]:
        """The search parameters a search that sets none runs a version at (`search`'s order): its manifest's,
        overridden by its kind's knob's setting (STRATA_NPROBE, STRATA_EF_SEARCH: `ann.KNOBS`) where given, and by
        the collection's own (collection.json `search`) over that; clamped as the index clamps them."""
        own = self.config.search_params_for(manifest.index.kind, None) or {}
        served = served_search_params(manifest.index.params, self.settings.search_param_overrides() | own)
        return {"nprobe": served.get("nprobe"), "search_params": served}

    # -- the scheduler ---------------------------------------------------------------------------------------
    async def _call(self, query: Query, *, write: bool = False) -> tuple[Searcher, SearchResult]:
        return await self.scheduler.call(self, query, write=write)

    def _served_for_snapshot(self) -> tuple[str, Path] | None:
        """The served version and the encoder folder it is served with (a snapshot records that encoder's files)."""
        current = self.leases.current
        return None if current is None else (current.version, Path(current.encoder.model_dir))

    def not_ready_reason(self) -> str:
        r = self.swapper.current_refusal()
        return r.reason if r else "loading"
