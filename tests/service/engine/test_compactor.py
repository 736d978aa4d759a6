"""The compactor's answer to an upsert held back at the overlay's bound: when to send it again (`Retry-After`),
from the running compaction's likely end; and when `min_interval_s` holds a due compaction back. (Held-back writes
and an outgrown overlay on a real server: tests/service/test_compaction.py.)"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from indexer.runtime.collection_config import Compaction
from service.engine.compactor import HELD_BACK_RETRY_MAX_S, HELD_BACK_RETRY_S, Compactor, Outcome, Pending
from service.engine.leases import Leases
from service.engine.metrics import Metrics
from service.engine.settings import EngineSettings


async def _swap() -> None:
    return None


def _compactor(tmp_path: Path) -> Compactor:
    return Compactor("c", EngineSettings(index_root=tmp_path), Leases(), lambda: Compaction(), _swap,
                     asyncio.Semaphore(1), Metrics())


def test_a_held_back_write_is_told_to_come_back_when_the_running_compaction_should_end(tmp_path: Path) -> None:
    c = _compactor(tmp_path)
    assert c._retry_after() == HELD_BACK_RETRY_S  # nothing ran yet: no estimate
    c.status.last = Outcome("swapped", "2026-01-01T00:00:00+00:00", 20.0)
    assert c._retry_after() == HELD_BACK_RETRY_S  # none running
    c._started = time.monotonic() - 5
    assert c._retry_after() in (14, 15)  # the last one took 20 s, this one has run 5
    c._started = time.monotonic() - 30
    assert c._retry_after() == HELD_BACK_RETRY_S  # past its estimate: soon, never 0
    c.status.last = Outcome("swapped", "2026-01-01T00:00:00+00:00", 600.0)
    c._started = time.monotonic()
    assert c._retry_after() == HELD_BACK_RETRY_MAX_S  # capped


def test_the_interval_holds_a_due_compaction_back_unless_the_overlay_outgrew_the_version(tmp_path: Path) -> None:
    c, policy = _compactor(tmp_path), Compaction(min_interval_s=60, max_unfolded_docs=1000)
    now = time.monotonic()
    due = Pending(entries=50, written_docs=50, due="50 documents written")
    assert c._interval_holds(due, policy, now) == (False, None)  # none ran yet
    c._last_end = now - 10
    assert c._interval_holds(due, policy, now) == (True, None)  # one ended 10 s ago
    assert c._interval_holds(due, policy, now + 51) == (False, None)  # 60 s after it
    held, why = c._interval_holds(Pending(entries=60, written_docs=60, due="d", outgrown=True), policy, now)
    assert not held and "more documents wait than the version holds" in str(why)
    assert c._interval_holds(Pending(entries=1000, written_docs=1000, due="bound"), policy, now) == (False, None)


def test_the_interval_is_waived_when_the_write_rate_would_reach_the_bound_within_a_compaction(tmp_path: Path
                                                                                              ) -> None:
    """At the rate measured since the last compaction ended, the overlay reaching `max_unfolded_docs` before a
    compaction as long as the last one could end waives `min_interval_s`; a slower rate, too short a measure, or
    no compaction done yet leaves it to hold."""
    c, policy = _compactor(tmp_path), Compaction(min_interval_s=60, max_unfolded_docs=1000)
    now = time.monotonic()
    c._last_end = now - 10
    c.status.last = Outcome("swapped", "t", 20.0)  # the last compaction took 20 s
    c._rate_from = (now - 5, 100)  # 100 waited 5 s ago
    slow = Pending(entries=300, written_docs=300, due="d")  # 40/s: 300 + 800 >= 1000 — waived
    held, why = c._interval_holds(slow, policy, now)
    assert not held and "at 40 documents/s the overlay would reach its bound of 1,000 within the last " \
        "compaction's 20 s" in str(why)
    assert c._interval_holds(Pending(entries=150, written_docs=150, due="d"), policy, now) == (True, None)  # 10/s
    c._rate_from = (now - 0.5, 100)  # measured over too short a time
    assert c._interval_holds(slow, policy, now) == (True, None)
    c._rate_from = None
    assert c._interval_holds(slow, policy, now) == (True, None)
