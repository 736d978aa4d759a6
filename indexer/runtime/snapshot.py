"""Snapshots of a collection: one consistent, checksummed archive of what it serves, made while writes go on.

    ROOT/snapshots/<name>.tar     the archive (an uncompressed POSIX tar: vectors do not compress)
    ROOT/snapshots/<name>.json    what `list_snapshots` shows of it: name, version, seq, size, sha256, created_at
    ROOT/snapshots/.<name>.partial  a snapshot being written; a killed one's is removed by the next
    ROOT/snapshots/.lock          held (flock) while one is made: one at a time, whichever process makes it

The folder is the collection's own: version pruning (`IndexRoot.prune`) and the removal of partial builds touch
only `versions/` and `.building-*`, never it.

An archive holds, in this order:
- `version/<VERSION>/...`: every file of one version (the served one by default), its sealed manifest included;
- `writes/log.sqlite`: the write log's entries after the version's `folded_seq`, up to the last one committed when
  the copy began (`writelog.copy_log`: one read transaction), with the log's id and its seq counter, so a restored
  log continues where this one was;
- `collection.json`, when the collection has one;
- `snapshot.json`, last: the format, the version, the seq the log was copied up to, the encoder's identity (its
  folder's name, the sha256 of its ONNX model as `encoder.json` records it, and the sha256 of its other files)
  and the size and sha256 of every member above. A truncated archive therefore lacks its trailer; a damaged one
  fails a member's checksum, named (`indexer.runtime.restore`).

The encoder is not in the archive: encoders are shared by collections, large, and deployed with the service (the
models directory); the snapshot records which one it needs, and a restore checks that the one it is given is that
one, byte for byte.

Consistency while writes go on: every file of the version is opened before the log is copied, so a compaction
and a prune meanwhile cannot take the version away (an open file outlives its unlink), and the log is copied
after: it holds every entry the version does not (a version folds only entries logged before it was made).
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import tarfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, BinaryIO

from indexer.runtime.atomic import fsync_dir, sha256_file, write_json_atomic
from indexer.runtime.integrity import MANIFEST, IntegrityError, check_manifest, new_hasher
from indexer.runtime.layout import IndexRoot, new_version_name
from indexer.runtime.manifest import Manifest, ManifestError
from indexer.runtime.storage import storage_errors
from indexer.runtime.writelog import copy_log, log_path

SNAPSHOTS = "snapshots"
FORMAT = "strata-snapshot/1"
TRAILER = "snapshot.json"
LOG_MEMBER = "writes/log.sqlite"
CONFIG_MEMBER = "collection.json"
VERSION_PREFIX = "version/"
ARCHIVE_SUFFIX = ".tar"
LOCK = ".lock"  # held (flock) while a snapshot is made
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
CHUNK = 1 << 20


class SnapshotError(ValueError):
    """A snapshot that cannot be made, found, read or restored; the message says what is wrong."""


class SnapshotNotFound(SnapshotError):
    """No snapshot of that name in the collection."""


class SnapshotConflict(SnapshotError):
    """A snapshot of that name exists already, or a restore's target is not empty."""


@dataclass(frozen=True)
class SnapshotInfo:
    name: str
    version: str
    seq: int  # the write log was copied up to this seq (every acknowledged write up to it is in the archive)
    size: int  # bytes of the archive
    sha256: str  # of the whole archive, as downloaded
    created_at: str
    documents: int  # the version's documents (before the log's entries are replayed onto it)
    seconds: float = 0.0  # how long making it took
    passages: int | None = None  # a version of passages: its passage rows (its vectors); None: documents whole

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def snapshots_dir(root: Path) -> Path:
    return Path(root) / SNAPSHOTS


def check_name(name: str) -> str:
    if not NAME_RE.fullmatch(name):
        raise SnapshotError(f"{name[:120]!r} is not a snapshot name (letters, digits, '.', '_' and '-', at most 100, "
                            f"not starting with a dot)")
    return name


