"""Scopes declared on routes (`service.auth`): every route of the real app, every method, against real keys on a real
uvicorn (127.0.0.1): what each route declares is what it enforces; an app with a route that declares none does not
start.

Two collections, `faq` (the default) and `garden`: index roots with no version yet, so that the routes answer
quickly (503/404/409/422) once past the key check; the check runs first (a dependency of the route)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import APIRouter, Depends

from service.auth import (
    ADMIN,
    ADMIN_DEFAULT,
    ADMIN_NAMED,
    READ,
    READ_DEFAULT,
    READ_NAMED,
    Requires,
    RouteScopeError,
    check_routes,
    declared,
    served_routes,
)
from service.main import create_app
from service.settings import Settings
from tests.service.test_tracing import InProcessServer

ADMIN_KEY, READER = "admin-key-0123", "reader-key-0123"
FAQ_READER, GARDEN_ADMIN = "faq-reader-0123", "garden-admin-0123"
KEYS = f"{ADMIN_KEY}:admin,{READER},{FAQ_READER}:read@faq,{GARDEN_ADMIN}:admin@garden"
BAD = "not-a-key-0123"


def allowed(key: str, scope: Requires, collection: str | None) -> bool:
    """What each key may do, written out (not computed by `service.auth`)."""
    if scope.scope == "key":
        return True
    return {ADMIN_KEY: True, READER: scope.scope == READ,
            FAQ_READER: scope.scope == READ and collection == "faq", GARDEN_ADMIN: collection == "garden"}[key]


@pytest.fixture(scope="module")
def app_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    cdir = tmp_path_factory.mktemp("scopes")
    for name in ("faq", "garden"):
        (cdir / name / "versions").mkdir(parents=True)
    return Settings(collections_dir=cdir, default_collection="faq", api_keys=KEYS, watch_interval_s=0, workers=1,
                    threads=1)


@pytest.fixture(scope="module")
def served(app_settings: Settings) -> Iterator[tuple[InProcessServer, object]]:
    app = create_app(app_settings)
    with InProcessServer(app) as srv:
        yield srv, app


class _Params(dict):  # type: ignore[type-arg]
    """A route's path parameters: the collection and model given, any other one (a snapshot's name) a missing one."""

    def __missing__(self, key: str) -> str:
        return f"no-such-{key}"


def test_every_route_enforces_the_scope_it_declares(served: tuple[InProcessServer, object],
                                                    app_settings: Settings) -> None:
    srv, app = served
    walked: set[tuple[str, str, str]] = set()
    with httpx.Client(base_url=srv.url, timeout=60) as c:
        for original, route in served_routes(app):  # type: ignore[arg-type]
            if not hasattr(original, "dependant"):
                continue  # FastAPI's /openapi.json and /docs pages, the /static mount: no data
            (scope,) = declared(route.dependant)
            names = ("faq", "garden") if "{name}" in route.path_format else (None,)
            for method in sorted(route.methods):
                for name in names:
                    path = route.path_format.format_map(_Params(name=name, model="no-such-model"))
                    collection = {"named": name, "default": "faq", "all": "*"}.get(scope.on or "")
                    public = scope.scope == "public" or path in app_settings.public_paths
                    for key in (None, BAD, ADMIN_KEY, READER, FAQ_READER, GARDEN_ADMIN):
                        r = c.request(method, path, headers={"Authorization": f"Bearer {key}"} if key else {})
                        what = (method, path, key, r.status_code, r.text[:200])
                        if public:
                            assert r.status_code not in (401, 403), what
                        elif key in (None, BAD):
                            assert r.status_code == 401, what
                        elif allowed(key, scope, collection):
                            # a "key" route may refuse a restricted key what it filters (a /v1 model of another
                            # collection); the keys without a collection are never refused
                            assert r.status_code != 401, what
                            assert r.status_code != 403 or (scope.scope == "key" and key in (FAQ_READER,
                                                                                             GARDEN_ADMIN)), what
                        else:
                            assert r.status_code == 403, what
                            detail = r.json().get("detail") or r.json()["error"]["message"]
                            assert ("'admin' scope" in detail) if key == READER else (f"{collection!r}" in detail)
                            if key == READER and scope.on != "all":  # names the request refused
                                assert f"needed for {method} {path}" in detail, what
                    walked.add((method, route.path_format, scope.scope))
    # the walk saw the app's routes, each kind of declaration among them
    assert {("POST", "/search", READ), ("POST", "/encode", READ), ("PUT", "/documents", ADMIN),
            ("POST", "/documents/delete", ADMIN), ("POST", "/admin/reload", ADMIN), ("GET", "/health", "key"),
            ("GET", "/stats", "key"), ("GET", "/collections", "key"), ("GET", "/collections/{name}", READ),
            ("POST", "/collections/{name}/search", READ), ("PUT", "/collections/{name}/documents", ADMIN),
            ("POST", "/collections/{name}/documents/delete", ADMIN),
            ("POST", "/collections/{name}/admin/reload", ADMIN),
            ("POST", "/collections", ADMIN), ("DELETE", "/collections/{name}", ADMIN),
            ("POST", "/v1/embeddings", "key"), ("GET", "/v1/models/{model}", "key"), ("GET", "/", "public")} <= walked


def test_a_method_a_path_does_not_take_is_a_405_allowing_every_method_it_takes(
        served: tuple[InProcessServer, object]) -> None:
    """OPTIONS (and any other method a path does not take) answers 405 with `Allow` naming every method of every
    route of that path: `GET, PUT` for `/collections/{name}/config`, whose two methods are two routes."""
    srv, app = served
    routes = [route for _, route in served_routes(app) if getattr(route, "methods", None)]  # type: ignore[arg-type]
    seen = 0
    with httpx.Client(base_url=srv.url, timeout=60) as c:
        for path in sorted({r.path_format.format_map(_Params(name="faq", model="no-such-model")) for r in routes}):
            takes = set().union(*(r.methods for r in routes if r.path_regex.match(path)))
            for method in sorted({"OPTIONS", "DELETE", "PATCH"} - takes):
                r = c.request(method, path, headers={"Authorization": f"Bearer {ADMIN_KEY}"})
                assert r.status_code == 405, (method, path, r.status_code)
                assert set(r.headers["allow"].split(", ")) == takes, (method, path, r.headers["allow"], takes)
                seen += 1
        r = c.options("/collections/faq/config")
        assert r.status_code == 405 and r.headers["allow"] == "GET, PUT"
    assert seen > 40


def test_an_app_with_a_route_that_declares_no_scope_does_not_start(app_settings: Settings) -> None:
    app = create_app(app_settings)
    check_routes(app)
    extra = APIRouter(prefix="/extra")

    @extra.post("/{name}/purge")
    async def purge(name: str) -> dict[str, str]:  # a state-changing route that forgot its scope
        return {"purged": name}

    app.include_router(extra)
    with pytest.raises(RouteScopeError, match=r"POST /extra/\{name\}/purge: declares 0 scopes"):
        check_routes(app)

    async def start() -> None:
        async with app.router.lifespan_context(app):
            pass

    with pytest.raises(RouteScopeError):
        asyncio.run(start())  # uvicorn runs the lifespan before it accepts: the app never serves


@pytest.mark.parametrize(("dependencies", "route_deps", "path", "message"), [
    ([ADMIN_NAMED], [], "/{name}/purge", None),  # declared by include_router: fine
    ([], [READ_DEFAULT, ADMIN_DEFAULT], "/x", "declares 2 scopes"),
    ([], [READ_NAMED], "/x", "has no {name} in its path"),
    ([], [Depends(lambda: None)], "/x", "declares 0 scopes"),
])
def test_what_check_routes_refuses(app_settings: Settings, dependencies: list[object], route_deps: list[object],
                                   path: str, message: str | None) -> None:
    app = create_app(app_settings)
    extra = APIRouter()
    extra.add_api_route(path, lambda: {}, methods=["POST"], dependencies=route_deps)  # type: ignore[arg-type]
    app.include_router(extra, prefix="/extra", dependencies=dependencies)  # type: ignore[arg-type]
    if message is None:
        check_routes(app)
    else:
        with pytest.raises(RouteScopeError, match=message):
            check_routes(app)


def test_open_api_without_keys_needs_none(tmp_path: Path) -> None:
    """No keys configured: every route answers without one, whatever it declares."""
    (tmp_path / "faq" / "versions").mkdir(parents=True)
    app = create_app(Settings(collections_dir=tmp_path, watch_interval_s=0, workers=1, threads=1))
    with InProcessServer(app) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        for method, path in (("PUT", "/collections/faq/documents"), ("POST", "/admin/reload"), ("GET", "/collections")):
            assert c.request(method, path).status_code not in (401, 403)


def test_a_public_path_never_opens_a_route_that_needs_admin(tmp_path: Path) -> None:
    """STRATA_PUBLIC_PATHS lists paths, and a path has several routes: listing `/collections` (so that its listing
    answers without a key) opened `POST /collections` too, creating collections for anybody, and `/documents` or
    `/admin/reload` opened the writes and reloads. What reads at a public path answers without a key; a route that
    needs `admin` there still needs an admin key."""
    for name in ("faq", "garden"):
        (tmp_path / name / "versions").mkdir(parents=True)
    settings = Settings(collections_dir=tmp_path, default_collection="faq", api_keys=KEYS, watch_interval_s=0,
                        workers=1, threads=1,
                        public_paths=["/health", "/collections", "/documents", "/admin/reload", "/search"])
    with InProcessServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        listed = c.get("/collections")
        assert listed.status_code == 200 and {x["name"] for x in listed.json()["collections"]} == {"faq", "garden"}
        assert c.post("/search", json={"query": "q"}).status_code == 503  # public, and past the key: no version
        for method, path, body in (("POST", "/collections", {"name": "opened"}), ("PUT", "/documents",
                                   {"documents": [{"id": "a", "text": "b"}]}), ("POST", "/admin/reload", None)):
            anonymous = c.request(method, path, json=body)
            assert anonymous.status_code == 401, (method, path, anonymous.text)
            reader = c.request(method, path, json=body, headers={"Authorization": f"Bearer {READER}"})
            assert reader.status_code == 403, (method, path, reader.text)
            assert not (tmp_path / "opened").exists()
            admin = c.request(method, path, json=body, headers={"Authorization": f"Bearer {ADMIN_KEY}"})
            assert admin.status_code not in (401, 403), (method, path, admin.text)
