"""App factory: lifespan loads the engine once; middleware records per-endpoint latency and status."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request, Response

from indexer.layout import LayoutError
from indexer.onnx_encoder import EncoderLoadError
from indexer.version import IndexLoadError
from service.deps import AppState
from service.engine import EngineError, SearchEngine
from service.routers import encode, health, search
from service.settings import Settings

log = logging.getLogger(__name__)


def _load(state: AppState) -> None:
    s = state.settings
    try:
        engine = SearchEngine.load(s.index_root, s.model_dir, threads=s.threads, nprobe=s.nprobe)
    except (LayoutError, IndexLoadError, EncoderLoadError, EngineError, OSError) as exc:
        state.load_error = str(exc)
        state.metrics.ready.set(0)
        log.error("not ready: %s", exc)
        return
    state.engine, state.load_error = engine, None
    m = state.metrics
    manifest = engine.index.manifest
    m.ready.set(1)
    m.index_size.set(engine.index.ntotal)
    m.index_mrr.set(manifest.eval.mrr_at_10 if manifest.eval else float("nan"))
    m.index_info.clear()
    m.index_info.labels(engine.version, engine.encoder.meta.pooling).set(1)


def _endpoint(request: Request) -> str:
    """The matched route's template (set by routing), never the raw path: unknown URLs must not create
    new label values."""
    return getattr(request.scope.get("route"), "path", "unmatched")


def create_app(settings: Settings | None = None) -> FastAPI:
    state = AppState(settings=settings or Settings())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        _load(state)
        yield
        if state.engine is not None:
            state.engine.close()

    app = FastAPI(title="Strata", version="0.1.0", lifespan=lifespan,
                  description="Semantic search over an ONNX sentence encoder and a FAISS index.")
    app.state.strata = state

    @app.middleware("http")
    async def record(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        t0 = time.perf_counter()
        response = await call_next(request)
        endpoint, method = _endpoint(request), request.method
        m = state.metrics
        m.request_latency.labels(endpoint, method).observe(time.perf_counter() - t0)
        m.requests.labels(endpoint, method, str(response.status_code)).inc()
        if response.status_code >= 400:
            m.errors.labels(endpoint, str(response.status_code)).inc()
        return response

    for router in (encode.router, search.router, health.router):
        app.include_router(router)
    return app
