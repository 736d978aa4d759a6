"""The body of `GET /stats`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from indexer.runtime.ann import DEFAULT_KIND
from service.schemas.compaction import CompactionState


class LatencyPercentiles(BaseModel):
    """Milliseconds; null when the window holds no request."""

    p50: float | None
    p95: float | None
    p99: float | None


class StatsWindow(BaseModel):
    seconds: int = Field(description="the window: the last 60 or 300 seconds")
    covered_s: float = Field(description="how much of the window the server has been up (rates divide by it)")
    requests: int = Field(description="/search requests answered (200) in the window")
    queries: int = Field(description="texts searched: a batch request counts once per query here")
    requests_per_s: float
    total_ms: LatencyPercentiles = Field(description="the time the server spent on a /search (its took_ms)")
    encode_ms: LatencyPercentiles = Field(description="ONNX encoding of the micro-batch a request rode in")
    search_ms: LatencyPercentiles = Field(description="FAISS search and fetching the texts")
    modes: dict[str, int] = Field(default_factory=dict, description="requests by the /search mode that ran "
                                  "(dense, lexical, hybrid)")


class StatsPoint(BaseModel):
    ago_s: int = Field(description="the step ends this many seconds ago (0: now)")
    requests_per_s: float
    p50_ms: float | None
    p95_ms: float | None


class IndexStats(BaseModel):
    """The served version, from its manifest: what it holds and how well it retrieves (measured at build time
    by `indexer build` / `indexer eval`; null when the version was built with --no-eval)."""

    version: str
    documents: int
    passages: int | None = Field(None, description="a version of passages: its passage rows (documents counts each "
                                 "document once); null: documents indexed whole")
    model: str = Field(description="the encoder folder served")
    model_source: str = Field(description="the checkpoint the encoder was exported from")
    pooling: str
    dim: int
    factory: str
    kind: str = Field(DEFAULT_KIND, description="the index kind: flat (exact), ivf or hnsw")
    search_params: dict[str, int] = Field({}, description="search parameters as served, what a search that sets "
                                          "none uses: nprobe (IVF), ef_search (HNSW), none (flat); a /search request "
                                          "may set its own")
    nlist: int | None = Field(None, description="IVF only")
    nprobe: int | None = Field(None, description="IVF only: lists probed per query as served (the collection's "
                               "collection.json `search`, else STRATA_NPROBE, else the manifest's; clamped to nlist)")
    nprobe_target_recall: float | None = Field(None, description="the ANN recall@10 the build chose the manifest's "
                                               "nprobe for (`indexer build --target-recall`); null: nprobe given")
    protocol: str
    mrr_at_10: float | None = None
    recall_at_10: float | None = None
    exact_mrr_at_10: float | None = Field(None, description="MRR@10 of exact (brute-force) search: the reference")
    ann_recall_at_10: float | None = Field(None, description="overlap of the index's top 10 with exact search's")
    exact_n_queries: int | None = Field(None, description="exact search ran on this seeded sample (null: all)")
    eval_queries: int | None = None
    eval_nprobe: int | None = None
    eval_avg_retrieval_ms: float | None = Field(None, description="offline: ms per query at the eval's batch "
                                                "size and threads, encoding excluded")
    measured_at: datetime | None = None
    report_state: str | None = Field(None, description="the build's report, run after publishing: pending, running "
                                     "(mrr_at_10 and recall_at_10 are the gate's until it is done), done, failed; "
                                     "null: evaluated before publishing, or not at all")
    default_mode: str = Field("dense", description="/search's mode when a request names none")
    lexical: dict[str, Any] | None = Field(None, description="the lexical (BM25) index: engine, analysis, k1, b, "
                                           "documents (null: none, dense only)")


class CollectionStats(BaseModel):
    name: str
    ready: bool
    version: str | None = None
    documents: int | None = None
    passages: int | None = None  # a version of passages: its passage rows
    windows: list[StatsWindow] = Field(description="this collection's /search windows (last minute, last 5)")
    compaction: CompactionState | None = None


class StatsResponse(BaseModel):
    ready: bool
    reason: str | None = Field(None, description="why not ready")
    auth_required: bool = Field(description="API keys are configured: /search needs one")
    uptime_s: float
    windows: list[StatsWindow] = Field(description="the last minute and the last five minutes")
    series_step_s: int
    series: list[StatsPoint] = Field(description="requests/s and total-time p50/p95 per step, oldest first")
    index: IndexStats | None = None
    compaction: CompactionState | None = Field(None, description="the default collection's background compaction")
    collections: list[CollectionStats] | None = Field(None, description="per collection (with "
                                                      "STRATA_COLLECTIONS_DIR); `index` and the windows above are "
                                                      "the default collection's and the whole server's")
