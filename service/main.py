"""App factory: the same app for every engine backend (local or Ray-sharded).

The lifespan starts and stops the collections (`service.engine.registry`: one engine per collection, on one
shared scheduler) and the tracer provider (`service.engine.tracing`, when tracing is on);
middleware adds a request id, JSON access logs, per-endpoint metrics, the request's trace span, CORS and the body
cap; each route declares the scope it needs (`service.auth`: the app refuses to start with a route that declares
none); `service.errors` maps the engine's refusals to HTTP (in OpenAI's shape under /v1/). Routers ask only for what
they use (`service.deps`).
"""

from __future__ import annotations

import gc
import inspect
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from service.access import AccessLog, AccessSummary
from service.auth import Authorizer, check_routes
from service.body_process import BodyProcess
from service.engine import Collections
from service.engine.metrics import Metrics
from service.engine.tracing import Tracing
from service.errors import ERROR_RESPONSES, install_error_handlers
from service.lean_route import parse_below
from service.limits import BodySizeLimit
from service.routers import collections as collections_router
from service.routers import health, openai, page, scoped, snapshots, stats
from service.routers.docs import mount_docs
from service.settings import Settings
from service.stats import LiveStats

# FastAPI's own OpenTelemetry (0.16x) reports to the process's global providers and asks for them on every request;
# Strata traces with a provider of its own (`service.engine.tracing`, STRATA_OTLP_ENDPOINT), never the global one
_NO_NATIVE_TELEMETRY = {"telemetry": {"tracing": False, "metrics": False, "logs": False}} \
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters else {}


CORS_METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE")  # what the API's routes take (tests/service/test_limits.py)
GC_THRESHOLDS = (50_000, 20, 100)  # (young, middle, full) for `gc.set_threshold` while the app serves


@contextmanager
def quiet_collector() -> Iterator[None]:
    """The garbage collector while the app serves (the process's own settings given back after).

    What is loaded by now (the modules, the app and its routes) lives as long as the process; frozen, it is left out
    of the collector's walks, which hold the GIL for all of their length. The versions are opened after: a
    swapped-out one is collected. A full collection still walks every container the collector tracks, among them
    the overlay's maps of written documents, so it grows with them, and at the default thresholds writing ran one
    every few seconds (docs/decisions.md#costs-behind-implementation-choices). `GC_THRESHOLDS` makes collections
    rarer (a young one per 50,000 new containers, a full one per 2,000 young ones): each is as long, but hardly any
    search meets one."""
    gc.collect()
    gc.freeze()
    thresholds = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def create_app(settings: Settings | None = None, tracing: Tracing | None = None) -> FastAPI:
    """`tracing`: the app's tracing (default: from the settings, off unless STRATA_OTLP_ENDPOINT is set)."""
    settings = settings or Settings()
    parse_below(settings.write_nice)
    metrics = Metrics()
    tracing = tracing or Tracing.from_settings(settings)
    collections = Collections(settings, metrics, tracing)  # raises CollectionsConfigError
    summary = AccessSummary() if settings.access_log_mode() == "summary" else None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        check_routes(app)  # again: routes added after create_app declare their scope too
        tracing.start()
        with quiet_collector():
            app.state.body_process = BodyProcess(settings.write_nice)  # large write bodies parsed off this GIL
            await collections.start()
            yield
            await collections.stop()  # after uvicorn stopped accepting and waited for in-flight requests
            app.state.body_process.close()
            tracing.shutdown()  # exports the spans still queued
            if summary is not None:
                summary.close()

    app = FastAPI(title="Strata", version="0.1.0", lifespan=lifespan,
                  docs_url=None, redoc_url=None,  # served offline by `service.routers.docs`
                  responses=ERROR_RESPONSES, **_NO_NATIVE_TELEMETRY,
                  description="Semantic search over an ONNX sentence encoder and a FAISS index.")
    app.state.metrics, app.state.settings, app.state.tracing = metrics, settings, tracing
    app.state.collections = collections
    # the default collection at startup (the routes ask `collections.default()`, which follows discovery)
    app.state.default_collection = collections.by_name.get(collections.default_name() or "")
    app.state.stats = LiveStats()  # the sliding windows of GET /stats, fed by /search
    app.state.collection_stats = {}  # per collection: its own windows (`deps.collection_stats`)
    app.state.authorizer = Authorizer(settings, collections.default_name, collections.access)
    install_error_handlers(app)

    # Added innermost first: the body cap sits inside CORS, inside the access log (which sees every 413).
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    if settings.cors_origins:
        # every method a route takes: a browser preflights a PUT or a DELETE (the writes, a collection's config,
        # deleting a collection or a snapshot), and a method left out here refused it before it was ever sent
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=list(CORS_METHODS),
                           allow_headers=["Authorization", "Content-Type", "X-Request-ID"],
                           expose_headers=["X-Request-ID", "Retry-After", "X-Snapshot-Sha256"])
    app.add_middleware(AccessLog, metrics=metrics, tracing=tracing, summary=summary)

    scoped.include(app)  # search, encode, writes, reads, reload: at the default paths and /collections/{name}
    for router in (health.router, stats.router, collections_router.router, snapshots.router, openai.router,
                   page.router):
        app.include_router(router)
    page.mount_static(app)
    mount_docs(app)
    check_routes(app)  # every route declares its scope (`service.auth`), or the app does not start
    return app
