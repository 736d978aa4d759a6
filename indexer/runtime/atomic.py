"""Atomic file and folder writes: a reader sees the old content or the new one, never half of either."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def fsync_dir(path: Path) -> None:
    """Persist a rename in `path` (POSIX needs the directory fsynced, not only the file)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    finally:
        os.close(fd)


def sync_tree(folder: Path) -> None:
    """fsync every file and folder below `folder` (a staged version before it is published), so that a crash of
    the machine after the rename cannot leave a published file empty or short. A failed fsync raises the OSError
    with the file named."""
    for dirpath, _, filenames in os.walk(folder):
        for name in filenames:
            path = os.path.join(dirpath, name)
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            except OSError as exc:
                raise OSError(exc.errno, exc.strerror, path) from exc
            finally:
                os.close(fd)
        fsync_dir(Path(dirpath))


def write_bytes_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; other users (a container's non-root user) must read it
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:  # name the file being written (a write's or fsync's OSError has no filename)
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_json_atomic(path: Path, obj: Any) -> None:
    write_bytes_atomic(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


@contextmanager
def atomic_dir(target: Path, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary sibling folder; on success it replaces `target` in one rename.

    On any exception the temporary folder is removed and `target` is left as it was. With `overwrite`, an
    existing `target` is moved aside first and deleted only after the new folder is in place.
    """
    target = Path(target)
    if target.exists() and not overwrite:
        raise FileExistsError(f"{target} already exists (pass --force to replace it)")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent))
    os.chmod(tmp, 0o755)  # mkdtemp makes 0700
    try:
        yield tmp
        old: Path | None = None
        if target.exists():
            old = target.with_name(f".{target.name}.{os.getpid()}.old")
            os.replace(target, old)
        os.replace(tmp, target)
        fsync_dir(target.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


@contextmanager
def staging_lock(folder: Path) -> Iterator[None]:
    """Held, shared, while an operation stages a folder or file in `folder` to rename into place (a collection
    created or restored, an upload): `sweep_lock` takes it exclusively, so a sweep of leftovers (a server
    starting on the folder) never removes what a running operation of another process is staging. An flock on the
    folder itself (no lock file left in it); the kernel lets go of it when its holder dies, so a killed
    operation's leftovers are swept."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


@contextmanager
def sweep_lock(folder: Path) -> Iterator[bool]:
    """Whether `folder`'s staged leftovers may be swept now: True, with the staging lock held exclusively, when no
    operation is staging there; False (nothing to sweep now) while one is."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)
