"""The on-disk layout of an index root, and the only code that changes which version is served.

    ROOT/
      versions/<version>/      one complete build: index.faiss, lexical/ (BM25), store.sqlite, queries.npy,
                               manifest.json
      current -> versions/<v>  symlink, replaced atomically (rename of a new link over the old one)
      .build.lock              held (flock) by the running build; a second build refuses to start
      .building-<version>/     a build in progress; left behind only by a killed build, removed by the next
      serving.json             what an API last served (passed its swap gates) and what they refused
                               (`indexer.runtime.serving`); pruning never deletes the served version

A build writes only inside its `.building-*` folder, seals it (the checksum of every file goes into its manifest,
`integrity.seal`), fsyncs every file and folder in it, renames it into `versions/` when complete, then flips
`current`. Readers that resolved `current` before the flip keep their (untouched) version.

A fault of the disk while a version is staged or published (full, an I/O error or a failed fsync, a read-only
root) removes the staging folder and raises `storage.StorageFull` / `StorageUnavailable` naming the file; nothing
half-written is ever renamed into `versions/`, and `current` is left as it was.
"""

from __future__ import annotations

import fcntl
import logging
import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from indexer.runtime.atomic import fsync_dir, sync_tree
from indexer.runtime.integrity import seal
from indexer.runtime.manifest import Manifest, ManifestError
from indexer.runtime.serving import served_in
from indexer.runtime.storage import as_storage_error, storage_errors
from indexer.runtime.store import STORE, write_doc_rows

log = logging.getLogger(__name__)

VERSIONS = "versions"
CURRENT = "current"
LOCK = ".build.lock"
BUILDING_PREFIX = ".building-"


class LayoutError(RuntimeError):
    """The index root is missing, locked, or has no such version."""


def new_version_name() -> str:
    """`20261125T161757Z-xxxxxy`: UTC second, then the microsecond in 5 hex digits and one random one, so that
    names sort by creation time even within one second (a build and its compaction often share it; `versions()`,
    pruning and rollback rely on that order)."""
    now = datetime.now(timezone.utc)
    return now.strftime("%Y%m%dT%H%M%SZ") + f"-{now.microsecond:05x}{secrets.randbelow(16):x}"


