"""Leases on the served searcher, swappable while requests run.

Each batch leases the searcher current when it starts and keeps it to the end; a swap only changes what the
*next* lease gets. The old searcher is retired when its last lease is returned: closed (its SQLite store, its shard
deployments), its written documents freed, and what it leaves in reference cycles collected, on a thread of its own
below the searches' priority. Freeing the overlay of a busy collection in one go holds the GIL for tens of ms, and
a full garbage collection as long again (docs/decisions.md#search-during-an-ingest): on the thread that returned
the last lease (a search's) or on the event loop, every search in flight would wait for it.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor

from indexer.runtime.priority import lower_thread
from service.engine.errors import NotReady
from service.engine.searcher import Searcher

log = logging.getLogger(__name__)


class Leases:
    def __init__(self, nice: int = 0) -> None:
        """`nice`: how many levels below the searches the retiring thread runs."""
        self._lock = threading.Lock()
        self._current: Searcher | None = None
        self._leases: dict[int, int] = {}  # id(searcher) -> batches using it
        self._retired: dict[int, Searcher] = {}  # swapped out, waiting for their last lease
        self._alive: weakref.WeakSet[Searcher] = weakref.WeakSet()  # what is still in memory
        self._retiring = ThreadPoolExecutor(1, thread_name_prefix="retire", initializer=lower_thread,
                                            initargs=(nice,))

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
            self._retire(retired)

    def swap(self, new: Searcher) -> Searcher | None:
        """Serve `new` from the next lease on; the old searcher closes once its in-flight batches are done."""
        with self._lock:
            old, self._current = self._current, new
            self._alive.add(new)
            close_now = old is not None and id(old) not in self._leases
            if old is not None and not close_now:
                self._retired[id(old)] = old
        if close_now and old is not None:
            self._retire(old)
        return old

    def close(self) -> None:
        with self._lock:
            searchers = [s for s in (self._current, *self._retired.values()) if s is not None]
            self._current = None
            self._retired.clear()
        self._retiring.shutdown(wait=True)  # the retirements under way finish first
        for s in searchers:
            _close(s)

    def alive(self) -> int:
        """Searchers still in memory (served + retired + not yet garbage-collected)."""
        return len(self._alive)

    def _retire(self, searcher: Searcher) -> None:
        try:
            self._retiring.submit(_close, searcher)
        except RuntimeError:  # shut down (the app is stopping): here, then
            _close(searcher)
            return
        with contextlib.suppress(RuntimeError):  # a task of its own: the one above has let the searcher go by then
            self._retiring.submit(gc.collect)


def _close(searcher: Searcher) -> None:
    log.info("closing index %s (no requests left on it)", searcher.version)
    searcher.close()
