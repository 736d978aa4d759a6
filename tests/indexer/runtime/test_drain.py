"""`indexer.runtime.drain`: a large container is emptied a slice at a time, so a thread waiting for the GIL runs
during the drain; the same container dropped with `clear()` holds every other thread back until it is freed."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from indexer.runtime.drain import SLICE, drain


def big() -> dict[int, tuple[str, int]]:
    return {i: (f"document {i}", i) for i in range(400_000)}  # 400,000 tuples and strings to free


def ticks_during(free: Callable[[], None]) -> int:
    """How many times another Python thread got to run while `free()` ran."""
    ticks, stop, started = [0], threading.Event(), threading.Event()

    def count() -> None:
        started.set()
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0)  # give the GIL back at once: this thread only asks for it

    t = threading.Thread(target=count)
    t.start()
    assert started.wait(10)
    before = ticks[0]
    free()
    during = ticks[0] - before
    stop.set()
    t.join(10)
    return during


@pytest.mark.parametrize("kind", [dict, set, list])
def test_drain_empties_the_container_in_place(kind: type) -> None:
    items = range(3 * SLICE + 7)
    c = kind(zip(items, items, strict=True)) if kind is dict else kind(items)
    same = c
    drain(c)
    assert same is c and len(c) == 0
    drain(c)  # an empty one: nothing to do


def test_another_thread_runs_while_a_big_dict_is_drained_and_not_while_it_is_cleared() -> None:
    # one C call: at most the tick already under way when it started. The switch the waiting thread asked for lands
    # when the call returns, before the count is read, so on a loaded machine a few ticks may follow it: the fewest
    # of three tries is what the call itself let through
    assert min(ticks_during(big().clear) for _ in range(3)) <= 1
    drained = big()
    assert ticks_during(lambda: drain(drained)) >= 400_000 // SLICE // 4  # it ran between most slices
    assert not drained
