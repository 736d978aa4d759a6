"""The compactor's answer to an upsert held back at the overlay's bound: when to send it again (`Retry-After`),
from the running compaction's likely end. (Held-back writes on a real server: tests/service/test_compaction.py.)"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from indexer.runtime.collection_config import Compaction
from service.engine.compactor import HELD_BACK_RETRY_MAX_S, HELD_BACK_RETRY_S, Compactor, Outcome
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
