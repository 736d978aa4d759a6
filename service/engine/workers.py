"""The inference workers: a thread pool whose hand-off to and from the event loop is one queue put and one
`call_soon_threadsafe`.

`run(loop_fn, *args)` answers an asyncio future, settled by the worker from its thread. `ThreadPoolExecutor`
followed by `asyncio.wrap_future` does the same with a `concurrent.futures.Future` (a condition variable, its lock
and callbacks), an idle semaphore, a work item and a chained copy of the state: about
twice the CPU per round trip, paid once per micro-batch on top of the batch's own work (docs/operations.md).

It is still an `Executor` (`submit`, `map`, `shutdown`), so code that wants a concurrent future (tests, a
thread's setting read back) uses it as any executor. Threads start on first use, run `initializer` once each (the
inference threads' FAISS OpenMP thread count), and `shutdown(wait=True)` lets queued and running work finish.
"""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

T = TypeVar("T")
# the interpreter's exit joins the workers before it tears down (ThreadPoolExecutor registers its own so: a worker
# inside an ONNX run must not outlive the objects it uses); `atexit` where that hook is missing
_at_exit = getattr(threading, "_register_atexit", None) or atexit.register
_STOP = None  # a worker's cue to exit (queued after every item already in the queue)


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:  # noqa: ANN401
    """On the event loop: the worker's outcome into `future`, unless its caller gave up on it (cancelled)."""
    if future.done():
        return
    if error is None:
        future.set_result(value)
    else:
        future.set_exception(error)


class Workers(Executor):
    def __init__(self, max_workers: int, *, thread_name_prefix: str = "worker",
                 initializer: Callable[..., object] | None = None, initargs: tuple[Any, ...] = ()) -> None:
        self.max_workers, self.prefix = max_workers, thread_name_prefix
        self.initializer, self.initargs = initializer, initargs
        self._queue: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._shutdown = False

    def run(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:  # noqa: ANN401
        """`fn(*args)` on a worker, in a copy of the caller's context (its request id), answered on the running
        loop; cancelling the future does not stop a call that started (its result is dropped)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        ctx = contextvars.copy_context()

        def item() -> None:
            if future.cancelled():  # its caller gave up before a worker was free: no work for nobody
                return
            try:
                value, error = ctx.run(fn, *args), None
            except BaseException as exc:  # noqa: BLE001 (handed to the awaiting coroutine, which raises it)
                value, error = None, exc
            try:
                loop.call_soon_threadsafe(_settle, future, value, error)
            except RuntimeError:  # the loop closed meanwhile: nobody waits for the answer any more
                pass

        self._put(item)
        return future

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:  # noqa: ANN401
        future: Future[T] = Future()

        def item() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # noqa: BLE001 (the future carries it)
                future.set_exception(exc)

        self._put(item)
        return future

    def _put(self, item: Callable[[], None]) -> None:
        if self._shutdown:
            raise RuntimeError("cannot schedule new work after shutdown")
        if len(self._threads) < self.max_workers:
            self._start_threads()
        self._queue.put(item)

    def _start_threads(self) -> None:
        with self._lock:
            while len(self._threads) < self.max_workers and not self._shutdown:
                if not self._threads:  # joined at interpreter exit, as ThreadPoolExecutor's threads are
                    _at_exit(lambda: self.shutdown(wait=True))
                t = threading.Thread(target=self._work, name=f"{self.prefix}_{len(self._threads)}")
                t.start()
                self._threads.append(t)

    def _work(self) -> None:
        if self.initializer is not None:
            self.initializer(*self.initargs)
        while (item := self._queue.get()) is not _STOP:
            item()
            del item  # what it holds (a searcher swapped out meanwhile) is let go now, not when the next one comes

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No new work; the workers exit once the work queued before this has run. `wait`: return when they have.
        (`cancel_futures` is refused: an awaited call dropped unanswered would leave its caller waiting.)"""
        if cancel_futures:
            raise NotImplementedError("Workers.shutdown runs the work already queued: cancel_futures=True")
        with self._lock:
            threads = [] if self._shutdown else list(self._threads)
            self._shutdown = True
            for _ in threads:
                self._queue.put(_STOP)
        if wait:
            for t in threads:
                t.join()
