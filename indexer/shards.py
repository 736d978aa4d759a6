"""An IVF index split into N shard files that share one trained coarse quantizer.

Every shard is a copy of the same trained, empty `IVF{nlist},{codec}` filled with the vectors whose id falls in
it (`id % N`: `indexer.runtime.ids.shard_of`). Because the centroids are identical, probing the same `nprobe` lists
in every shard and merging the top k by score gives exactly the merged index's answer, and the shards can be merged
back losslessly.
The FAISS side (training the shared quantizer, merging shard files) is the `indexer.runtime.faiss` package's.
"""

from __future__ import annotations

import numpy as np

SHARDS_DIR = "shards"
# FAISS k-means subsamples to this many points per centroid anyway; training on more is wasted work.
MAX_TRAIN_POINTS_PER_LIST = 256


def shard_file(shard: int) -> str:
    return f"{SHARDS_DIR}/shard-{shard:05d}.faiss"


def training_positions(positions: np.ndarray, nlist: int, seed: int) -> np.ndarray:
    """The corpus positions to train on, in corpus order: all of them when FAISS would use all, else a seeded
    sample of `256 * nlist` (what FAISS itself would subsample to)."""
    positions = np.sort(np.asarray(positions, dtype=np.int64))
    cap = MAX_TRAIN_POINTS_PER_LIST * nlist
    if len(positions) <= cap:
        return positions
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(positions, size=cap, replace=False))
