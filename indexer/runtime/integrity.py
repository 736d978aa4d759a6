"""Checksums of a version's files: recorded in its manifest when the version is sealed, verified before it is served.

Every path that writes a version does so in `IndexRoot.staging`, which seals the folder (`seal`) just before
renaming it into `versions/`: every file below the folder but `manifest.json` (walked, not listed, so files that
later builds add — a lexical index, shard files, another index kind — are covered without touching this module)
gets its size and digest into `manifest.json`'s `checksums`. The manifest is covered by a checksum of its own,
`manifest_checksum`: the digest of its other fields (canonical JSON), stamped by every writer of a manifest
(`write_manifest`: sealing, `Manifest.save` — so `indexer eval` may still record figures in it). Its fields decide
what is served (`writes.folded_seq`: which logged writes the version holds, so which are replayed over it), so a
manifest whose content no longer matches its checksum is refused like a damaged data file. A manifest of format 1
(written before this checksum) has none and loads unchecked, with a log line; from format 2 on
(`MANIFEST_CHECKSUM_FORMAT`) a manifest without one is refused.

`verify` is what the service runs before it opens a version (at startup and at every swap) and what
`indexer verify` runs on demand: it names the first damaged file (a different size: truncated or grown; same size,
different digest: overwritten). A manifest from before checksums has none: it loads, with a log line saying that
its files could not be checked.

Digest: xxh3-128 (the `xxhash` package). The checksum is there to catch damage — a bad disk, a torn copy, a file
overwritten in place — not an attacker (whoever can rewrite `index.faiss` can rewrite the manifest too), so a
non-cryptographic 128-bit hash is enough. Verifying is bound by reading the files (docs/decisions.md has the
measurements), and the service verifies before it opens a version, not while:
FAISS's reader is never handed a damaged file. Files are read in 8 MiB chunks with `readinto` into one buffer,
several files at once on a small thread pool (reading and both hashes release the GIL).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import xxhash

from indexer.runtime.atomic import write_json_atomic

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"  # the same name as `manifest.MANIFEST` (that module imports pydantic; this one need not)
CHECKSUMS_KEY = "checksums"
MANIFEST_CHECKSUM_KEY = "manifest_checksum"
MANIFEST_CHECKSUM_FORMAT = 2  # the manifests' `format_version` from which the manifest's own checksum is required
ALGORITHM = "xxh3-128"
CHUNK = 8 << 20
_HASHERS: dict[str, Callable[[], object]] = {"xxh3-128": xxhash.xxh3_128}


class IntegrityError(RuntimeError):
    """A version's file is missing, of the wrong size or content; the message names it."""

    def __init__(self, message: str, path: Path | None = None) -> None:
        super().__init__(message)
        self.path = path


@dataclass(frozen=True)
class Verified:
    """What `verify` checked: files and bytes, or `checked` False for a manifest without checksums."""

    checked: bool
    files: int = 0
    bytes: int = 0
    unrecorded: tuple[str, ...] = ()  # files in the folder the manifest has no checksum for (not verified)


def version_files(folder: Path) -> list[str]:
    """Every regular file below `folder` but the manifest, as sorted POSIX paths relative to it."""
    out = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        for name in filenames:
            rel = Path(dirpath, name).relative_to(folder).as_posix()
            if rel != MANIFEST and not name.startswith(f".{MANIFEST}"):  # nor an atomic write's leftover temp file
                out.append(rel)
    return sorted(out)


def new_hasher(algorithm: str) -> Any:  # noqa: ANN401 (an xxhash hasher: update, hexdigest)
    """A hasher of `algorithm` (a manifest's `checksums.algorithm`); IntegrityError for one not known."""
    try:
        return _HASHERS[algorithm]()
    except KeyError:
        raise IntegrityError(f"unknown checksum algorithm {algorithm!r} (known: {', '.join(_HASHERS)})") from None


