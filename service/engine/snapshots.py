"""One collection's snapshots over the API: made of the version it serves, one at a time, off the event loop and
below the API's CPU priority; listed, found and deleted. What a snapshot holds and how it is read back are the
runtime's (`indexer.runtime.snapshot`, `indexer.runtime.restore`)."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from pathlib import Path

from indexer.runtime import snapshot
from indexer.runtime.snapshot import SnapshotInfo
from service.engine.errors import NotReady


def _made_below_priority(root: Path, version: str) -> SnapshotInfo:
    """On a thread of its own, niced (Linux: a thread's nice value is its own), so that reading and hashing the
    version's files leaves the cores to searches."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, min(19, os.getpriority(os.PRIO_PROCESS, 0) + 10))
    except (OSError, AttributeError):
        pass
    return snapshot.create(root, version=version)


class Snapshots:
    def __init__(self, root: Path, served_version: Callable[[], str | None], not_ready: Callable[[], str]) -> None:
        self.root, self._served, self._not_ready = Path(root), served_version, not_ready
        self._lock = asyncio.Lock()

    async def create(self) -> SnapshotInfo:
        """A snapshot of the served version and the write log up to now (one at a time per collection)."""
        async with self._lock:
            version = self._served()
            if version is None:
                raise NotReady(self._not_ready())
            loop = asyncio.get_running_loop()
            # a fresh thread, not the default pool's: the nice value it takes must not stay with a shared worker
            future: asyncio.Future[SnapshotInfo] = loop.create_future()

            def run() -> None:
                try:
                    result = _made_below_priority(self.root, version)
                except BaseException as exc:  # noqa: BLE001 (handed to the awaiting request)
                    loop.call_soon_threadsafe(future.set_exception, exc)
                else:
                    loop.call_soon_threadsafe(future.set_result, result)

            threading.Thread(target=run, name="snapshot", daemon=True).start()
            return await asyncio.shield(future)

    def list(self) -> list[SnapshotInfo]:
        return snapshot.list_snapshots(self.root)

    def path(self, name: str) -> Path:
        """The archive to download; SnapshotNotFound."""
        return snapshot.archive_path(self.root, name)

    def info(self, name: str) -> SnapshotInfo | None:
        """What the list shows of `name` (None: its record is unreadable); SnapshotNotFound."""
        self.path(name)
        return next((s for s in self.list() if s.name == name), None)

    async def delete(self, name: str) -> None:
        async with self._lock:  # never under a snapshot being made
            await asyncio.to_thread(snapshot.delete, self.root, name)
