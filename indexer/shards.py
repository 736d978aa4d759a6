"""An IVF index split into N shard files that share one trained coarse quantizer.

Every shard is a copy of the same trained, empty `IVF{nlist},{codec}` filled with the vectors whose id falls in
it (`id % N`). Because the centroids are identical, probing the same `nprobe` lists in every shard and merging
the top k by score gives exactly the merged index's answer, and the shards can be merged back losslessly.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import faiss
import numpy as np

from indexer.faiss_index import DEFAULT_CODEC, new_ivf, set_nprobe

SHARDS_DIR = "shards"
# FAISS k-means subsamples to this many points per centroid anyway; training on more is wasted work.
MAX_TRAIN_POINTS_PER_LIST = 256


def shard_file(shard: int) -> str:
    return f"{SHARDS_DIR}/shard-{shard:05d}.faiss"


def shard_of(ids: np.ndarray, n_shards: int) -> np.ndarray:
    """Which shard holds each id: stable, needs no coordination, and spreads Quora's dense ids evenly."""
    return np.asarray(ids, dtype=np.int64) % n_shards


def train_empty_ivf(sample: np.ndarray, nlist: int, nprobe: int, seed: int, codec: str = DEFAULT_CODEC
                    ) -> faiss.Index:
    """`IVF{nlist},{codec}` (inner product) trained on `sample`, holding no vectors yet."""
    # the same seed as the single-machine build: same sample order -> same centroids
    index = new_ivf(sample.shape[1], nlist, codec, seed)
    index.train(np.ascontiguousarray(sample, dtype=np.float32))
    set_nprobe(index, nprobe)
    return index


def training_positions(positions: np.ndarray, nlist: int, seed: int) -> np.ndarray:
    """The corpus positions to train on, in corpus order: all of them when FAISS would use all, else a seeded
    sample of `256 * nlist` (what FAISS itself would subsample to)."""
    positions = np.sort(np.asarray(positions, dtype=np.int64))
    cap = MAX_TRAIN_POINTS_PER_LIST * nlist
    if len(positions) <= cap:
        return positions
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(positions, size=cap, replace=False))


def merge_shards(paths: Sequence[Path]) -> faiss.Index:
    """Read shard files and merge them into one IVF index in memory (their inverted lists are concatenated)."""
    merged = faiss.read_index(str(paths[0]))
    for path in paths[1:]:
        other = faiss.read_index(str(path))
        faiss.merge_into(merged, other, False)  # ids are global already: no shift
    return merged