def file_digest(path: Path, algorithm: str = ALGORITHM) -> tuple[int, str]:
    """(size, hex digest) of one file, read in `CHUNK`-byte pieces into one reused buffer."""
    hasher = new_hasher(algorithm)
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    size = 0
    with open(path, "rb", buffering=0) as fh:
        while n := fh.readinto(buf):
            hasher.update(view[:n])  # type: ignore[attr-defined]
            size += n
    return size, hasher.hexdigest()  # type: ignore[attr-defined]


def _workers(n_files: int) -> int:
    return max(1, min(n_files, 4, os.cpu_count() or 1))


def compute(folder: Path) -> dict[str, object]:
    """The `checksums` entry of a manifest for the files of `folder` now."""
    files = version_files(folder)
    with ThreadPoolExecutor(_workers(len(files)), thread_name_prefix="checksum") as pool:
        digests = list(pool.map(lambda rel: file_digest(folder / rel), files))
    entries = {rel: {"size": size, "digest": digest} for rel, (size, digest) in zip(files, digests, strict=True)}
    return {"algorithm": ALGORITHM, "files": entries}


def manifest_digest(raw: dict[str, object], algorithm: str = ALGORITHM) -> str:
    """The digest of a manifest's fields but its own checksum, over canonical JSON (sorted keys, no spaces): the
    same whatever indentation or key order the file was written with."""
    fields = {k: v for k, v in raw.items() if k != MANIFEST_CHECKSUM_KEY}
    hasher = _HASHERS[algorithm]()
    hasher.update(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode())  # type: ignore[attr-defined]
    return hasher.hexdigest()  # type: ignore[attr-defined]


def write_manifest(folder: Path, raw: dict[str, object]) -> None:
    """Write `raw` as `folder`'s manifest, atomically, stamped with its own checksum: every writer of a manifest
    goes through here."""
    raw = dict(raw)
    raw[MANIFEST_CHECKSUM_KEY] = {"algorithm": ALGORITHM, "digest": manifest_digest(raw)}
    write_json_atomic(Path(folder) / MANIFEST, raw)


def check_manifest(path: Path, raw: object) -> bool:
    """Raise IntegrityError when the manifest `raw` (read from `path`) does not match its own checksum, or has none
    though its format requires one; False for a format-1 manifest without one (not checked), True when checked."""
    if not isinstance(raw, dict):
        raise IntegrityError(f"{path} is not a JSON object: the manifest is damaged", path)
    stamp = raw.get(MANIFEST_CHECKSUM_KEY)
    if stamp is None:
        fmt = raw.get("format_version", 1)
        if isinstance(fmt, int) and fmt < MANIFEST_CHECKSUM_FORMAT:
            return False
        raise IntegrityError(f"{path} has no checksum of its own ('{MANIFEST_CHECKSUM_KEY}'), which its format "
                             f"({fmt!r}) requires: the manifest is damaged", path)
    algorithm = stamp.get("algorithm") if isinstance(stamp, dict) else None
    if algorithm not in _HASHERS:
        raise IntegrityError(f"{path}: unknown manifest checksum algorithm {algorithm!r}", path)
    got = manifest_digest(raw, algorithm)  # type: ignore[arg-type]
    if got != stamp.get("digest"):  # type: ignore[union-attr]
        raise IntegrityError(f"{path} does not match its own checksum ({algorithm} {got} != {stamp.get('digest')}): "  # type: ignore[union-attr]
                             f"the manifest was changed or damaged after it was written", path)
    return True


def seal(folder: Path) -> None:
    """Record the checksums of every file of the staged version `folder` in its manifest (edited as JSON, so that
    fields this module does not know are kept as they are), and the manifest's own. A folder without a manifest is
    left alone."""
    path = folder / MANIFEST
    if not path.is_file():
        return
    raw = json.loads(path.read_text())
    raw[CHECKSUMS_KEY] = compute(folder)
    write_manifest(folder, raw)


