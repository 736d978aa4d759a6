"""Leases on the served searcher, swappable while requests run.

Each batch leases the searcher current when it starts and keeps it to the end; a swap only changes what the
*next* lease gets. The old searcher is closed (its SQLite store, its shard deployments) when its last lease is
returned, and its memory (FAISS index, ONNX session unless reused) goes with the last reference.
"""

from __future__ import annotations

import logging
import threading
import weakref

from service.engine.errors import NotReady
from service.engine.searcher import Searcher

log = logging.getLogger(__name__)


class Leases:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: Searcher | None = None
        self._leases: dict[int, int] = {}  # id(searcher) -> batches using it
        self._retired: dict[int, Searcher] = {}  # swapped out, waiting for their last lease
        self._alive: weakref.WeakSet[Searcher] = weakref.WeakSet()  # what is still in memory

    @property
    def current(self) -> Searcher | None:
        return self._current

    def acquire(self) -> Searcher:
        with self._lock:
            searcher = self._current
            if searcher is None:
                raise NotReady("no index loaded")
            self._leases[id(searcher)] = self._leases.get(id(searcher), 0) + 1
            return searcher

    def release(self, searcher: Searcher) -> None:
        with self._lock:
            left = self._leases[id(searcher)] - 1
            if left:
                self._leases[id(searcher)] = left
                return
            del self._leases[id(searcher)]
            retired = self._retired.pop(id(searcher), None)
        if retired is not None:
            self._close(retired)

    def swap(self, new: Searcher) -> Searcher | None:
        """Serve `new` from the next lease on; the old searcher closes once its in-flight batches are done."""
        with self._lock:
            old, self._current = self._current, new
            self._alive.add(new)
            close_now = old is not None and id(old) not in self._leases
            if old is not None and not close_now:
                self._retired[id(old)] = old
        if close_now and old is not None:
            self._close(old)
        return old

    def close(self) -> None:
        with self._lock:
            searchers = [s for s in (self._current, *self._retired.values()) if s is not None]
            self._current = None
            self._retired.clear()
        for s in searchers:
            self._close(s)

    def alive(self) -> int:
        """Searchers still in memory (served + retired + not yet garbage-collected)."""
        return len(self._alive)

    @staticmethod
    def _close(searcher: Searcher) -> None:
        log.info("closing index %s (no requests left on it)", searcher.version)
        searcher.close()
