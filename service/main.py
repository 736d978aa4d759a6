"""App factory: the same app for every engine backend (local or Ray-sharded).

The lifespan starts and stops the engine; middleware adds a request id, JSON access logs, per-endpoint metrics,
CORS and the body cap; one app-wide dependency checks API keys; `service.errors` maps the engine's refusals to
HTTP. Routers ask only for what they use (`service.deps`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI
from fastapi.middleware.cors import CORSMiddleware

from service.access import AccessLog
from service.auth import Authorizer, authorize
from service.engine import Engine
from service.errors import ERROR_RESPONSES, install_error_handlers
from service.limits import BodySizeLimit
from service.metrics import Metrics
from service.routers import admin, documents, encode, health, search
from service.settings import Settings


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    metrics = Metrics()
    engine = Engine(settings, metrics)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await engine.start()
        yield
        await engine.stop()  # after uvicorn stopped accepting and waited for in-flight requests

    app = FastAPI(title="Strata", version="0.1.0", lifespan=lifespan, dependencies=[Depends(authorize)],
                  responses=ERROR_RESPONSES,
                  description="Semantic search over an ONNX sentence encoder and a FAISS index.")
    app.state.metrics, app.state.engine = metrics, engine
    app.state.authorizer = Authorizer(settings)
    install_error_handlers(app)

    # Added innermost first: the body cap sits inside CORS, inside the access log (which sees every 413).
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type", "X-Request-ID"],
                           expose_headers=["X-Request-ID", "Retry-After"])
    app.add_middleware(AccessLog, metrics=metrics)

    for router in (encode.router, search.router, documents.router, health.router, admin.router):
        app.include_router(router)
    return app
