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
    assert not c._interval_holds(due, policy, now)  # none ran yet
    c._last_end = now - 10
    assert c._interval_holds(due, policy, now)  # one ended 10 s ago
    assert not c._interval_holds(due, policy, now + 51)  # 60 s after it
    assert not c._interval_holds(Pending(entries=60, written_docs=60, due="d", outgrown=True), policy, now)
    assert not c._interval_holds(Pending(entries=1000, written_docs=1000, due="bound"), policy, now)
