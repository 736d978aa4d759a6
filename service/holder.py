"""The served engine, swappable while requests run.

Each request leases the engine it starts with and keeps it to the end; a swap only changes what the *next*
lease gets. The old engine is closed (its SQLite store) when its last lease is returned, and its memory (FAISS
index, ONNX session unless reused) goes with the last reference.
"""

from __future__ import annotations

import logging
import threading
import weakref

from service.engine import SearchEngine

log = logging.getLogger(__name__)


class NotReady(RuntimeError):
    pass


class EngineHolder:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._engine: SearchEngine | None = None
        self._leases: dict[int, int] = {}  # id(engine) -> requests using it
        self._retired: dict[int, SearchEngine] = {}  # swapped out, waiting for their last lease
        self._alive: weakref.WeakSet[SearchEngine] = weakref.WeakSet()  # what is still in memory

    @property
    def engine(self) -> SearchEngine | None:
        return self._engine

    def acquire(self) -> SearchEngine:
        with self._lock:
            engine = self._engine
            if engine is None:
                raise NotReady("no engine loaded")
            self._leases[id(engine)] = self._leases.get(id(engine), 0) + 1
            return engine

    def release(self, engine: SearchEngine) -> None:
        with self._lock:
            left = self._leases[id(engine)] - 1
            if left:
                self._leases[id(engine)] = left
                return
            del self._leases[id(engine)]
            retired = self._retired.pop(id(engine), None)
        if retired is not None:
            self._close(retired)

    def swap(self, new: SearchEngine) -> SearchEngine | None:
        """Serve `new` from the next lease on; the old engine closes once its in-flight requests are done."""
        with self._lock:
            old, self._engine = self._engine, new
            self._alive.add(new)
            close_now = old is not None and id(old) not in self._leases
            if old is not None and not close_now:
                self._retired[id(old)] = old
        if close_now and old is not None:
            self._close(old)
        return old

    def close(self) -> None:
        with self._lock:
            engines = [e for e in (self._engine, *self._retired.values()) if e is not None]
            self._engine = None
            self._retired.clear()
        for e in engines:
            self._close(e)

    def alive(self) -> int:
        """Engines still in memory (served + retired + not yet garbage-collected)."""
        return len(self._alive)

    @staticmethod
    def _close(engine: SearchEngine) -> None:
        log.info("closing index %s (no requests left on it)", engine.version)
        engine.close()