class IndexRoot:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).expanduser()

    @property
    def versions_dir(self) -> Path:
        return self.root / VERSIONS

    def version_dir(self, version: str) -> Path:
        return self.versions_dir / version

    def versions(self) -> list[str]:
        """Complete versions, oldest first (names sort by creation time)."""
        if not self.versions_dir.is_dir():
            return []
        return sorted(p.name for p in self.versions_dir.iterdir() if p.is_dir() and not p.name.startswith("."))

    def current_version(self) -> str | None:
        link = self.root / CURRENT
        try:
            target = os.readlink(link)
        except (FileNotFoundError, OSError):
            return None
        return Path(target).name

    def current_dir(self) -> Path:
        version = self.current_version()
        if version is None:
            raise LayoutError(f"{self.root} has no current index (build one with `indexer build --root "
                              f"{self.root}`)")
        folder = self.version_dir(version)
        if not folder.is_dir():
            raise LayoutError(f"{self.root}/current points to {version}, which does not exist")
        return folder

    def previous_version(self) -> str | None:
        """The newest version older than the current one: what `indexer rollback` goes back to."""
        current = self.current_version()
        older = [v for v in self.versions() if current is None or v < current]
        return older[-1] if older else None

    def set_current(self, version: str) -> None:
        """Point `current` at `version` in one atomic rename."""
        if not self.version_dir(version).is_dir():
            raise LayoutError(f"no version {version} under {self.versions_dir}")
        tmp = self.root / f".{CURRENT}.{os.getpid()}.tmp"
        with storage_errors(self.root / CURRENT, f"pointing it at version {version}"):
            tmp.unlink(missing_ok=True)
            os.symlink(Path(VERSIONS) / version, tmp)  # relative, so the root can be moved or mounted elsewhere
            os.replace(tmp, self.root / CURRENT)
            fsync_dir(self.root)
        log.info("current -> %s", version)

    @contextmanager
    def build_lock(self, *, create: bool = True) -> Iterator[None]:
        """Held by whatever writes versions or moves `current`. `create`: make the root (a first build); False for
        the commands that work on an existing version (`--add`, compact, shard, rollback): a mistyped `--root`
        is refused with the reason and leaves no empty root behind."""
        if not create and not self.root.is_dir():
            raise LayoutError(f"{self.root} has no current index (build one with `indexer build --root {self.root}`)")
        if self.root.exists() and not self.root.is_dir():  # mkdir's "File exists" would not say what is wrong
            raise LayoutError(f"{self.root} is a file, not a folder: --root names the folder of an index root")
        with storage_errors(self.root / LOCK, "taking the build lock"):
            self.root.mkdir(parents=True, exist_ok=True)
            fh = open(self.root / LOCK, "a+")  # noqa: SIM115 (closed below, after the lock is released)
        with fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as exc:
                raise LayoutError(f"another `indexer build` is running on {self.root}") from exc
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def remove_partial_builds(self) -> list[str]:
        """Remove `.building-*` folders: under the build lock, any that exist were left by a killed build."""
        removed = []
        if self.root.is_dir():
            for p in self.root.iterdir():
                if p.name.startswith(BUILDING_PREFIX) and p.is_dir():
                    shutil.rmtree(p, ignore_errors=True)
                    removed.append(p.name)
        if removed:
            log.warning("removed %d partial build(s) left by an interrupted build: %s", len(removed), removed)
        return removed

    @contextmanager
    def staging(self, version: str) -> Iterator[Path]:
        """A folder to build `version` in; sealed (checksums into its manifest) and renamed into `versions/` on
        success, deleted on failure. Every path that writes a version goes through here, so every version is
        sealed whatever files it holds. A fault of the disk is raised as a StorageError naming the file (the
        folder when the writer did not say which)."""
        tmp = self.root / f"{BUILDING_PREFIX}{version}"
        try:
            tmp.mkdir(parents=True)  # inside the try: a SIGTERM right after it still removes the folder
            yield tmp
            _keep_doc_rows(tmp)
            seal(tmp)
            sync_tree(tmp)  # every file on the disk before the rename publishes it (a crash cannot leave it short)
            self.versions_dir.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, self.version_dir(version))
            fsync_dir(self.versions_dir)
        except BaseException as exc:
            if not (isinstance(exc, FileExistsError) and exc.filename == str(tmp)):  # not another's folder
                shutil.rmtree(tmp, ignore_errors=True)
            fault = as_storage_error(exc, tmp, f"staging version {version}", within=self.root) \
                if isinstance(exc, Exception) else None
            if fault is None or fault is exc:
                raise
            raise fault from exc

    def prune(self, keep: int) -> list[str]:
        """Delete the oldest versions beyond `keep`, never the current one nor the one an API serves (a refused
        build leaves `current` ahead of it)."""
        current, served = self.current_version(), served_in(self.root)
        old = [v for v in self.versions() if v not in (current, served)]
        excess = max(0, len(old) - max(keep - (current is not None), 0))
        removed = old[:excess]
        for v in removed:
            shutil.rmtree(self.version_dir(v), ignore_errors=True)
        if removed:
            log.info("pruned old versions: %s", removed)
        return removed


def _keep_doc_rows(folder: Path) -> None:
    """A staged version of passages gets its rows' documents as a file (`store.DOC_ROWS`), found once here rather
    than each time the version is opened for serving, from the store being sealed (written anew even where a copy
    brought one: it always matches its own store); a version of whole documents, or without a store or a
    manifest, is left as it is."""
    if not (folder / STORE).is_file():
        return
    try:
        passages = Manifest.load(folder).chunking() is not None
    except ManifestError:
        return
    if passages:
        write_doc_rows(folder)
