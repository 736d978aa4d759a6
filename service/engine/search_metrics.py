"""One collection's search metrics: the labelled Prometheus series a search feeds (its collection's searches, the
encoder's time and texts, each stage's time), looked up once per mode — a `labels` call takes a lock and builds its
key on every request otherwise."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from service.engine.metrics import Metrics
from service.engine.searcher import SearchResult

STAGE_NAMES = ("encode", "dense", "lexical", "fusion", "lookup")  # `Stages`' fields, in order


@dataclass
class _SearchSeries:
    collection_searches: Any
    encode_seconds: Any
    texts_encoded: Any
    searches: Any
    stages: list[Any] = field(default_factory=lambda: [None] * len(STAGE_NAMES))  # by STAGE_NAMES, on first use

    def stage(self, i: int, child: Any) -> Any:  # noqa: ANN401 (a prometheus child)
        self.stages[i] = child
        return child


class SearchMetrics:
    """What one collection's searches record, per mode that ran."""

    def __init__(self, metrics: Metrics, collection: str) -> None:
        self.metrics, self.collection = metrics, collection
        self._series: dict[str, _SearchSeries] = {}  # by mode

    def record(self, ran: str, r: SearchResult, *, texts_encoded: int) -> None:
        """A search that ran mode `ran`; `texts_encoded`: the query texts the encoder ran on (0: none)."""
        series = self._series.get(ran) or self._search_series(ran)
        series.collection_searches.inc()
        if texts_encoded:
            series.encode_seconds.observe(r.encode_ms / 1000)
            series.texts_encoded.inc(texts_encoded)
        self.metrics.search_seconds.observe(r.search_ms / 1000)
        series.searches.inc()
        st = r.stages
        for i, ms in enumerate((st.encode_ms, st.dense_ms, st.lexical_ms, st.fusion_ms, st.lookup_ms)):
            if ms > 0:  # a stage the mode never runs gets no series at all (not even an empty one)
                stage = series.stages[i] or series.stage(i, self.metrics.stage_seconds.labels(ran, STAGE_NAMES[i]))
                stage.observe(ms / 1000)

    def _search_series(self, mode: str) -> _SearchSeries:
        metrics = self.metrics
        series = _SearchSeries(metrics.c_searches.labels(self.collection, mode),
                               metrics.encode_seconds.labels("/search"), metrics.texts_encoded.labels("/search"),
                               metrics.searches.labels(mode))
        self._series[mode] = series
        return series
