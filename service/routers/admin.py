from __future__ import annotations

from fastapi import APIRouter

from service.deps import EngineDep
from service.schemas import ReloadResponse

router = APIRouter(prefix="/admin", tags=["admin"])


@router.post("/reload", response_model=ReloadResponse, responses={409: {"model": ReloadResponse}})
async def reload(engine: EngineDep) -> ReloadResponse:
    """Swap to the version `current` points to now (also done by the watcher and on SIGHUP). 409 when the
    candidate is refused: the previous index keeps serving and `reason` says why."""
    r = await engine.reload("admin", force=True)
    return ReloadResponse(outcome=r.outcome, index_version=r.version, candidate=r.candidate, reason=r.reason)