def _check_one(folder: Path, rel: str, size: int, digest: str, algorithm: str) -> None:
    path = folder / rel
    try:
        actual = path.stat().st_size
    except FileNotFoundError:
        raise IntegrityError(f"{path} is missing (the manifest records {size:,} bytes)", path) from None
    if actual != size:
        how = "truncated" if actual < size else "grown"
        raise IntegrityError(f"{path} is {actual:,} bytes but the manifest records {size:,} ({how}: the version is "
                             f"damaged)", path)
    got_size, got = file_digest(path, algorithm)
    if got_size != size or got != digest:
        raise IntegrityError(f"{path} does not match its checksum in the manifest ({algorithm} {got} != {digest}): "
                             f"the file is damaged", path)


def verify(folder: Path, checksums: dict[str, object] | None) -> Verified:
    """Check every file a manifest's `checksums` records; raises IntegrityError naming the first damaged one.

    `checksums` None (a manifest written before checksums): nothing is checked, and a log line says so."""
    folder = Path(folder)
    if checksums is None:
        log.warning("%s/%s has no checksums (written before they were recorded): its files are not verified; "
                    "rebuild or compact the version to record them", folder, MANIFEST)
        return Verified(False)
    algorithm = str(checksums.get("algorithm", ""))
    if algorithm not in _HASHERS:
        raise IntegrityError(f"{folder / MANIFEST}: unknown checksum algorithm {algorithm!r}")
    files: dict[str, dict[str, object]] = checksums.get("files", {})  # type: ignore[assignment]
    # sizes first, all of them: a truncated file is found without hashing the others
    for rel, info in files.items():
        size = int(info["size"])
        path = folder / rel
        try:
            actual = path.stat().st_size
        except FileNotFoundError:
            raise IntegrityError(f"{path} is missing (the manifest records {size:,} bytes)", path) from None
        if actual != size:
            _check_one(folder, rel, size, str(info["digest"]), algorithm)
    items = sorted(files.items(), key=lambda kv: -int(kv[1]["size"]))  # the largest first: they bound the wall time
    with ThreadPoolExecutor(_workers(len(items)), thread_name_prefix="verify") as pool:
        futures = [pool.submit(_check_one, folder, rel, int(info["size"]), str(info["digest"]), algorithm)
                   for rel, info in items]
        for f in futures:
            f.result()  # the first damaged file (in size order) raises
    unrecorded = tuple(rel for rel in version_files(folder) if rel not in files)
    return Verified(True, len(files), sum(int(i["size"]) for i in files.values()), unrecorded)


def damage(folder: Path) -> str | None:
    """What is wrong with a served version's files by their sizes alone (a stat each, no hashing: cheap enough for
    every `/ready`): the first recorded file that is missing or of another size, the manifest gone, or None. A
    version being served keeps answering from the files it has open; this is how an operator learns that the next
    restart or swap will refuse it."""
    path = Path(folder) / MANIFEST
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return f"{path} is missing"
    except (OSError, ValueError) as exc:
        return f"{path} cannot be read: {exc}"
    try:
        check_manifest(path, raw)
    except IntegrityError as exc:
        return str(exc)
    checksums = raw.get(CHECKSUMS_KEY) if isinstance(raw, dict) else None
    files = checksums.get("files", {}) if isinstance(checksums, dict) else {}
    for rel, info in files.items():
        size = int(info["size"])
        try:
            actual = (Path(folder) / rel).stat().st_size
        except FileNotFoundError:
            return f"{Path(folder) / rel} is missing (the manifest records {size:,} bytes)"
        except OSError as exc:
            return f"{Path(folder) / rel} cannot be read: {exc}"
        if actual != size:
            return f"{Path(folder) / rel} is {actual:,} bytes but the manifest records {size:,}"
    return None


def verify_folder(folder: Path) -> Verified:
    """`verify` with the checksums read from the folder's own manifest (raw JSON: no model needed), the manifest's
    own checksum checked first."""
    path = Path(folder) / MANIFEST
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise IntegrityError(f"{path} is missing", path) from None
    except ValueError as exc:
        raise IntegrityError(f"{path} is not valid JSON: {exc}", path) from exc
    if not check_manifest(path, raw):
        log.warning("%s has no checksum of its own (format 1, written before it was recorded): its fields are not "
                    "verified; rebuild or compact the version to record it", path)
    return verify(Path(folder), raw.get(CHECKSUMS_KEY))
