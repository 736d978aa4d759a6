"""Running an engine scenario: a `Collection` over an index root, started, handed to an async function, stopped."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from service.engine import Collection
from service.settings import Settings


def run(root: Path, scenario: Callable[[Collection], Awaitable[None]]) -> None:
    """`scenario(collection)` on a one-worker, one-thread collection over `root` with no watcher, stopped after."""
    async def go() -> None:
        collection = Collection(Settings(index_root=root, workers=1, threads=1, watch_interval_s=0, write_threads=1,
                                         request_timeout_s=300))
        await collection.start()
        try:
            await scenario(collection)
        finally:
            await collection.stop()

    asyncio.run(go())
