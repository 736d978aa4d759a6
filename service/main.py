"""App factory: the lifespan loads the engine and starts the index watcher; middleware adds a request id,
JSON access logs, per-endpoint metrics, CORS and the body cap; one dependency checks API keys."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI
from fastapi.middleware.cors import CORSMiddleware

from service.access import AccessLog
from service.auth import Authorizer, authorize
from service.batching import MicroBatcher
from service.deps import AppState
from service.errors import install_error_handlers
from service.inference import Inference
from service.limits import BodySizeLimit
from service.reload import Reloader
from service.routers import admin, encode, health, search
from service.settings import Settings

log = logging.getLogger(__name__)

ERROR_RESPONSES: dict[int | str, dict[str, object]] = {
    400: {"description": "the body is not UTF-8 or not parseable"},
    401: {"description": "missing or invalid API key (only when keys are configured)"},
    413: {"description": "request body over the size cap"},
    429: {"description": "too many requests in flight; see Retry-After"},
    503: {"description": "no index loaded"},
    504: {"description": "inference timed out"},
}


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

    # Added innermost first: the body cap sits inside CORS, inside the access log (which sees every 413).
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type", "X-Request-ID"],
                           expose_headers=["X-Request-ID", "Retry-After"])
    app.add_middleware(AccessLog, metrics=state.metrics)

    for router in (encode.router, search.router, health.router, admin.router):
        app.include_router(router)
    return app
