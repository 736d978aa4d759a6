"""Restoring a snapshot (`indexer.runtime.snapshot`) into a new index root: all of it checked, or nothing.

A restore streams the archive once into a staging folder beside the target (`.<target>.restoring-*`), hashing
every member as it is written, then checks, before anything is renamed into place:
- the archive is whole: it ends with its `snapshot.json` (a truncated one does not), every member it lists is
  there with its size and sha256, and there is nothing it does not list;
- the version's files match the checksums its own manifest records (`integrity.verify_folder`);
- the write log is an SQLite file that passes `quick_check`, of the log id the snapshot names, up to its seq;
- its `collection.json`, when it has one, validates (a collection whose config does not is not served);
- the encoder the version needs is here: the version's own encoder folder, or one of `encoders` (a models
  directory's folders), whose `encoder.json` names the same ONNX sha256 and whose other files match the snapshot's
  checksums; the version's manifest is pointed at it.
Then `current` is set in the staging folder, every file fsync'd, and the folder renamed onto the target in one
step. The target must not exist or be an empty folder: a restore never writes over a collection, and whatever
fails leaves the target as it was (the staging folder is removed).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import sqlite3
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from indexer.runtime import collection_config
from indexer.runtime.atomic import fsync_dir, sha256_file, staging_lock, sync_tree
from indexer.runtime.collection_config import ConfigError
from indexer.runtime.encoder import ENCODER_META
from indexer.runtime.integrity import IntegrityError, verify_folder
from indexer.runtime.layout import VERSIONS, IndexRoot
from indexer.runtime.manifest import Manifest, ManifestError
from indexer.runtime.snapshot import (
    CHUNK,
    CONFIG_MEMBER,
    FORMAT,
    LOG_MEMBER,
    TRAILER,
    VERSION_PREFIX,
    SnapshotConflict,
    SnapshotError,
)
from indexer.runtime.storage import storage_errors
from indexer.runtime.writelog import LOG_FILE, WRITES_DIR

RESTORING = ".restoring-"  # in the name of a restore's staging folder, beside its target


@dataclass(frozen=True)
class Restored:
    root: Path
    version: str
    seq: int
    documents: int
    encoder: Path
    passages: int | None = None  # a version of passages: its passage rows


def check_target(target: Path) -> None:
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise SnapshotConflict(f"{target} is not empty: a snapshot is restored into a new or empty folder, never over "
                            f"a collection (delete it, or restore elsewhere)")


ENCODER_HINT = "give its folder (indexer snapshot restore --encoder DIR)"


def restore(archive: Path | IO[bytes], target: Path, *, encoders: Sequence[Path] = (),
            origin: str | None = None, encoder_hint: str = ENCODER_HINT) -> Restored:
    """Restore `archive` (a path, or a stream read once) into `target`; SnapshotError naming what is wrong, and
    `origin` as the archive (default: its path; a stream's, "the uploaded snapshot"); `encoder_hint`: what the
    refusal for an encoder not found tells its reader to do."""
    target = Path(target).absolute()
    check_target(target)
    origin = origin or (str(archive) if isinstance(archive, Path) else "the uploaded snapshot")
    target.parent.mkdir(parents=True, exist_ok=True)
    stage = target.parent / f".{target.name}{RESTORING}{secrets.token_hex(4)}"
    with staging_lock(target.parent):  # a server's sweep of the folder leaves the staging folder alone meanwhile
        try:
            # a full or failing disk where it writes: StorageFull/Unavailable (an archive or encoder it cannot read
            # elsewhere is not that disk's fault)
            with storage_errors(stage, f"restoring into {target}", within=target.parent):
                return _restore_staged(archive, target, stage, origin, encoders, encoder_hint)
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            raise


def _restore_staged(archive: Path | IO[bytes], target: Path, stage: Path, origin: str,
                    encoders: Sequence[Path], encoder_hint: str) -> Restored:
    """The restore, through `stage` (removed by the caller when anything fails)."""
    stage.mkdir()
    if isinstance(archive, Path):
        with open(archive, "rb") as fh:
            trailer, version = _extract(fh, stage, origin)
    else:
        trailer, version = _extract(archive, stage, origin)
    folder = stage / VERSIONS / version
    try:
        verify_folder(folder)
        manifest = Manifest.load(folder)
    except (IntegrityError, ManifestError) as exc:  # named as in the archive, not by the staging folder's path
        raise SnapshotError(f"{origin}: version {version}: {str(exc).replace(f'{folder}/', '')}") from None
    _check_log(stage / WRITES_DIR / LOG_FILE, trailer, origin)
    _check_config(stage / CONFIG_MEMBER, origin)
    encoder = _find_encoder(trailer["encoder"], [Path(manifest.model.dir), *encoders], origin, encoder_hint)
    if str(encoder) != manifest.model.dir:
        manifest.model.dir = str(encoder)
        manifest.save(folder)
    IndexRoot(stage).set_current(version)
    sync_tree(stage)
    check_target(target)  # still empty: nothing was made there meanwhile
    os.replace(stage, target) if target.exists() else os.rename(stage, target)
    fsync_dir(target.parent)
    passages = trailer.get("passages")
    return Restored(target, version, int(trailer["seq"]), int(trailer.get("documents", 0)), encoder,
                    None if passages is None else int(passages))


def _member_path(name: str, stage: Path, origin: str) -> tuple[Path, str | None]:
    """Where a member goes in the staging folder, and the version it belongs to (None: not a version's file)."""
    parts = PurePosixPath(name).parts
    if name.startswith("/") or not parts or any(p in ("", ".", "..") for p in parts):
        raise SnapshotError(f"{origin}: member {name[:200]!r} is not a path inside a snapshot")
    if name in (LOG_MEMBER, CONFIG_MEMBER):
        return stage / name, None
    if name.startswith(VERSION_PREFIX) and len(parts) >= 3:
        return stage / VERSIONS / Path(*parts[1:]), parts[1]
    raise SnapshotError(f"{origin}: member {name[:200]!r} is not part of a snapshot")


def _extract(fh: IO[bytes], stage: Path, origin: str) -> tuple[dict[str, Any], str]:
    """Stream the members into `stage`, hashing them; the trailer (checked against them) and the version."""
    got: dict[str, dict[str, Any]] = {}
    trailer: dict[str, Any] | None = None
    versions: set[str] = set()
    try:
        with tarfile.open(fileobj=fh, mode="r|") as tar:
            for member in tar:
                if trailer is not None:
                    raise SnapshotError(f"{origin}: member {member.name[:200]!r} after {TRAILER}, which ends a "
                                        f"snapshot")
                if not member.isfile():
                    raise SnapshotError(f"{origin}: member {member.name[:200]!r} is not a regular file")
                src = tar.extractfile(member)
                assert src is not None
                if member.name == TRAILER:
                    trailer = _parse_trailer(src.read(), origin)
                    continue
                if member.name in got:
                    raise SnapshotError(f"{origin}: member {member.name[:200]!r} appears twice")
                path, version = _member_path(member.name, stage, origin)
                if version is not None:
                    versions.add(version)
                got[member.name] = _copy(src, path)
    except (tarfile.TarError, EOFError) as exc:
        raise SnapshotError(f"{origin}: not a readable snapshot archive (truncated or damaged) after {len(got)} "
                            f"members: {exc}") from None
    if trailer is None:
        raise SnapshotError(f"{origin}: truncated: the archive ends after {len(got)} members without its {TRAILER}"
                            if got else f"{origin}: not a snapshot archive (no members)")
    _check_members(trailer, got, origin)
    if len(versions) != 1 or trailer.get("version") not in versions:
        raise SnapshotError(f"{origin}: holds versions {sorted(versions)}, not the one {TRAILER} names "
                            f"({trailer.get('version')!r})")
    return trailer, versions.pop()


def _copy(src: IO[bytes], path: Path) -> dict[str, Any]:
    path.parent.mkdir(parents=True, exist_ok=True)
    sha, size = hashlib.sha256(), 0
    with open(path, "wb") as out:
        while block := src.read(CHUNK):
            sha.update(block)
            size += len(block)
            out.write(block)
    return {"size": size, "sha256": sha.hexdigest()}


def _parse_trailer(data: bytes, origin: str) -> dict[str, Any]:
    try:
        trailer = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SnapshotError(f"{origin}: {TRAILER} is damaged (not JSON: {exc})") from None
    if not isinstance(trailer, dict) or trailer.get("format") != FORMAT:
        got = trailer.get("format") if isinstance(trailer, dict) else None
        raise SnapshotError(f"{origin}: {TRAILER} is not of format {FORMAT} (it says {got!r})")
    for key in ("version", "seq", "files", "encoder"):
        if key not in trailer:
            raise SnapshotError(f"{origin}: {TRAILER} is damaged: it has no {key!r}")
    wrong = _trailer_field_wrong(trailer)
    if wrong:
        raise SnapshotError(f"{origin}: {TRAILER} is damaged: {wrong}")
    return trailer


def _count(value: Any) -> bool:  # noqa: ANN401 (a JSON value)
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _trailer_field_wrong(trailer: dict[str, Any]) -> str | None:
    """What in the trailer is not of the shape `snapshot.create` writes (None: all of it is): a trailer edited by
    hand must be refused naming the field, never fail later on a value of another type."""
    encoder, files = trailer["encoder"], trailer["files"]
    if not isinstance(trailer["version"], str) or not trailer["version"]:
        return f"its 'version' is {trailer['version']!r}, not a version's name"
    if not _count(trailer["seq"]):
        return f"its 'seq' is {trailer['seq']!r}, not a count of log entries"
    if not _count(trailer.get("documents", 0)):
        return f"its 'documents' is {trailer['documents']!r}, not a count"
    if trailer.get("passages") is not None and not _count(trailer["passages"]):
        return f"its 'passages' is {trailer['passages']!r}, not a count"
    if trailer.get("log_id") is not None and not isinstance(trailer["log_id"], str):
        return f"its 'log_id' is {trailer['log_id']!r}, not a log's id"
    if not isinstance(files, dict) or not all(
            isinstance(w, dict) and _count(w.get("size")) and isinstance(w.get("sha256"), str) for w in files.values()):
        return "its 'files' is not a table of members with their size and sha256"
    if not isinstance(encoder, dict) or not isinstance(encoder.get("onnx_sha256"), str) \
            or not isinstance(encoder.get("files") or {}, dict):
        return "its 'encoder' does not describe an encoder (its ONNX sha256 and files)"
    outside = [rel for rel in encoder.get("files") or {} if not _inside(rel)]
    if outside:  # each is read and hashed in a candidate encoder's folder: never a file elsewhere
        return f"its 'encoder' lists {outside[0][:200]!r}, not a file inside an encoder's folder"
    return None


def _inside(rel: str) -> bool:
    parts = PurePosixPath(rel).parts
    return bool(parts) and not rel.startswith("/") and not any(p in ("", ".", "..") for p in parts)


def _check_members(trailer: dict[str, Any], got: dict[str, dict[str, Any]], origin: str) -> None:
    listed: dict[str, Any] = trailer["files"]
    for name, want in listed.items():
        have = got.get(name)
        if have is None:
            raise SnapshotError(f"{origin}: {name} is missing: {TRAILER} lists it ({want.get('size')} bytes)")
        if have["size"] != want.get("size"):
            raise SnapshotError(f"{origin}: {name} is damaged: {have['size']} bytes where {TRAILER} records "
                                f"{want.get('size')}")
        if have["sha256"] != want.get("sha256"):
            raise SnapshotError(f"{origin}: {name} is damaged: its sha256 {have['sha256'][:16]}… is not the "
                                f"{str(want.get('sha256'))[:16]}… {TRAILER} records")
    extra = sorted(set(got) - set(listed))
    if extra:
        raise SnapshotError(f"{origin}: {extra[0]} is not listed in {TRAILER} (the archive was altered)")


def _check_log(path: Path, trailer: dict[str, Any], origin: str) -> None:
    if not path.is_file():
        if trailer.get("log_id") is not None:
            raise SnapshotError(f"{origin}: {LOG_MEMBER} is missing though {TRAILER} names log {trailer['log_id']}")
        return
    try:
        con = sqlite3.connect(path.absolute().as_uri() + "?mode=ro", uri=True)
        try:
            ok = con.execute("PRAGMA quick_check").fetchone()[0]
            log_id = con.execute("SELECT value FROM meta WHERE key = 'log_id'").fetchone()
            last = con.execute("SELECT COALESCE(MAX(seq), 0) FROM entries").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error as exc:
        raise SnapshotError(f"{origin}: {LOG_MEMBER} is not a readable write log: {exc}") from None
    if ok != "ok":
        raise SnapshotError(f"{origin}: {LOG_MEMBER} is damaged: {ok}")
    if log_id is None or log_id[0] != trailer.get("log_id") or last > int(trailer["seq"]):
        raise SnapshotError(f"{origin}: {LOG_MEMBER} is not the log {TRAILER} names (log {trailer.get('log_id')} up "
                            f"to seq {trailer['seq']})")


def _check_config(path: Path, origin: str) -> None:
    """The collection.json the archive holds validates (a collection whose config does not is not served: the
    restore would leave a folder that the server skips, an upload answered with a 404)."""
    if not path.is_file():
        return
    try:
        data = json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SnapshotError(f"{origin}: {CONFIG_MEMBER} is not JSON: {exc}") from None
    try:
        collection_config.parse(data, CONFIG_MEMBER)
    except ConfigError as exc:
        raise SnapshotError(f"{origin}: {exc} (a collection with it would not be served)") from None


def _find_encoder(identity: dict[str, Any], candidates: Sequence[Path], origin: str, hint: str) -> Path:
    """The first candidate folder that is the encoder `identity` describes (its ONNX sha256 and its other files)."""
    looked = []
    for folder in candidates:
        folder = Path(folder).absolute()
        try:
            meta = json.loads((folder / ENCODER_META).read_text())
        except (OSError, ValueError):
            looked.append(str(folder))
            continue
        if meta.get("onnx_sha256") != identity.get("onnx_sha256"):
            looked.append(f"{folder} (another model)")
            continue
        differs = [rel for rel, digest in (identity.get("files") or {}).items()
                   if not (folder / rel).is_file() or sha256_file(folder / rel) != digest]
        if differs:
            looked.append(f"{folder} ({differs[0]} differs)")
            continue
        return folder
    raise SnapshotError(f"{origin}: the encoder it was made with, {identity.get('name')!r} (ONNX sha256 "
                        f"{str(identity.get('onnx_sha256'))[:16]}…), is not here: looked in {', '.join(looked)}; "
                        f"{hint}")

