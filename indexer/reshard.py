"""`indexer shard`: a published IVF version split into N shard files for sharded serving, published as a new version.

`indexer build --engine ray --shards N` builds shards from the source texts, encoding them again. A version that
already exists — built from vectors (`--data` with a vector column), grown by writes and compacted, or simply too
big to build twice — is split instead: its `index.faiss` is cut into N files by `id % N` (`indexer.shards`), each a
copy of the same trained IVF index holding its share of every inverted list (`AnnIndex.split_file`). The shards
share the quantizer, so the merged answer of N shard searches at a given nprobe is the parent's answer: the new
version keeps the parent's calibration and evaluation, and its manifest names the parent.

The rest of the version — the store, the lexical index, the calibration probes, the query vectors — is the
parent's, hard-linked into the new version where the file system allows it (no second copy on disk; a version is
never written after it is sealed), copied where it does not. The parent's checksums are verified first: a damaged
file is refused, not split into shards. The new version goes through `IndexRoot.staging` (sealed with its own
checksums) and is published like a build (it becomes current; `--keep` prunes). The parent stays on disk until
pruned, and `indexer rollback` returns to it.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from indexer.publish import publish
from indexer.runtime.ann import KIND_SPECS, SHARDED_KIND
from indexer.runtime.faiss.files import INDEX_FILE
from indexer.runtime.integrity import verify_folder
from indexer.runtime.layout import IndexRoot, LayoutError, new_version_name
from indexer.runtime.manifest import MANIFEST, Manifest, ShardInfo
from indexer.runtime.progress import Progress
from indexer.shards import SHARDS_DIR, shard_file

log = logging.getLogger(__name__)

MAX_SHARDS = 256  # a shard per Serve application: more is a mistake (a typo'd count), not a deployment


@dataclass
class ReshardResult:
    manifest: Manifest
    parent: str
    seconds: float
    linked: int  # files of the parent hard-linked into the new version
    copied: int  # ... copied (another file system)


def link_or_copy(src: Path, dst: Path) -> bool:
    """Hard-link `src` as `dst` (True), or copy it where links cannot be made (False)."""
    try:
        os.link(src, dst)
        return True
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
        shutil.copy2(src, dst)
        return False


def _carry(parent: Path, stage: Path) -> tuple[int, int]:
    """Every file of the parent version but its index and manifest, into `stage` at the same relative path."""
    linked = copied = 0
    for src in sorted(parent.rglob("*")):
        rel = src.relative_to(parent)
        if rel.parts[0] in (INDEX_FILE, MANIFEST, SHARDS_DIR) or not src.is_file():
            continue
        dst = stage / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if link_or_copy(src, dst):
            linked += 1
        else:
            copied += 1
    return linked, copied


def reshard(root_dir: Path, n_shards: int, *, version: str | None = None, keep: int = 5) -> ReshardResult:
    """Split `version` (default: the current one) of the root into `n_shards` shards; publish the result."""
    if not 2 <= n_shards <= MAX_SHARDS:
        raise ValueError(f"--shards must be between 2 and {MAX_SHARDS}, not {n_shards}")
    root = IndexRoot(root_dir)
    t0 = time.perf_counter()
    with root.build_lock(create=False):
        root.remove_partial_builds()
        folder = root.version_dir(version) if version is not None else root.current_dir()
        if not folder.is_dir():
            raise LayoutError(f"no version {version} under {root.versions_dir}")
        parent = Manifest.load(folder)
        if not KIND_SPECS[parent.index.kind].shards:  # `KindSpec.shards`: IVF
            raise ValueError(f"version {parent.version} holds a {parent.index.kind} index: only "
                             f"{KIND_SPECS[SHARDED_KIND].label} versions are sharded (their inverted lists split, one "
                             f"trained quantizer shared by every shard)")
        if parent.index.shards:
            raise ValueError(f"version {parent.version} is already kept as {len(parent.index.shards)} shards")
        if parent.index.ntotal < n_shards:
            raise ValueError(f"version {parent.version} holds {parent.index.ntotal} vectors: too few for "
                             f"{n_shards} shards")
        verify_folder(folder)  # IntegrityError names a damaged file: never split one into shards
        name = new_version_name()
        with root.staging(name) as stage:
            (stage / SHARDS_DIR).mkdir()
            outs = [stage / shard_file(s) for s in range(n_shards)]
            with Progress(n_shards, f"splitting {parent.version} ({parent.index.ntotal:,} vectors) into shards",
                          unit="shard", logger=log) as bar:
                counts = KIND_SPECS[parent.index.kind].implementation().split_file(
                    folder / INDEX_FILE, outs, lambda done, total: bar.update(1))
            linked, copied = _carry(folder, stage)
            info = parent.index.model_copy(update={
                "shards": [ShardInfo(file=shard_file(s), ntotal=c) for s, c in enumerate(counts)]})
            # Same vectors, same quantizer, same nprobe: the merged shards answer as the parent did, so its
            # calibration and evaluation stand (tests/indexer/test_reshard.py checks the answers are the same).
            manifest = parent.model_copy(update={
                "version": name, "created_at": datetime.now(timezone.utc), "index": info,
                "parent_version": parent.version, "checksums": None})
            manifest.save(stage)
        publish(root, manifest, keep)
    seconds = time.perf_counter() - t0
    log.info("split %s into %d shards as %s in %.1fs (%d files linked, %d copied)", parent.version, n_shards, name,
             seconds, linked, copied)
    return ReshardResult(manifest, parent.version, seconds, linked, copied)
