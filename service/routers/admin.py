from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse

from service.deps import ReloaderDep
from service.schemas import ReloadResponse

router = APIRouter(prefix="/admin", tags=["admin"])


@router.post("/reload", response_model=ReloadResponse, responses={409: {"model": ReloadResponse}})
async def reload(reloader: ReloaderDep) -> Response:
    """Swap to the version `current` points to now (also done by the watcher and on SIGHUP). 409 when the
    candidate is refused: the previous index keeps serving and `reason` says why."""
    r = await reloader.reload("admin")
    body = ReloadResponse(outcome=r.outcome, index_version=r.version, candidate=r.candidate, reason=r.reason)
    return JSONResponse(body.model_dump(), status_code=409 if r.outcome == "refused" else 200)
