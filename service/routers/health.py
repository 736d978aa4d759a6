from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service.deps import StateDep
from service.schemas import Ready

router = APIRouter(tags=["operations"])


@router.get("/health")
async def health() -> dict[str, str]:
    """Liveness: the process answers."""
    return {"status": "ok"}


@router.get("/ready", response_model=Ready, responses={503: {"model": Ready}})
async def ready(state: StateDep) -> Response:
    """Readiness: an encoder and an index are loaded (with the index version)."""
    engine = state.engine
    if engine is None:
        body = Ready(ready=False, reason=state.load_error or "loading")
        return JSONResponse(body.model_dump(exclude_none=True), status_code=503)
    body = Ready(ready=True, index_version=engine.version, index_size=engine.index.ntotal,
                 model=str(engine.encoder.model_dir), pooling=engine.encoder.meta.pooling)
    return JSONResponse(body.model_dump(exclude_none=True))


@router.get("/metrics")
async def metrics(state: StateDep) -> Response:
    """Prometheus exposition: latency histograms, request/error counters, index size and MRR@10."""
    return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
