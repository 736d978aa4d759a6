"""The searcher's lexical thread: BM25 needs no vector, so a batch's lexical searches run here while the encoder
runs (ONNX Runtime releases the GIL), and a hybrid search costs about the slower of the two, not their sum. One
thread per searcher, started on first use and stopped with the searcher."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


class LexicalThread:
    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lexical")
            return self._pool.submit(fn)

    def shutdown(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
