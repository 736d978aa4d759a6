"""`indexer compact` on a sharded version: the write log's net effect folded shard by shard.

Each document's FAISS id names its shard (`indexer.runtime.ids.shard_of`, the `id % N` every build and `indexer
shard` split by, and the shard whose replicas served the write: `indexer.runtime.shard_writes`). Shard s loses its
documents deleted or replaced and gains the upserts whose FAISS id falls in it, added to its trained inverted lists:
every shard keeps the one quantizer they share, so the compacted shards still answer as one index would (IVF's
`added_since_training` grows, as `indexer compact` reports on one index file). One shard is in memory at a time; a
shard no write touched is hard-linked from the parent version (copied on another file system). The store, the
manifest, the calibration and the evaluation are `indexer.compact`'s, as for a version of one index file.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from indexer.reshard import link_or_copy
from indexer.runtime.faiss.devices import set_threads
from indexer.runtime.faiss.kinds import read_ann
from indexer.runtime.fold import Fold
from indexer.runtime.ids import shard_of
from indexer.runtime.manifest import Manifest, ShardInfo

log = logging.getLogger(__name__)


def upsert_vectors(folded: Fold) -> tuple[np.ndarray, np.ndarray]:
    """The written documents' vectors (float32, one row each) and their FAISS ids, in the fold's order."""
    vectors = [e.vector for _, e in folded.upserts if e.vector is not None]
    assert len(vectors) == len(folded.upserts)  # every upsert is logged with its vector
    return np.stack(vectors).astype(np.float32), np.asarray([f for f, _ in folded.upserts], dtype=np.int64)


def fold_shards(parent_dir: Path, parent: Manifest, folded: Fold, stage: Path, threads: int | None
                ) -> list[ShardInfo]:
    """Write the parent's shards with `folded` applied into `stage`, each at the same relative path; their record
    for the manifest."""
    n = len(parent.index.shards)
    gone = np.asarray(folded.deletes + folded.replaced, dtype=np.int64)
    vectors, ids = upsert_vectors(folded) if folded.upserts else (None, np.zeros(0, dtype=np.int64))
    set_threads(threads)
    out = []
    for s, info in enumerate(parent.index.shards):
        dst = stage / info.file
        dst.parent.mkdir(parents=True, exist_ok=True)
        removed, added = gone[shard_of(gone, n) == s], shard_of(ids, n) == s
        if not len(removed) and not added.any():
            link_or_copy(parent_dir / info.file, dst)
            out.append(info)
            continue
        index = read_ann([parent_dir / info.file], parent.index.params)
        if len(removed):
            index.remove(removed)
        if added.any():
            assert vectors is not None
            index.add(vectors[added], ids[added])
        index.save(dst)
        log.info("shard %d of %s: %d documents removed, %d added", s, parent.version, len(removed), int(added.sum()))
        out.append(ShardInfo(file=info.file, ntotal=int(index.ntotal)))
    return out
