"""The collection-scoped routers (`service.routers.scoped`): each operation is one handler served at the default
collection's path and under `/collections/{name}`, with the scope of each; the handler's collection comes from one
dependency (`service.deps.CollectionDep`), the path's `{name}` or the default one."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute

from service.auth import READ_COLLECTION, check_routes, declared, served_routes
from service.main import create_app
from service.routers import scoped
from service.settings import Settings


def test_each_collection_operation_is_one_handler_at_both_paths(tmp_path: Path) -> None:
    (tmp_path / "faq" / "versions").mkdir(parents=True)
    app = create_app(Settings(collections_dir=tmp_path, watch_interval_s=0, workers=1, threads=1))
    by_path = {(m, r.path_format): (o.endpoint, declared(r.dependant)) for o, r in served_routes(app)
               if isinstance(o, APIRoute) for m in r.methods}
    scoped_routes = [(m, route.path_format) for router in scoped.ROUTERS for route in router.routes
                     for m in route.methods]
    assert ("POST", "/search") in scoped_routes and ("PUT", "/documents") in scoped_routes
    for method, path in scoped_routes:
        default, named = by_path[(method, path)], by_path[(method, scoped.COLLECTION_PREFIX + path)]
        assert default[0] is named[0], path  # the same handler
        ((d,), (n,)) = default[1], named[1]
        assert (d.scope, d.write, d.on) == (n.scope, n.write, "default") and n.on == "named", path


def test_a_router_without_a_collection_scope_is_refused() -> None:
    with pytest.raises(ValueError, match="declares READ_COLLECTION"):
        scoped.scope_of(APIRouter())


def test_a_scoped_router_included_without_its_inclusions_scope_does_not_start() -> None:
    router = APIRouter(dependencies=[READ_COLLECTION])

    @router.get("/peek")
    async def peek() -> dict[str, str]:
        return {}

    app = FastAPI()
    app.include_router(router)  # not through `scoped.include`: no scope declared
    with pytest.raises(Exception, match="GET /peek: declares 0 scopes"):
        check_routes(app)
