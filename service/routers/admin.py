from __future__ import annotations

from fastapi import APIRouter, Query

from service.auth import ADMIN_COLLECTION
from service.deps import CollectionDep
from service.schemas.admin import ReloadResponse

# collection-scoped: `/admin/reload` and `/collections/{name}/admin/reload` (`service.routers.scoped`)
router = APIRouter(prefix="/admin", tags=["admin"], dependencies=[ADMIN_COLLECTION])


FORCE = Query(False, description="serve the version even when it holds more than STRATA_MAX_SHRINK fewer documents "
              "than the served one (the shrink guard); checksums, loading, the encoder match, the probe and MRR@10 "
              "still gate it")


@router.post("/reload", response_model=ReloadResponse, responses={409: {"model": ReloadResponse}})
async def reload(collection: CollectionDep, force: bool = FORCE) -> ReloadResponse:
    """Swap to the version `current` points to now (also done by the watcher and on SIGHUP), behind the
    collection's own gates. 409 when the candidate is refused: the previous index keeps serving and `reason` says
    why."""
    r = await collection.reload("admin", force=force)
    return ReloadResponse(outcome=r.outcome, index_version=r.version, candidate=r.candidate, reason=r.reason)