def archive_path(root: Path, name: str) -> Path:
    """The archive of snapshot `name`; SnapshotNotFound when there is none."""
    path = snapshots_dir(root) / f"{check_name(name)}{ARCHIVE_SUFFIX}"
    if not path.is_file():
        raise SnapshotNotFound(f"no snapshot {name!r} in {snapshots_dir(root)}")
    return path


def list_snapshots(root: Path) -> list[SnapshotInfo]:
    """The collection's snapshots, oldest first (an archive whose record is unreadable is left out)."""
    out = []
    folder = snapshots_dir(root)
    for record in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        if not (folder / f"{record.stem}{ARCHIVE_SUFFIX}").is_file():
            continue
        try:
            out.append(SnapshotInfo(**json.loads(record.read_text())))
        except (OSError, ValueError, TypeError):
            continue
    return sorted(out, key=lambda s: (s.created_at, s.name))


def delete(root: Path, name: str) -> None:
    path = archive_path(root, name)
    path.with_suffix(".json").unlink(missing_ok=True)  # the record first: never listed without its archive
    path.unlink()
    fsync_dir(path.parent)


def encoder_identity(manifest: Manifest, folder: Path | None = None) -> dict[str, Any]:
    """The encoder a version needs: its folder's name, its ONNX model's sha256, and the sha256 of its other files.
    `folder`: where the encoder is (the one the API serves the version with: `STRATA_MODEL_DIR` may pin one that is
    not where the version was built); default the manifest's. A folder that is not here records no files, and a
    restore can then check the ONNX model only."""
    folder = Path(folder or manifest.model.dir)
    files: dict[str, str] = {}
    if folder.is_dir():
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            if path.suffix != ".onnx":  # the model itself: its sha256 is `onnx_sha256` (checked when it is loaded)
                files[path.relative_to(folder).as_posix()] = sha256_file(path)
    return {"name": folder.name, "dir": str(folder), "onnx_sha256": manifest.model.onnx_sha256, "files": files}



class _HashingWriter(io.RawIOBase):
    """The archive's file, hashed and counted as it is written."""

    def __init__(self, fh: BinaryIO) -> None:
        self.fh, self.sha, self.size = fh, hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:  # noqa: ANN401 (bytes-like)
        view = memoryview(data)
        self.sha.update(view)
        self.size += len(view)
        return self.fh.write(view)


class _HashingReader:
    """A member's source, hashed as tarfile copies it (and with `also`, a version's file, by its manifest's
    checksum algorithm too)."""

    def __init__(self, fh: IO[bytes], also: Any = None) -> None:  # noqa: ANN401 (an integrity hasher)
        self.fh, self.sha, self.also = fh, hashlib.sha256(), also

    def read(self, n: int = -1) -> bytes:
        data = self.fh.read(n)
        self.sha.update(data)
        if self.also is not None:
            self.also.update(data)
        return data


def _add(tar: tarfile.TarFile, arcname: str, fh: IO[bytes], size: int, files: dict[str, dict[str, Any]],
         also: Any = None) -> None:  # noqa: ANN401 (an integrity hasher)
    info = tarfile.TarInfo(arcname)
    info.size, info.mtime, info.mode = size, int(time.time()), 0o644
    reader = _HashingReader(fh, also)
    tar.addfile(info, reader)  # type: ignore[arg-type]  # tarfile reads `size` bytes with read()
    files[arcname] = {"size": size, "sha256": reader.sha.hexdigest()}


