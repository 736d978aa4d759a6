from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service.deps import StateDep
from service.schemas import Ready, SwapRefusal

router = APIRouter(tags=["operations"])


@router.get("/health")
async def health() -> dict[str, str]:
    """Liveness: the process answers."""
    return {"status": "ok"}


@router.get("/ready", response_model=Ready, responses={503: {"model": Ready}})
async def ready(state: StateDep) -> Response:
    """Readiness: an encoder and an index are loaded (with the index version), and why the latest swap was
    refused if it was (the previous index keeps serving)."""
    engine = state.holder.engine
    r = state.reloader.refused if state.reloader else None
    refused = SwapRefusal(version=r.version, kind=r.kind, reason=r.reason, at=r.at) if r else None
    if engine is None:
        body = Ready(ready=False, reason=r.reason if r else "loading", swap_refused=refused)
        return JSONResponse(body.model_dump(mode="json", exclude_none=True), status_code=503)
    body = Ready(ready=True, index_version=engine.version, index_size=engine.index.ntotal,
                 model=str(engine.encoder.model_dir), pooling=engine.encoder.meta.pooling, swap_refused=refused)
    return JSONResponse(body.model_dump(mode="json", exclude_none=True))


@router.get("/metrics", response_class=Response,
            responses={200: {"content": {CONTENT_TYPE_LATEST.split(";")[0]: {"schema": {"type": "string"}}},
                             "description": "Prometheus text format"}})
async def metrics(state: StateDep) -> Response:
    """Prometheus exposition: latency histograms, request/error counters, index size and MRR@10, swaps."""
    state.metrics.engines_loaded.set(state.holder.alive())
    return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
