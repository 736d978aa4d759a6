"""The collection-scoped routers: each serves one collection operation, once, at two paths — the default
collection's (`/search`) and any collection's under `/collections/{name}` (`/collections/{name}/search`) — with
the same handler, body and answer. A handler takes its collection from one dependency (`service.deps.CollectionDep`:
the path's `{name}`, else the default collection); its router names its scope once, in its `dependencies=[...]`
(`READ_COLLECTION`, `ADMIN_COLLECTION`, `WRITE_COLLECTION`: a `service.auth.CollectionScope`), which each inclusion
declares as the default collection's or the named one's.

A new collection operation is a route on one of these routers (or a router added to `ROUTERS`): served at both
paths, with the key checks of both, by that alone."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI

from service.auth import NAMED_PATH, CollectionScope
from service.routers import admin, documents, encode, reading, search

COLLECTION_PREFIX = "/collections/{name}"
NAMED_RESPONSES: dict[int | str, dict[str, object]] = {404: {"description": "no collection of that name"}}
ROUTERS: tuple[APIRouter, ...] = (search.router, encode.router, documents.router, reading.router, admin.router)


def scope_of(router: APIRouter) -> CollectionScope:
    """The collection scope a router declares (ValueError naming it when it declares none)."""
    for dep in router.dependencies:
        if isinstance(dep.dependency, CollectionScope):
            return dep.dependency
    raise ValueError(f"router {router.tags}: a collection-scoped router declares READ_COLLECTION, ADMIN_COLLECTION "
                     f"or WRITE_COLLECTION in its dependencies")


def include(app: FastAPI) -> None:
    """Serve every collection-scoped router at the default collection's paths and under `/collections/{name}`."""
    for router in ROUTERS:
        scope = scope_of(router)
        app.include_router(router, dependencies=[scope.default])
        app.include_router(router, prefix=COLLECTION_PREFIX, dependencies=[NAMED_PATH, scope.named],
                           tags=["collections"], responses=NAMED_RESPONSES)
