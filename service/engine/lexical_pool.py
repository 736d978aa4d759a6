"""The searcher's lexical threads: BM25 needs no vector, so a batch's lexical searches run here while the encoder
runs (ONNX Runtime releases the GIL), and a hybrid search costs about the slower of the two, not their sum.

As many threads as the inference workers (one batch in flight each): with one, every concurrent batch's lexical
leg queued behind the others', and at eight connections hybrid's throughput was one lexical thread's, whatever the
cores (docs/decisions.md#hybrids-lexical-legs-beside-each-batch). The engines' searches release the GIL (PISA's
retrieval, tantivy's and bm25s' numeric work), so two legs use two cores. Started on first use, stopped with the
searcher."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


class LexicalPool:
    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"a lexical pool needs at least one thread, not {workers}")
        self.workers = workers
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="lexical")
            return self._pool.submit(fn)

    def shutdown(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
