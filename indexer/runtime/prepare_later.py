"""Work on a filter used again, done off the request: one thread per owner (a version, a shard replica), each key
taken up at most once at a time. What it prepares (a filter's gathered codes or own lists, its lexical postings)
only makes later searches faster, so no request waits for it, and those before it is done search as the first did.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor


class PrepareLater:
    """One worker thread, started on first use; `submit(key, task)` runs `task` there unless that key's task is
    already queued or running."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._keys: set[str] = set()
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False

    def submit(self, key: str, task: Callable[[], None]) -> None:
        with self._lock:
            if key in self._keys or self._closed:
                return
            self._keys.add(key)
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix=self.name)
            # under the lock: `close` shuts the pool down only after marking it closed, so this never submits to a
            # pool that is shutting down (which raises, in the request that asked)
            future = self._pool.submit(task)
        future.add_done_callback(lambda _: self._discard(key))  # outside: a done future calls it at once

    def _discard(self, key: str) -> None:
        with self._lock:
            self._keys.discard(key)

    def close(self) -> None:
        """Stop taking tasks, drop the queued ones and wait for the running one (it may read what its owner is
        about to close)."""
        with self._lock:
            self._closed, pool = True, self._pool
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
