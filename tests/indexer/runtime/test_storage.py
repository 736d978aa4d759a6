"""Faults of the disk under the runtime's writers, injected for real (`tests.faults`): a 2 MiB tmpfs filled up
(ENOSPC from the kernel), the tmpfs remounted read-only, fsync returning EIO (an LD_PRELOAD shim, in a child
process). The write log and the staging of a version must raise StorageFull / StorageUnavailable naming the file,
keep nothing half-written, and work again as soon as the fault is gone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from indexer.runtime.faiss.files import INDEX_FILE, write_index
from indexer.runtime.integrity import verify_folder
from indexer.runtime.layout import BUILDING_PREFIX, IndexRoot
from indexer.runtime.storage import StorageFull, StorageUnavailable
from indexer.runtime.writelog import Delete, Upsert, WriteLog, log_path
from tests.conftest import REPO
from tests.faults import fsync_shim, shim_env, small_fs

VEC = np.ones(384, dtype=np.float32)


def upserts(n: int, size: int = 8) -> list[Upsert]:
    return [Upsert(f"d{n}-{i}", f"text {n} {i}", {"pad": "p" * 2000}, VEC, "sha") for i in range(size)]


def test_the_write_log_on_a_full_disk_refuses_whole_appends_and_takes_the_next_once_freed(tmp_path: Path) -> None:
    with small_fs(tmp_path / "fs", "2m") as fs:
        wlog = WriteLog(log_path(fs.path))
        acked = [wlog.append(upserts(0))]
        fs.fill()
        with pytest.raises(StorageFull) as caught:
            for n in range(1, 200):  # until the WAL needs a page the disk does not have
                acked.append(wlog.append(upserts(n)))
        assert caught.value.path == log_path(fs.path) and "no space left" in str(caught.value)
        refused_seq = acked[-1]
        assert wlog.last_seq() == refused_seq  # the refused transaction left nothing, not even a seq
        assert len(list(wlog.entries())) == 8 * len(acked)
        fs.free()
        assert wlog.append([Delete("d0-0")]) == refused_seq + 1  # the same object, no reopen by the caller
        wlog.close()
        reopened = WriteLog(log_path(fs.path), create=False)
        try:
            assert [e.seq for e in reopened.entries()] == list(range(1, refused_seq + 2))
        finally:
            reopened.close()


def test_the_write_log_on_a_read_only_mount_is_replayed_and_appended_to_once_writable(tmp_path: Path) -> None:
    with small_fs(tmp_path / "fs", "2m") as fs:
        wlog = WriteLog(log_path(fs.path))
        wlog.append(upserts(0, 2))
        wlog.close()
        fs.read_only()
        wlog = WriteLog(log_path(fs.path), create=False)
        try:
            assert wlog.read_only and [e.ext_id for e in wlog.entries()] == ["d0-0", "d0-1"]
            with pytest.raises(StorageUnavailable, match="read-only"):
                wlog.append([Delete("d0-0")])
            fs.writable()
            assert wlog.append([Delete("d0-0")]) == 3 and not wlog.read_only
        finally:
            wlog.close()


def test_staging_on_a_full_disk_names_the_file_and_publishes_nothing_then_publishes_once_freed(
        tmp_path: Path) -> None:
    import faiss

    index = faiss.IndexFlatIP(64)
    index.add(np.random.default_rng(0).random((4000, 64), dtype=np.float32))  # 1 MiB
    with small_fs(tmp_path / "fs", "2m") as fs:
        root = IndexRoot(fs.path / "root")
        root.root.mkdir()
        fs.fill(leave=256 * 1024)
        with pytest.raises(StorageFull) as caught, root.staging("v1") as stage:
            write_index(index, stage / INDEX_FILE)
        assert caught.value.path == root.root / f"{BUILDING_PREFIX}v1" / INDEX_FILE, caught.value
        assert root.versions() == [] and list(root.root.iterdir()) == []
        fs.free()
        with root.staging("v1") as stage:
            write_index(index, stage / INDEX_FILE)
            (stage / "manifest.json").write_text("{}")
        assert root.versions() == ["v1"] and verify_folder(root.version_dir("v1")).files == 1


STAGE_WITH_FSYNC_FAULT = """
import sys
from pathlib import Path
from indexer.runtime.layout import IndexRoot
from indexer.runtime.storage import StorageError
root = IndexRoot(Path(sys.argv[1]))
try:
    with root.staging("v1") as stage:
        (stage / "manifest.json").write_text("{}")
        (stage / "data.bin").write_bytes(b"x" * 100_000)
except StorageError as exc:
    print(type(exc).__name__, exc.path, exc, sep="\\n")
else:
    print("published")
"""


def test_staging_when_fsync_fails_names_the_file_and_publishes_nothing(tmp_path: Path) -> None:
    """fsync returns EIO (the LD_PRELOAD shim) for the files of the staged version: the seal's manifest write or
    the sync before the rename fails, naming the file; nothing is published. Without the fault it publishes."""
    lib, flag, root = fsync_shim(tmp_path), tmp_path / "fsync-fails", tmp_path / "root"
    root.mkdir()
    env = os.environ | {"PYTHONPATH": str(REPO)} | shim_env(lib, flag, root)

    def stage() -> list[str]:
        r = subprocess.run([sys.executable, "-c", STAGE_WITH_FSYNC_FAULT, str(root)], env=env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip().splitlines()

    flag.touch()
    kind, path, message = stage()
    assert kind == "StorageUnavailable" and Path(path).parent == root / f"{BUILDING_PREFIX}v1", (path, message)
    assert "Input/output error" in message and path in message
    assert IndexRoot(root).versions() == [] and list(root.iterdir()) == []
    flag.unlink()
    assert stage() == ["published"] and IndexRoot(root).versions() == ["v1"]


def test_only_faults_of_the_disk_of_the_root_become_storage_errors(tmp_path: Path) -> None:
    import errno
    import sqlite3

    from indexer.runtime.storage import as_storage_error

    root = tmp_path / "root"
    full = as_storage_error(OSError(errno.ENOSPC, "No space left on device", str(root / "a")), root / "b")
    assert isinstance(full, StorageFull) and full.path == root / "a" and full.errno == errno.ENOSPC
    eio = as_storage_error(sqlite3.OperationalError("disk I/O error"), root / "log.sqlite")
    assert isinstance(eio, StorageUnavailable) and eio.path == root / "log.sqlite"
    faiss_full = as_storage_error(RuntimeError("write error in x: 1 != 2 (No space left on device)"), root / "i")
    assert isinstance(faiss_full, StorageFull) and "No space left on device" in str(faiss_full)
    # a source file outside the root that cannot be read is the caller's error; other errors are not the disk's
    assert as_storage_error(PermissionError(errno.EACCES, "Permission denied", "/data/x"), root, within=root) is None
    assert as_storage_error(FileNotFoundError(errno.ENOENT, "No such file", str(root / "x")), root) is None
    assert as_storage_error(sqlite3.OperationalError("database is locked"), root) is None
