"""The write lane: writes' texts are encoded behind searches, so a stream of `PUT /documents` does not take the
cores `/search` needs.

Writes' texts do not go through the searches' micro-batcher: a 64-document write would fill a batch (a query
batched with it waiting for all 64 texts), hold one of the `workers` for its whole run, and compete for the cores
at the searches' priority (what that cost `/search` is measured in docs/research.md). The lane keeps writes out of
the searches' way three ways:

- **threads of its own** (`write_threads`, default: half the `workers`, at least one): a write never takes a search
  worker and never shares an ONNX run with a query; searches are micro-batched on the `workers` exactly as without
  writes, and writes never use more than their threads' cores;
- **a lower CPU priority** (`write_nice`, default 10; Linux per-thread nice, relative to the process's): when
  searches and writes both want a core, the kernel gives the searches' threads the larger share (nice +10 weighs
  110 against a nice-0 thread's 1024: about a tenth of a core both want goes to the write); an idle server gives
  writes their cores whole. Nice is a weight, not a wall, so writes slow down under load but never starve. It is
  also a weight against every other process in the same CPU cgroup, so on a crowded host writes slow down with
  everything else (docs/benchmarks.md has the figures); on a host of its own, only the searches compete with them;
- **small chunks** (`write_chunk_texts` texts per ONNX run, one intra-op thread each): a write of 128 documents is
  8 runs of 16 that spread over the lane's threads, and a write that timed out stops after its running chunks
  instead of encoding the rest for nobody.

A write leases the served searcher once, for all its chunks, so all of its vectors come from one encoder.
Durability is unchanged: the encoded write is logged (fsync'd) and applied by `writes.Writes.commit` before the 200.
Elsewhere than Linux the priority is not lowered (the threads and the chunks remain), and the log says so once.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from indexer.runtime.encoder import Encoded
from indexer.runtime.priority import lower_thread
from service.engine.leases import Leases
from service.engine.searcher import Searcher, SearchResult

log = logging.getLogger(__name__)


class WriteLane:
    """Encodes writes' texts on `threads` low-priority threads, `chunk_texts` per ONNX run."""

    def __init__(self, leases: Leases | None = None, *, threads: int, nice: int, chunk_texts: int) -> None:
        self.leases = leases  # the default collection's (one lane serves every collection: `encode(leases=)`)
        self.chunk_texts = chunk_texts
        self.nice = nice
        self._counts = threading.Lock()
        self.pending = 0  # chunks submitted and not ended yet (queued or running)
        self.ran = 0  # chunks encoded (or failed)
        self.dropped = 0  # chunks cancelled before they started: their write had timed out
        # The threads start on the first write, after startup has loaded a version (and its probe query has started
        # the tokenizer's thread pool, if it uses one, at the process's priority: threads inherit their creator's).
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="write-encode",
                                       initializer=lower_thread, initargs=(nice,))
        if nice > 0 and not sys.platform.startswith("linux"):
            log.info("write lane: thread priorities are Linux-only: writes are encoded at the searches' priority "
                     "(still on threads of their own, in chunks of %d)", chunk_texts)

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    async def encode(self, texts: list[str], leases: Leases | None = None) -> tuple[Searcher, SearchResult]:
        """The texts' vectors, with the served searcher's encoder (`SearchResult.vectors`, in text order). Raises
        NotReady when no version is served. Cancelled (the caller timed out): the chunks not started are dropped,
        and the lease is returned when the running ones end."""
        leases = leases or self.leases
        assert leases is not None, "a lane without default leases encodes with the caller's"
        searcher = leases.acquire()
        chunks = [texts[i : i + self.chunk_texts] for i in range(0, len(texts), self.chunk_texts)]
        release = _ReleaseWhenDone(self, leases, searcher, len(chunks))
        with self._counts:
            self.pending += len(chunks)
        ctx = contextvars.copy_context()  # the request id, in the lane threads' log lines
        t0 = time.perf_counter()
        futures: list[Future[Encoded]] = []
        for chunk in chunks:
            f = self.pool.submit(ctx.copy().run, searcher.encoder.encode_counted, chunk, len(chunk), parallel=False)
            f.add_done_callback(release)
            futures.append(f)
        try:
            parts = await asyncio.gather(*(asyncio.wrap_future(f) for f in futures))
        except BaseException:
            for f in futures:
                f.cancel()  # those not started yet; a cancelled future still runs its done callback
            raise
        vectors = np.concatenate([p.vectors for p in parts]) if parts else np.zeros((0, searcher.encoder.dim),
                                                                                      dtype=np.float32)
        encode_ms = (time.perf_counter() - t0) * 1000
        return searcher, SearchResult([], [t for p in parts for t in p.truncated], encode_ms, 0.0, vectors=vectors,
                                      batch_texts=max((len(c) for c in chunks), default=0),
                                      tokens=[n for p in parts for n in p.tokens])


    def _ended(self, future: Future[Encoded]) -> None:
        with self._counts:
            self.pending -= 1
            if future.cancelled():
                self.dropped += 1
            else:
                self.ran += 1


class _ReleaseWhenDone:
    """Counts a write's chunks as they end (run, failed or cancelled) and returns its lease after the last."""

    def __init__(self, lane: WriteLane, leases: Leases, searcher: Searcher, chunks: int) -> None:
        self.lane, self.leases, self.searcher, self.left = lane, leases, searcher, chunks
        self.lock = threading.Lock()
        if chunks == 0:
            leases.release(searcher)

    def __call__(self, future: Future[Encoded]) -> None:
        self.lane._ended(future)
        with self.lock:
            self.left -= 1
            last = self.left == 0
        if last:
            self.leases.release(self.searcher)
