from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service.deps import EngineDep, MetricsDep
from service.schemas import Ready, SwapRefusal

router = APIRouter(tags=["operations"])


@router.get("/health")
async def health() -> dict[str, str]:
    """Liveness: the process answers."""
    return {"status": "ok"}


@router.get("/ready", response_model=Ready, responses={503: {"model": Ready}})
async def ready(engine: EngineDep) -> Response:
    """Readiness: an encoder and an index are loaded (with the index version), and why the latest swap was
    refused if it was (the previous index keeps serving)."""
    s = engine.status()
    r = s.refused
    refused = SwapRefusal(version=r.version, kind=r.kind, reason=r.reason, at=r.at) if r else None
    if not s.ready:
        body = Ready(ready=False, reason=s.reason, swap_refused=refused)
        return JSONResponse(body.model_dump(mode="json", exclude_none=True), status_code=503)
    body = Ready(ready=True, index_version=s.version, index_size=s.size, model=s.model, pooling=s.pooling,
                 swap_refused=refused)
    return JSONResponse(body.model_dump(mode="json", exclude_none=True))


@router.get("/metrics", response_class=Response,
            responses={200: {"content": {CONTENT_TYPE_LATEST.split(";")[0]: {"schema": {"type": "string"}}},
                             "description": "Prometheus text format"}})
async def metrics(metrics: MetricsDep) -> Response:
    """Prometheus exposition: latency histograms, request/error counters, index size and MRR@10, swaps."""
    return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)
