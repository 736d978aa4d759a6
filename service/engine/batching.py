"""Micro-batching: concurrent `search` and `encode` calls are encoded in one ONNX run.

A dispatcher task takes every request queued so far (up to `batch_max_texts` texts) and hands them to a free
worker as one batch. While the workers are busy, new requests accumulate, so batches grow with load and stay at
one request when the engine is idle. When other batches are already running, the dispatcher also waits up to
`batch_window_ms` for more requests before dispatching, trading a few ms for larger batches; an idle engine
never waits. The window is off by default: under load, queueing alone makes the batches, and a worker held idle for
the window costs more than larger batches gain (the runs: docs/operations.md#micro-batching).

A batch is also bounded by tokens (`max_tokens`, like TEI's `max-batch-tokens`): a request's cost is its
texts' token count, taken with the served tokenizer when it is queued. Light requests (within the bound) are
batched first come, first served while they fit. A heavy request (over the bound on its own, e.g. 16 passages
of 250 tokens) runs alone, and at most `workers - 1` heavy batches run at once: while they do, light requests
queued behind a heavy one go ahead of it on the free worker. So a short query never waits for a long
document's run, neither inside its batch nor for a worker, and a heavy request waits at most until a heavy
slot frees (it is taken as soon as it is first in the queue and a slot is free: no starvation); the runs that
chose this are in docs/operations.md#micro-batching. Inside a batch the encoder already cuts runs by
length, so short texts are never padded to a long one.

A request that finds the engine idle (nothing queued, no batch running) starts its batch from `submit` itself,
without waking the dispatcher task; when it cannot be heavy (its texts times the encoder's `max_text_tokens`, where
the tokenizer cuts every text, fit `max_tokens`) its tokens are not counted either: the count only places requests
that queue. While batches run, requests queue and are batched as above.

The batcher only groups and dispatches: the in-flight cap and the timeout are the scheduler's, at its door. The
scheduler keeps one batcher per encoder: requests of several collections that share an encoder are batched together
(each carries its `route`, the collection it searches), and `run` answers each with its own collection's searcher.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from indexer.runtime.query import Query
from service.engine.searcher import Job, Searcher, SearchResult

Answer = tuple[Searcher, SearchResult]  # the searcher that answered, and this request's share of the batch
# a batch's jobs and their routes (the collection each searches) -> one answer per job, in order
RunBatch = Callable[[list[Job], list[Any]], Awaitable[list[Answer]]]


@dataclass
class _Queued:
    """A request waiting for its batch: the engine's `Job` as it is (one request type from the door to the
    searcher), where it goes, and what the batcher needs to place it."""

    job: Job
    future: asyncio.Future[Answer] = field(repr=False)
    tokens: int = 0  # what it costs against `max_tokens`
    heavy: bool = False  # over `max_tokens` on its own: runs alone, in a heavy slot
    route: Any = None  # where it is searched (the scheduler's collection); opaque to the batcher

    @property
    def texts(self) -> list[str]:
        return self.job.texts


class MicroBatcher:
    def __init__(self, run: RunBatch, *, workers: int, window_ms: float, max_texts: int, max_tokens: int = 0,
                 count_tokens: Callable[[list[str]], int] | None = None, max_text_tokens: int = 0,
                 on_batch: Callable[[int], None] = lambda texts: None) -> None:
        self.run, self.window, self.max_texts, self.on_batch = run, window_ms / 1000, max_texts, on_batch
        self.max_tokens = max_tokens if count_tokens is not None else 0  # 0: texts alone bound a batch
        self.count_tokens = count_tokens
        self.max_text_tokens = max_text_tokens  # the most tokens one text can cost (0: unknown)
        self.workers = workers
        self.heavy_slots = max(1, workers - 1)  # one worker stays free for light requests
        self.heavy_running = 0
        self.queue: deque[_Queued] = deque()
        self.wakeup = asyncio.Event()
        self.running = 0  # batches running: at most `workers`
        self.task: asyncio.Task[None] | None = None
        self.batches: set[asyncio.Future[list[Answer]]] = set()  # running: their workers' answers

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._dispatch())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        if self.batches:
            await asyncio.gather(*self.batches, return_exceptions=True)

    def submit(self, query: Query, *, route: Any = None) -> asyncio.Future[Answer]:
        """Queue `query`; the future resolves when its batch has run. Requests with different filters, modes and
        search parameters share the batch's ONNX run."""
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        light = not self.max_tokens or 0 < len(query.texts) * self.max_text_tokens <= self.max_tokens
        if not self.queue and not self.running and light:  # an idle engine: nothing to wait for or batch with
            self._start([_Queued(query, future, route=route)])
            return future
        tokens = self.count_tokens(query.texts) if self.max_tokens and self.count_tokens else 0
        self.queue.append(_Queued(query, future, tokens,
                                  heavy=bool(self.max_tokens) and tokens > self.max_tokens, route=route))
        self.wakeup.set()
        return future

    def _start(self, batch: list[_Queued]) -> None:
        self.running += 1
        self.heavy_running += batch[0].heavy
        # `run`'s awaitable as it is when it is a future (the scheduler's workers answer one): no task, no coroutine
        # frame and one event-loop turn less between the batch's end and its requests' answers
        try:
            running = asyncio.ensure_future(self.run([r.job for r in batch], [r.route for r in batch]))
        except Exception as exc:  # noqa: BLE001 (refused before it ran: every request of the batch gets it)
            running = asyncio.get_running_loop().create_future()
            running.set_exception(exc)
        self.batches.add(running)
        running.add_done_callback(lambda done: self._finish(batch, done))

    def _fits(self, req: _Queued, texts: int, tokens: int) -> bool:
        return texts + len(req.texts) <= self.max_texts and \
            (not self.max_tokens or tokens + req.tokens <= self.max_tokens)

    def _take(self) -> list[_Queued]:
        """The next batch: a heavy request alone when it is first in the queue and a heavy slot is free; else
        the light requests in queue order while they fit, passing over heavy ones that must wait for a slot."""
        batch: list[_Queued] = []
        texts = tokens = 0
        for req in list(self.queue):
            if req.future.done():  # its caller gave up (timed out) before it ran: no work for nobody
                self.queue.remove(req)
                continue
            if req.heavy:
                if not batch and self.heavy_running < self.heavy_slots:
                    self.queue.remove(req)
                    return [req]
                continue  # waits for a heavy slot; light requests behind it may go first
            if batch and not self._fits(req, texts, tokens):
                break
            self.queue.remove(req)
            batch.append(req)
            texts += len(req.texts)
            tokens += req.tokens
        return batch

    async def _dispatch(self) -> None:
        while True:
            await self.wakeup.wait()
            self.wakeup.clear()
            # every worker busy: the end of a batch wakes this again while requests wait
            while self.queue and self.running < self.workers:
                if self.running and self.window > 0:  # under load: let a few more requests join this batch
                    await self._gather_more(time.perf_counter() + self.window)
                batch = self._take()
                if not batch:
                    break
                self._start(batch)

    async def _gather_more(self, deadline: float) -> None:
        """Wait until `deadline` or a full batch, woken by each new request rather than polling."""
        while sum(len(r.texts) for r in self.queue) < self.max_texts and \
                (not self.max_tokens or sum(r.tokens for r in self.queue) < self.max_tokens):
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                return
            self.wakeup.clear()
            try:
                await asyncio.wait_for(self.wakeup.wait(), remaining)
            except TimeoutError:
                return

    def _finish(self, batch: list[_Queued], done: asyncio.Future[list[Answer]]) -> None:
        """A batch's outcome to its requests (not ready, or a bug: every request of the batch gets the error)."""
        self.batches.discard(done)
        self.running -= 1
        self.heavy_running -= batch[0].heavy
        if self.queue:  # requests waiting for a worker (a heavy one, for a heavy slot)
            self.wakeup.set()
        if done.cancelled():
            for r in batch:
                r.future.cancel()
            return
        error = done.exception()
        if error is not None:
            for r in batch:
                if not r.future.done():
                    r.future.set_exception(error)
            return
        answers = done.result()
        encoded = max((res.batch_texts for _, res in answers), default=0)  # refused filters encode nothing
        if encoded:
            self.on_batch(encoded)
        for r, answer in zip(batch, answers, strict=True):
            if not r.future.done():
                r.future.set_result(answer)
