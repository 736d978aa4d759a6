"""Leases on the served searcher (`service.engine.leases`), on real searchers (the exported MiniLM encoder, the
Quora root's IVF version, a live overlay with written documents): a searcher swapped out while a batch holds it is
closed only once that batch returns its lease, and then on the retiring thread below the searches' priority, not on
the thread that returned the lease (a search's worker, the event loop): its written documents are freed there, and
it leaves memory without waiting for the next search."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import weakref
from pathlib import Path

import numpy as np
import pytest

from indexer.runtime.layout import IndexRoot
from indexer.runtime.live_index import LiveIndex
from indexer.runtime.version import IndexVersion
from indexer.runtime.writelog import UPSERT, LogEntry
from service.engine.encoders import EncoderCache
from service.engine.errors import NotReady
from service.engine.leases import Leases
from service.engine.searcher import Searcher

NICE = 5


def nice_of_this_thread() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def searcher(root: Path, encoders: EncoderCache) -> Searcher:
    index = IndexVersion(IndexRoot(root).current_dir())
    s = Searcher(encoders.get(Path(index.manifest.model.dir)), index)
    s.index = LiveIndex(index)
    return s


def test_a_swapped_out_searcher_is_retired_on_its_own_thread_once_its_last_lease_returns(quora_root: Path) -> None:
    encoders, leases = EncoderCache(1), Leases(NICE)
    old = searcher(quora_root, encoders)
    leases.swap(old)
    vecs = np.random.default_rng(0).standard_normal((500, old.index.dim)).astype(np.float32)
    overlay = old.index.overlay
    overlay.apply([LogEntry(i + 1, UPSERT, f"w-{i}", f"written {i}", {"n": i}, vecs[i], "sha") for i in range(500)])
    closed_on: list[tuple[str, int]] = []
    close = old.close

    def recorded() -> None:
        closed_on.append((threading.current_thread().name, nice_of_this_thread()))
        close()

    old.close = recorded  # type: ignore[method-assign]
    held = leases.acquire()  # a batch in flight on the old searcher
    assert held is old
    new = searcher(quora_root, encoders)
    assert leases.swap(new) is old and leases.current is new
    time.sleep(0.2)
    assert closed_on == [] and overlay.written == 500  # its batch still reads it
    leases.release(held)
    del held
    for _ in range(500):
        if closed_on and overlay.written == 0:
            break
        time.sleep(0.01)
    assert overlay.written == 0 and len(closed_on) == 1
    thread, nice = closed_on[0]
    assert thread.startswith("retire") and thread != threading.current_thread().name
    assert nice == min(19, nice_of_this_thread() + NICE)
    gone = weakref.ref(old)
    old = close = recorded = None  # type: ignore[assignment]  # (the closure's cell too: it held the old one)
    for _ in range(500):  # nothing but the retiring thread's collection to wait for
        if gone() is None and leases.alive() == 1:
            break
        time.sleep(0.01)
    assert gone() is None and leases.alive() == 1
    assert leases.acquire() is new
    leases.release(new)
    leases.close()


def test_close_waits_for_a_retirement_under_way_and_closes_the_served_searcher(quora_root: Path) -> None:
    encoders, leases = EncoderCache(1), Leases(0)
    first, second = searcher(quora_root, encoders), searcher(quora_root, encoders)
    vecs = np.random.default_rng(1).standard_normal((300, first.index.dim)).astype(np.float32)
    first.index.overlay.apply([LogEntry(i + 1, UPSERT, f"w-{i}", f"written {i}", {}, vecs[i], "sha")
                               for i in range(300)])
    leases.swap(first)
    leases.swap(second)  # no batch on the first: retired at once, on the retiring thread
    leases.close()  # returns once that retirement is done, and closes the second here
    assert first.index.overlay.written == 0
    for s in (first, second):
        with pytest.raises(sqlite3.ProgrammingError):
            s.index.base.store.max_id()
    with pytest.raises(NotReady):
        leases.acquire()
