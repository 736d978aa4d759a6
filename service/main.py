"""App factory: the lifespan loads the engine and starts the index watcher; middleware adds a request id,
JSON access logs, per-endpoint metrics, CORS and the body cap; one dependency checks API keys."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, Request, Response
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse

from service.auth import Authorizer, authorize
from service.batching import MicroBatcher
from service.deps import AppState
from service.errors import install_error_handlers
from service.inference import Inference
from service.limits import BodySizeLimit
from service.logs import request_id
from service.reload import Reloader
from service.routers import admin, encode, health, search
from service.settings import Settings

log = logging.getLogger(__name__)
access = logging.getLogger("strata.access")

ERROR_RESPONSES: dict[int | str, dict[str, object]] = {
    400: {"description": "the body is not UTF-8 or not parseable"},
    401: {"description": "missing or invalid API key (only when keys are configured)"},
    413: {"description": "request body over the size cap"},
    429: {"description": "too many requests in flight; see Retry-After"},
    503: {"description": "no index loaded"},
    504: {"description": "inference timed out"},
}


def _endpoint(request: Request) -> str:
    """The matched route's template (set by routing), never the raw path: unknown URLs must not create
    new label values."""
    return getattr(request.scope.get("route"), "path", "unmatched")


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    state = AppState(settings=settings, authorizer=Authorizer(settings))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.inference = Inference(settings, state.holder, state.metrics)
        state.reloader = reloader = Reloader(settings, state.holder, state.metrics)
        state.inference.not_ready_reason = lambda: state.load_error or "loading"
        state.batcher = MicroBatcher(settings, state.inference, state.metrics)
        state.batcher.start()
        await reloader.reload("startup")
        if state.holder.engine is None:
            state.metrics.ready.set(0)
            log.error("not ready: %s", state.load_error)
        loop = asyncio.get_running_loop()
        tasks: set[asyncio.Task[object]] = set()

        def on_sighup() -> None:
            task = loop.create_task(reloader.reload("sighup"))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # no signals off the main thread
            loop.add_signal_handler(signal.SIGHUP, on_sighup)
        watcher = loop.create_task(reloader.watch()) if settings.watch_interval_s > 0 else None
        yield
        # uvicorn has stopped accepting and waited for in-flight requests (timeout_graceful_shutdown).
        if watcher is not None:
            watcher.cancel()
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.remove_signal_handler(signal.SIGHUP)
        await state.batcher.stop()
        state.inference.shutdown()
        state.holder.close()

    app = FastAPI(title="Strata", version="0.1.0", lifespan=lifespan, dependencies=[Depends(authorize)],
                  responses=ERROR_RESPONSES,
                  description="Semantic search over an ONNX sentence encoder and a FAISS index.")
    app.state.strata = state

    install_error_handlers(app)  # 422 without the echoed input (shared with the sharded ingress)

    @app.middleware("http")
    async def record(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        rid = request.headers.get("x-request-id", "")[:64] or uuid.uuid4().hex
        token = request_id.set(rid)
        t0 = time.perf_counter()
        try:
            try:
                response = await call_next(request)
            except Exception:  # answered here so that it is logged with its request id and counted
                log.exception("unhandled error on %s %s", request.method, request.url.path)
                response = JSONResponse({"detail": "internal error", "request_id": rid}, status_code=500)
            elapsed = time.perf_counter() - t0
            endpoint, method = _endpoint(request), request.method
            m = state.metrics
            m.request_latency.labels(endpoint, method).observe(elapsed)
            m.requests.labels(endpoint, method, str(response.status_code)).inc()
            if response.status_code >= 400:
                m.errors.labels(endpoint, str(response.status_code)).inc()
            response.headers["X-Request-ID"] = rid
            access.info("%s %s %d", method, request.url.path, response.status_code,
                        extra={"method": method, "path": request.url.path, "status": response.status_code,
                               "ms": round(elapsed * 1000, 3),
                               "client": request.client.host if request.client else None})
            return response
        finally:
            request_id.reset(token)

    # Added innermost first: the body cap sits inside CORS, inside `record` (which sees and logs every 413).
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type", "X-Request-ID"],
                           expose_headers=["X-Request-ID", "Retry-After"])

    for router in (encode.router, search.router, health.router, admin.router):
        app.include_router(router)
    return app
