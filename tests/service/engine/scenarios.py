"""Running an engine scenario: a `Collection` over an index root (`built_root`: one built from rows), started, handed
to an async function, stopped."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from indexer.build import BuildConfig, build
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


def built_root(folder: Path, rows: list[dict[str, Any]], model: Path, **config: Any) -> Path:  # noqa: ANN401
    """`rows` as a JSONL file in `folder`, built with `model` into `folder/root` (a flat index, no evaluation, one
    thread; `config`: more `BuildConfig` fields)."""
    data = folder / "docs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    build(BuildConfig(model_dir=model, data=str(data), root=folder / "root", index="flat", evaluate=False, threads=1,
                      **config))
    return folder / "root"
