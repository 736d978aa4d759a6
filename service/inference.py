"""Running encode/search off the event loop: a bounded thread pool, an in-flight cap (429) and a timeout (504).

ONNX Runtime and FAISS release the GIL, so `workers` threads use `workers` cores while the event loop keeps
answering `/health`, `/metrics` and refusals. A request that would exceed `max_in_flight` (running + queued)
is answered 429 at once with `Retry-After`, instead of waiting in an unbounded queue.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from fastapi import HTTPException

from indexer.runtime.faiss_index import set_threads
from service.engine import SearchEngine
from service.holder import EngineHolder, NotReady
from service.metrics import Metrics
from service.settings import Settings

T = TypeVar("T")


class Inference:
    def __init__(self, settings: Settings, holder: EngineHolder, metrics: Metrics) -> None:
        self.settings, self.holder, self.metrics = settings, holder, metrics
        # OpenMP's thread count is per thread: the workers would otherwise give each batched FAISS search a team
        # of every core (and libgomp's spin-waiting after it), `workers` teams fighting the ONNX runs for cores.
        self.pool = ThreadPoolExecutor(max_workers=settings.workers, thread_name_prefix="inference",
                                       initializer=set_threads, initargs=(settings.threads,))
        self.in_flight = 0
        self.not_ready_reason: Callable[[], str] = lambda: "loading"

    async def run(self, fn: Callable[[SearchEngine], T]) -> tuple[SearchEngine, T]:
        """`fn(engine)` on the pool with the engine leased for its whole run; returns (engine, result)."""
        s = self.settings
        if self.in_flight >= s.max_in_flight:
            self.metrics.rejected.labels("busy").inc()
            raise HTTPException(429, detail=f"busy: {self.in_flight} requests in flight (limit {s.max_in_flight});"
                                f" retry after {s.retry_after_s} s", headers={"Retry-After": str(s.retry_after_s)})
        try:
            engine = self.holder.acquire()
        except NotReady:
            raise HTTPException(503, detail=f"not ready: {self.not_ready_reason()}") from None

        def job() -> T:
            try:
                return fn(engine)
            finally:
                self.holder.release(engine)  # the lease ends with the work, even after a 504

        ctx = contextvars.copy_context()  # carry the request id into the worker's log lines
        future = self.pool.submit(ctx.run, job)
        self.in_flight += 1
        self.metrics.in_flight.set(self.in_flight)
        try:
            return engine, await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), s.request_timeout_s)
        except TimeoutError:
            if future.cancel():  # never started: its lease would never be returned by `job`
                self.holder.release(engine)
            self.metrics.rejected.labels("timeout").inc()
            raise HTTPException(504, detail=f"inference took longer than {s.request_timeout_s} s") from None
        finally:
            self.in_flight -= 1
            self.metrics.in_flight.set(self.in_flight)

    def shutdown(self) -> None:
        self.pool.shutdown(wait=True)
