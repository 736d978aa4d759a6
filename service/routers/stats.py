from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Request

from service.auth import ANY_KEY
from service.deps import AuthorizerDep, CollectionsDep, StatsDep, collection_stats
from service.engine import Collection, Status
from service.schemas.compaction import CompactionState
from service.schemas.stats import CollectionStats, IndexStats, StatsPoint, StatsResponse, StatsWindow
from service.stats import SERIES_STEP_S, LiveStats

router = APIRouter(tags=["operations"], dependencies=[ANY_KEY])  # public by default (STRATA_PUBLIC_PATHS)


# A plain `def`: FastAPI runs it in its thread pool. Sorting five minutes of samples takes milliseconds at a
# thousand requests/s, and the searches being recorded must not wait on the event loop for it.
@router.get("/stats", response_model=StatsResponse)
def stats(request: Request, collections: CollectionsDep, live: StatsDep, authorizer: AuthorizerDep) -> StatsResponse:
    """Live /search latency (p50/p95/p99 of total, encode and FAISS search time) and requests/s over the last
    1 and 5 minutes, a per-10-second series for charts, and the served index's quality figures from its
    manifest — for people without Prometheus (the search page's index card and chart read it)."""
    default = collections.default_name()
    s = collections.by_name[default].status() if default else Status(False, "local", reason="no default collection")
    index = None
    if s.manifest is not None and s.version is not None:
        manifest, e = s.manifest, s.manifest.eval
        figures: dict[str, Any] = {} if e is None else {  # none for a version built with --no-eval
            "mrr_at_10": e.mrr_at_10, "recall_at_10": e.recall_at_10, "exact_mrr_at_10": e.exact_mrr_at_10,
            "ann_recall_at_10": e.ann_recall_at_10, "exact_n_queries": e.exact_n_queries,
            "eval_queries": e.n_queries, "eval_nprobe": e.nprobe, "eval_avg_retrieval_ms": e.avg_retrieval_ms,
            "measured_at": e.measured_at}
        if e is None and manifest.gate is not None:  # the report runs after publishing: the gate's figures meanwhile
            g = manifest.gate
            figures = {"mrr_at_10": g.mrr_at_10, "recall_at_10": g.recall_at_10, "eval_queries": g.n_queries,
                       "measured_at": g.measured_at}
        figures["report_state"] = manifest.report.state if manifest.report is not None else None
        index = IndexStats(
            version=s.version, documents=_documents(s) or manifest.index.ntotal, passages=s.passages,
            model=s.model or manifest.model.dir,
            model_source=manifest.model.source, pooling=manifest.model.pooling, dim=manifest.model.dim,
            factory=manifest.index.factory,
            kind=manifest.index.kind, search_params=s.search_params or {},
            nlist=manifest.index.nlist, nprobe=s.nprobe or manifest.index.nprobe, protocol=manifest.data.protocol,
            nprobe_target_recall=None if manifest.index.nprobe_calibration is None
            else manifest.index.nprobe_calibration.target_recall, default_mode=manifest.search_mode(),
            lexical=None if manifest.lexical is None else manifest.lexical.model_dump(), **figures)
    return StatsResponse(
        ready=s.ready, reason=s.reason, auth_required=authorizer.enabled, uptime_s=round(live.uptime_s, 3),
        windows=[StatsWindow.model_validate(asdict(w)) for w in live.windows()],
        series_step_s=SERIES_STEP_S,
        series=[StatsPoint.model_validate(asdict(p)) for p in live.series(SERIES_STEP_S)],
        index=index, compaction=_compaction(collections.by_name[default]) if default else None,
        collections=None if collections.folder is None else [
            _collection(name, collections.by_name[name], collection_stats(request, name))
            for name in collections.names()])


def _documents(s: Status) -> int | None:
    """Documents served (a version of passages counts each once; its rows are `passages`)."""
    return s.documents if s.documents is not None else s.size


def _compaction(collection: Collection) -> CompactionState:
    return CompactionState.of(collection.compactor.report())


def _collection(name: str, collection: Collection, live: LiveStats) -> CollectionStats:
    s = collection.status()
    return CollectionStats(name=name, ready=s.ready, version=s.version, documents=_documents(s), passages=s.passages,
                           windows=[StatsWindow.model_validate(asdict(w)) for w in live.windows()],
                           compaction=_compaction(collection))
