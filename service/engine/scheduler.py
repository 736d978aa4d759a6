"""The shared scheduler: admission, the timeout, the inference workers and micro-batching, for every collection of
the process.

A call is admitted or refused here, once: `Overloaded` when `max_in_flight` searches and encodes are already
admitted (across all collections: the cores are shared) — or, for a write's texts, when the writes' own share
(`max_write_in_flight`) is: writes never take a search's slot, so a burst of writes cannot turn searches into
429s (searches keep priority from admission on, as they do on the cores: `write_lane`) — `NotReady` when its
collection serves no version, `TimedOut` when the answer takes longer than `request_timeout_s`. Admitted
searches and encodes are micro-batched (`batching`) with one batcher per encoder: collections that pair with the same
encoder (`encoders`) share its batches. A batch runs on one of `workers` threads; it leases each of its collections'
searchers for its whole run (`leases`), so a swap never mixes two versions in one answer. When a batch spans several
collections, their texts are encoded in one ONNX run and each collection's searcher then searches its own index with
those vectors.

Writes' texts are encoded on the write lane (`write_lane`, shared: its threads are a share of the same cores).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol

import numpy as np

from indexer.runtime.encoder import Encoded, OnnxEncoder
from indexer.runtime.faiss.devices import set_threads
from indexer.runtime.query import Query
from service.engine.batching import Answer, MicroBatcher
from service.engine.encoders import EncoderCache
from service.engine.errors import EngineError, NotReady, Overloaded, TimedOut
from service.engine.leases import Leases
from service.engine.metrics import Metrics
from service.engine.searcher import Job, Searcher, SearchResult
from service.engine.settings import EngineSettings
from service.engine.tracing import Tracing
from service.engine.workers import Workers
from service.engine.write_lane import WriteLane


class Route(Protocol):
    """What the scheduler needs of a collection: its served searcher, and why it has none."""

    name: str
    leases: Leases

    def not_ready_reason(self) -> str: ...


class Scheduler:
    def __init__(self, settings: EngineSettings, metrics: Metrics, tracing: Tracing | None = None) -> None:
        self.settings, self.metrics, self.tracing = settings, metrics, tracing or Tracing()
        self.encoders = EncoderCache(settings.threads)
        self.in_flight = 0  # admitted calls not answered yet (queued or in a running batch), all collections
        self.write_in_flight = 0  # of them, writes' (their own share: never counted against the searches')
        self.max_write_in_flight = settings.max_write_in_flight or max(1, settings.max_in_flight // 4)
        # read when /metrics is scraped, not set twice per call (each `set` takes the gauge's lock)
        metrics.in_flight.set_function(lambda: self.in_flight)
        # OpenMP's thread count is per thread: each worker sets its own, or every batched FAISS search would take
        # a team of every core (and libgomp's spin-waiting after it), `workers` teams fighting the ONNX runs.
        # (`Workers`: a thread pool whose hand-off to the event loop and back is one queue put and one wakeup)
        self.pool = Workers(max_workers=settings.workers, thread_name_prefix="inference",
                                       initializer=set_threads, initargs=(settings.threads,))
        self.write_lane = WriteLane(threads=settings.write_threads or max(1, settings.workers // 2),
                                    nice=settings.write_nice, chunk_texts=settings.write_chunk_texts)
        # background compactions at once, across the collections (`compactor`): each is a child process of cores
        self.compactions = asyncio.Semaphore(settings.max_compactions)
        self.batchers: dict[int, MicroBatcher] = {}  # by id() of the encoder their requests are encoded with
        self._batcher_encoders: dict[int, weakref.ref[OnnxEncoder]] = {}
        self.running = False

    async def start(self) -> None:
        self.running = True

    async def stop(self) -> None:
        self.running = False
        for batcher in list(self.batchers.values()):
            await batcher.stop()
        self.batchers.clear()
        self.pool.shutdown(wait=True)
        self.write_lane.close()

    # -- admission, timeout -------------------------------------------------------------------------------------
    async def call(self, route: Route, query: Query, *, write: bool = False) -> Answer:
        """Admit, run and time out one call on `route`'s collection: a search or encode (micro-batched), or a
        write's texts (`write`: on the write lane). A search that brings its query `vectors` encodes nothing: it
        is not batched with texts to encode, it runs on a worker at once."""
        s = self.settings
        if write and self.write_in_flight >= self.max_write_in_flight:
            self.metrics.rejected.labels("busy").inc()
            raise Overloaded(self.write_in_flight, self.max_write_in_flight, s.retry_after_s, "writes")
        if not write and self.in_flight - self.write_in_flight >= s.max_in_flight:
            self.metrics.rejected.labels("busy").inc()
            raise Overloaded(self.in_flight - self.write_in_flight, s.max_in_flight, s.retry_after_s)
        searcher = route.leases.current
        if searcher is None:
            raise NotReady(route.not_ready_reason())
        future: asyncio.Future[Answer]
        if write:
            future = asyncio.ensure_future(self.write_lane.encode(query.texts, route.leases))
        elif query.vectors is not None:  # nothing to encode: not batched with texts, run on a worker at once
            future = asyncio.ensure_future(self._run_one(query, route))
        elif s.micro_batching:
            future = self._batcher(searcher.encoder).submit(query, route=route)
        else:
            future = asyncio.ensure_future(self._run_one(query, route))
        self.in_flight += 1
        self.write_in_flight += write
        admitted = time.time_ns()
        try:  # (a timeout scope, not wait_for: one hop less through the event loop per call)
            async with asyncio.timeout(s.request_timeout_s):
                # a search awaits its future itself: the timeout, or the request's task cancelled (its client
                # gone), cancels it — a queued request is dropped, a running batch finishes and returns its leases,
                # its answer unread. A write's encoding is shielded: it runs to its end whatever the request does.
                answered_by, result = await (asyncio.shield(future) if write else future)
        except TimeoutError:
            future.cancel()  # (a write's encoding: dropped now, not yet logged)
            self.metrics.rejected.labels("timeout").inc()
            raise TimedOut(s.request_timeout_s) from None
        finally:
            self.in_flight -= 1
            self.write_in_flight -= write
        # this request alone was refused (its filter, its search parameters) or failed in its batch
        if result.error is not None:
            raise result.error
        if self.tracing.enabled and result.timeline is not None:
            self.tracing.record_batch(admitted, result.timeline, {
                "strata.collection": route.name,
                "strata.index_version": answered_by.version, "strata.texts": len(query.texts),
                "strata.batch_texts": result.batch_texts, **({} if result.mode is None else {
                    "strata.mode": result.mode, "strata.dense_ms": round(result.stages.dense_ms, 3),
                    "strata.lexical_ms": round(result.stages.lexical_ms, 3),
                    "strata.fusion_ms": round(result.stages.fusion_ms, 3)})})
        return answered_by, result

    @contextlib.asynccontextmanager
    async def admitted(self) -> AsyncIterator[None]:
        """A call that is not batched (documents read back by id, counted, paged) admitted like a search: counted
        against the searches' in-flight cap while it runs (`Overloaded` past it; writes' calls do not count), and
        `TimedOut` past the request timeout."""
        s = self.settings
        if self.in_flight - self.write_in_flight >= s.max_in_flight:
            self.metrics.rejected.labels("busy").inc()
            raise Overloaded(self.in_flight - self.write_in_flight, s.max_in_flight, s.retry_after_s)
        self.in_flight += 1
        try:
            async with asyncio.timeout(s.request_timeout_s):
                yield
        except TimeoutError:
            self.metrics.rejected.labels("timeout").inc()
            raise TimedOut(s.request_timeout_s) from None
        finally:
            self.in_flight -= 1

    def _batcher(self, encoder: OnnxEncoder) -> MicroBatcher:
        """The batcher of `encoder`'s requests, started on first use (and replaced if its encoder was freed and
        another one took its id)."""
        key = id(encoder)
        batcher = self.batchers.get(key)
        if batcher is not None and self._batcher_encoders[key]() is encoder:
            return batcher
        s = self.settings
        ref = weakref.ref(encoder)

        def count_tokens(texts: list[str]) -> int:  # the batch's tokenizer, without keeping the encoder alive
            enc = ref()
            return sum(enc.token_counts(texts)) if enc is not None else 0

        old = batcher
        batcher = MicroBatcher(self._run, workers=s.workers, window_ms=s.batch_window_ms, max_texts=s.batch_max_texts,
                               max_tokens=s.batch_max_tokens, count_tokens=count_tokens,
                               max_text_tokens=encoder.meta.max_length, on_batch=self.metrics.batch_texts.observe)
        batcher.start()
        self.batchers[key], self._batcher_encoders[key] = batcher, ref
        if old is not None:  # its encoder is gone: let it drain what it queued
            asyncio.get_running_loop().create_task(old.stop())
        return batcher

    # -- the workers ----------------------------------------------------------------------------------------------
    async def _run_one(self, job: Job, route: Route) -> Answer:
        return (await self._run([job], [route]))[0]

    def _run(self, jobs: list[Job], routes: Sequence[Route]) -> asyncio.Future[list[Answer]]:
        """A batch on a worker, in the request's context (its id in the worker's log lines)."""
        return self.pool.run(run_routed, jobs, routes)


def run_routed(jobs: list[Job], routes: Sequence[Route]) -> list[Answer]:
    """Run a batch (on a worker): each collection's jobs with its searcher leased for the whole run. Several
    collections on one encoder: one ONNX run for all their texts, then each searches its own index."""
    groups: dict[int, list[int]] = {}
    for j, route in enumerate(routes):
        groups.setdefault(id(route), []).append(j)
    leased: list[tuple[Route, Searcher]] = []
    answers: list[Answer | None] = [None] * len(jobs)
    try:
        searchers: dict[int, Searcher] = {}
        for key, members in groups.items():
            route = routes[members[0]]
            try:
                searcher = route.leases.acquire()  # raises NotReady once the collection is closed
            except EngineError as exc:
                if len(groups) == 1:
                    raise
                for j in members:  # this collection's requests fail; the others' are answered
                    answers[j] = (None, SearchResult([], [], 0.0, 0.0, error=exc))  # type: ignore[assignment]
                continue
            leased.append((route, searcher))
            searchers[key] = searcher
        shared = _prefetch(jobs, groups, searchers) if len(searchers) > 1 else None
        for key, searcher in searchers.items():
            members = groups[key]
            results = searcher.run_batch([jobs[j] for j in members], shared)
            for j, result in zip(members, results, strict=True):
                if shared is not None and result.batch_texts:  # its texts ran in the batch's one ONNX run
                    result.batch_texts = len(shared.rows)  # type: ignore[attr-defined]
                answers[j] = (searcher, result)
    finally:
        for route, searcher in leased:
            route.leases.release(searcher)
    return answers  # type: ignore[return-value]


def _prefetch(jobs: list[Job], groups: dict[int, list[int]], searchers: dict[int, Searcher]) -> OnnxEncoder | None:
    """One ONNX run for the texts of every collection of a batch whose searchers share an encoder (None when they
    do not: a swap to another encoder between submit and run); the view that answers each searcher from it."""
    encoders = {id(s.encoder) for s in searchers.values()}
    if len(encoders) != 1:
        return None
    encoder = next(iter(searchers.values())).encoder
    texts: dict[str, None] = {}
    for key, searcher in searchers.items():
        default = searcher.default_mode()
        for j in groups[key]:
            job = jobs[j]
            if job.vectors is None and (job.top_k is None or (job.mode or default) != "lexical"):
                texts.update(dict.fromkeys(job.texts))
    if not texts:
        return None
    unique = list(texts)
    try:
        encoded = encoder.encode_counted(unique, batch_size=len(unique))
    except Exception:  # noqa: BLE001 (each collection's run encodes on its own, and fails its culprit alone)
        return None
    return _Prefetched(encoder, {t: i for i, t in enumerate(unique)}, encoded)  # type: ignore[return-value]


class _Prefetched:
    """An encoder that answers from one batch's vectors (texts it was not given are encoded as usual)."""

    def __init__(self, encoder: OnnxEncoder, rows: dict[str, int], encoded: Encoded) -> None:
        self.encoder, self.rows, self.encoded = encoder, rows, encoded
        self.dim, self.meta, self.model_dir = encoder.dim, encoder.meta, encoder.model_dir

    def encode_counted(self, texts: Sequence[str], batch_size: int = 64, **kwargs: Any) -> Encoded:
        if not all(t in self.rows for t in texts):
            return self.encoder.encode_counted(texts, batch_size, **kwargs)
        idx = [self.rows[t] for t in texts]
        e = self.encoded
        return Encoded(np.ascontiguousarray(e.vectors[idx]), [e.truncated[i] for i in idx], [e.tokens[i] for i in idx])
