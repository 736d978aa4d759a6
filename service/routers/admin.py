from __future__ import annotations

from fastapi import APIRouter, Query

from service.auth import ADMIN_DEFAULT
from service.deps import DefaultCollectionDep
from service.engine import Collection
from service.schemas import ReloadResponse

router = APIRouter(prefix="/admin", tags=["admin"])


FORCE = Query(False, description="serve the version even when it holds more than STRATA_MAX_SHRINK fewer documents "
              "than the served one (the shrink guard); checksums, loading, the encoder match, the probe and MRR@10 "
              "still gate it")


@router.post("/reload", response_model=ReloadResponse, responses={409: {"model": ReloadResponse}},
             dependencies=[ADMIN_DEFAULT])
async def reload(collection: DefaultCollectionDep, force: bool = FORCE) -> ReloadResponse:
    """Swap to the version `current` points to now (also done by the watcher and on SIGHUP). 409 when the
    candidate is refused: the previous index keeps serving and `reason` says why."""
    return await run_reload(collection, force)


async def run_reload(collection: Collection, force: bool) -> ReloadResponse:
    r = await collection.reload("admin", force=force)
    return ReloadResponse(outcome=r.outcome, index_version=r.version, candidate=r.candidate, reason=r.reason)