def _add_version_file(tar: tarfile.TarFile, version: str, manifest: Manifest, rel: str, fh: IO[bytes],
                      files: dict[str, dict[str, Any]]) -> None:
    """A file of the version, checked against the checksum its manifest records as it is copied (the bytes are
    read once): a version damaged on disk since it was served is refused naming the file, not archived into a
    snapshot that no restore would accept (a file the manifest does not record is copied as it is)."""
    arcname, size = f"{VERSION_PREFIX}{version}/{rel}", os.fstat(fh.fileno()).st_size
    checksums = manifest.checksums
    recorded = checksums.files.get(rel) if checksums is not None else None
    if checksums is None or recorded is None:
        _add(tar, arcname, fh, size, files)
        return
    damaged = f"version {version}: {rel} is damaged"
    advice = "(`indexer verify --root ROOT` checks the version; compact or rebuild it, then snapshot)"
    if size != recorded.size:
        raise SnapshotError(f"{damaged}: {size:,} bytes where its manifest records {recorded.size:,} {advice}")
    hasher = new_hasher(checksums.algorithm)
    _add(tar, arcname, fh, size, files, hasher)
    if hasher.hexdigest() != recorded.digest:
        raise SnapshotError(f"{damaged}: its {checksums.algorithm} {hasher.hexdigest()} is not the {recorded.digest} "
                            f"its manifest records {advice}")


def _atomic_temp(name: str) -> bool:
    """An atomic write's temporary file or folder (`indexer.runtime.atomic`: `.NAME.XXXX.tmp`, `.NAME.XXXX.partial`):
    not part of the version. Other hidden files are (tantivy's `lexical/.managed.json` and lock files: the manifest
    records them, and a restore without them is refused)."""
    return name.startswith(".") and name.endswith((".tmp", ".partial"))


def _open_version(folder: Path) -> dict[str, IO[bytes]]:
    """Every file of a version, opened now (relative POSIX path -> file)."""
    handles: dict[str, IO[bytes]] = {}
    try:
        for dirpath, dirnames, filenames in os.walk(folder):
            dirnames[:] = sorted(d for d in dirnames if not _atomic_temp(d))
            for name in sorted(filenames):
                path = Path(dirpath, name)
                if not _atomic_temp(name):
                    handles[path.relative_to(folder).as_posix()] = open(path, "rb")  # noqa: SIM115 (closed below)
    except BaseException:
        for fh in handles.values():
            fh.close()
        raise
    return handles


def create(root_dir: Path, *, version: str | None = None, name: str | None = None,
           encoder_dir: Path | None = None) -> SnapshotInfo:
    """Snapshot the collection at `root_dir`: `version` (default: the one `current` points at) and its write log
    up to now, into `ROOT/snapshots/<name>.tar`; returns what `list_snapshots` shows of it. A full or failing disk
    is a StorageFull / StorageUnavailable naming the file (nothing of the snapshot is left)."""
    with storage_errors(snapshots_dir(Path(root_dir)), "making a snapshot"):
        return _create(root_dir, version, name, encoder_dir)


def _create(root_dir: Path, version: str | None, name: str | None, encoder_dir: Path | None) -> SnapshotInfo:
    t0 = time.perf_counter()
    root = IndexRoot(root_dir)
    version = version or root.current_version()
    if version is None or version not in root.versions():  # a version's name, not a path: never another root's
        raise SnapshotError(f"{root.root} has no version {version or '(no current)'} to snapshot")
    name = check_name(name or new_version_name())
    folder = snapshots_dir(root.root)
    folder.mkdir(parents=True, exist_ok=True)
    with _making(folder):
        return _create_locked(root, folder, version, name, t0, encoder_dir)


