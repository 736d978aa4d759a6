"""One collection's snapshots over the API: made of the version it serves, one at a time, off the event loop and
below the API's CPU priority; listed, found and deleted; and one uploaded, restored as a new collection of the
collections folder (`restore_upload`). What a snapshot holds and how it is read back are the runtime's
(`indexer.runtime.snapshot`, `indexer.runtime.restore`)."""

from __future__ import annotations

import asyncio
import os
import secrets
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from indexer.runtime import snapshot
from indexer.runtime.atomic import staging_lock
from indexer.runtime.collection_dirs import UPLOAD_PREFIX, known_encoders
from indexer.runtime.restore import Restored, check_target, restore
from indexer.runtime.snapshot import SnapshotInfo
from indexer.runtime.storage import storage_errors
from service.engine.errors import NotReady, SnapshotTooLarge, UnknownCollection


def _made_below_priority(root: Path, version: str, encoder_dir: Path) -> SnapshotInfo:
    """On a thread of its own, niced (Linux: a thread's nice value is its own), so that reading and hashing the
    version's files leaves the cores to searches."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, min(19, os.getpriority(os.PRIO_PROCESS, 0) + 10))
    except (OSError, AttributeError):
        pass
    return snapshot.create(root, version=version, encoder_dir=encoder_dir)


class Snapshots:
    def __init__(self, root: Path, served: Callable[[], tuple[str, Path] | None], not_ready: Callable[[], str],
                 name: str = "") -> None:
        """`served`: the served version and the encoder folder it is served with (None: nothing served)."""
        self.root, self._served, self._not_ready, self.name = Path(root), served, not_ready, name
        self._lock = asyncio.Lock()
        self._closed = False
        self._making: asyncio.Future[SnapshotInfo] | None = None  # the last one's (its request may be gone)

    async def close(self) -> None:
        """Wait for the snapshot being made (its files are read from the collection's folder) and make no more: the
        collection is stopped, to be deleted or at shutdown."""
        async with self._lock:
            self._closed = True
            if self._making is not None and not self._making.done():
                await asyncio.wait([self._making])

    async def create(self) -> SnapshotInfo:
        """A snapshot of the served version and the write log up to now (one at a time per collection);
        UnknownCollection once the collection is stopped (deleted)."""
        async with self._lock:
            if self._closed:
                raise UnknownCollection(f"collection {self.name!r} was deleted: no snapshot of it is made")
            served = self._served()
            if served is None:
                raise NotReady(self._not_ready())
            version, encoder_dir = served
            loop = asyncio.get_running_loop()
            # a fresh thread, not the default pool's: the nice value it takes must not stay with a shared worker
            future: asyncio.Future[SnapshotInfo] = loop.create_future()
            self._making = future

            def run() -> None:
                try:
                    result = _made_below_priority(self.root, version, encoder_dir)
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


async def restore_upload(folder: Path, name: str, chunks: AsyncIterator[bytes], max_bytes: int,
                         encoders: list[Path]) -> Restored:
    """A snapshot uploaded as a stream of `chunks`, restored as collection `name` of the collections `folder`: the
    bytes go to a file beside it (never into memory), then `restore` checks the archive whole and renames it into
    place; nothing is left of a refused or cut upload."""
    target = folder / name
    check_target(target)
    upload = folder / f"{UPLOAD_PREFIX}{name}-{secrets.token_hex(4)}.tar"  # a crash leaves it: startup's sweep
    with ExitStack() as held:
        # a sweep of another process leaves the upload alone meanwhile (taken off the event loop: it waits for one)
        await asyncio.to_thread(held.enter_context, staging_lock(folder))
        return await _receive_and_restore(upload, target, chunks, max_bytes, encoders)


async def _receive_and_restore(upload: Path, target: Path, chunks: AsyncIterator[bytes], max_bytes: int,
                               encoders: list[Path]) -> Restored:
    try:
        size = 0
        with storage_errors(upload, "receiving an uploaded snapshot"), open(upload, "wb") as fh:
            async for chunk in chunks:
                size += len(chunk)
                if size > max_bytes:
                    raise SnapshotTooLarge(f"the uploaded snapshot is over {max_bytes:,} bytes "
                                           f"(STRATA_MAX_SNAPSHOT_BYTES)")
                fh.write(chunk)
        # its reasons name the upload, not the server's temporary file (removed below)
        return await asyncio.to_thread(restore, upload, target, encoders=encoders, origin="the uploaded snapshot",
                                       encoder_hint=UPLOAD_ENCODER_HINT)
    finally:
        upload.unlink(missing_ok=True)


UPLOAD_ENCODER_HINT = ("put its folder in the server's models folder (STRATA_MODELS_DIR), or restore the archive "
                       "with `indexer snapshot restore ARCHIVE --root DIR --encoder DIR`")


def encoders_known(collections: Any, model_dir: Path | None, models_dir: Path | None = None  # noqa: ANN401
                   ) -> list[Path]:
    """The encoder folders an uploaded snapshot may pair with: the server's `model_dir`, every served collection's,
    and every exported encoder of the models folder (`models_dir`: those `POST /collections` may name); a snapshot's
    own recorded folder is tried first by `restore`, and each is checked byte for byte against the snapshot's."""
    found = [model_dir] if model_dir is not None else []
    for collection in collections.by_name.values():
        searcher = collection.leases.current
        if searcher is not None:
            found.append(Path(searcher.encoder.model_dir))
    if models_dir is not None:
        found.extend(known_encoders(models_dir).values())
    return list(dict.fromkeys(found))