@contextmanager
def _making(folder: Path) -> Iterator[None]:
    """Held while a snapshot is made in `folder`, by whichever process makes it (the API, `indexer snapshot
    create`): one at a time per collection, so the partial files a second one finds were left by a killed one,
    never by one still running. A second one waits for the first."""
    with open(folder / LOCK, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _create_locked(root: IndexRoot, folder: Path, version: str, name: str, t0: float,
                   encoder_dir: Path | None) -> SnapshotInfo:
    if (folder / f"{name}{ARCHIVE_SUFFIX}").exists():
        raise SnapshotConflict(f"a snapshot {name!r} already exists in {folder}")
    for stale in folder.glob(".*.partial*"):  # a killed snapshot's (under the lock: none is being made)
        shutil.rmtree(stale, ignore_errors=True) if stale.is_dir() else stale.unlink(missing_ok=True)
    handles = _open_version(root.version_dir(version))
    partial = folder / f".{name}.partial"
    log_copy = folder / f".{name}.partial-log"
    try:
        manifest = _manifest(root.version_dir(version), handles)
        info = _write(root.root, version, manifest, handles, partial, log_copy, name, encoder_dir)
        os.replace(partial, folder / f"{name}{ARCHIVE_SUFFIX}")
        info = SnapshotInfo(**{**asdict(info), "seconds": round(time.perf_counter() - t0, 3)})
        write_json_atomic(folder / f"{name}.json", info.to_json())
        fsync_dir(folder)
        return info
    finally:
        for fh in handles.values():
            fh.close()
        partial.unlink(missing_ok=True)
        log_copy.unlink(missing_ok=True)


def _manifest(folder: Path, handles: dict[str, IO[bytes]]) -> Manifest:
    """The version's manifest, read from its open file and checked against its own checksum, as a restore and the
    API check it; SnapshotError naming what is wrong (a snapshot of it would not restore)."""
    if MANIFEST not in handles:
        raise SnapshotError(f"version {folder.name} has no {MANIFEST}")
    data = handles[MANIFEST].read()
    handles[MANIFEST].seek(0)
    try:
        manifest = Manifest.load(folder, data)  # names the file and why it is not a manifest
    except ManifestError as exc:
        raise SnapshotError(str(exc)) from None
    try:
        check_manifest(folder / MANIFEST, json.loads(data))
    except (IntegrityError, ValueError) as exc:
        raise SnapshotError(f"version {folder.name}: {exc}") from None
    return manifest


def _write(root: Path, version: str, manifest: Manifest, handles: dict[str, IO[bytes]], partial: Path,
           log_copy: Path, name: str, encoder_dir: Path | None) -> SnapshotInfo:
    """The archive, written to `partial` and fsync'd."""
    w = manifest.writes
    log_id, seq = None, w.folded_seq if w else 0
    if log_path(root).is_file():  # the entries the version does not hold (all of them when it folded another log)
        log_id, seq = copy_log(log_path(root), log_copy, after=seq, folded_log=w.log_id if w else None)
    config = root / CONFIG_MEMBER
    # documents and passages apart, as GET /collections counts them: a version of passages holds a vector a passage
    split = manifest.chunking() is not None
    documents, passages = (manifest.data.n_docs, manifest.index.ntotal) if split else (manifest.index.ntotal, None)
    files: dict[str, dict[str, Any]] = {}
    with open(partial, "wb") as raw:
        out = _HashingWriter(raw)
        with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
            for rel, fh in handles.items():  # the manifest, which records no checksum of itself, copied as it is
                _add_version_file(tar, version, manifest, rel, fh, files)
            if log_id is not None:
                with open(log_copy, "rb") as fh:
                    _add(tar, LOG_MEMBER, fh, os.fstat(fh.fileno()).st_size, files)
            if config.is_file():
                data = config.read_bytes()
                _add(tar, CONFIG_MEMBER, io.BytesIO(data), len(data), files)
            created = datetime.now(timezone.utc).isoformat(timespec="seconds")
            encoder = encoder_identity(manifest, encoder_dir)
            trailer = json.dumps({"format": FORMAT, "name": name, "version": version, "seq": seq, "log_id": log_id,
                                  "created_at": created, "documents": documents, "passages": passages,
                                  "encoder": encoder, "files": files}, indent=1).encode()
            _add(tar, TRAILER, io.BytesIO(trailer), len(trailer), {})
        raw.flush()
        os.fsync(raw.fileno())
    return SnapshotInfo(name, version, seq, out.size, out.sha.hexdigest(), created, documents, passages=passages)
