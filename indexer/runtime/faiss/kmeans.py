"""What k-means learns from: the bounded, seeded training sample, and two-level spherical k-means for large
list counts (`TwoLevel`: its lists and the groups that find a vector's list without scoring them all)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import faiss
import numpy as np

from indexer.runtime.mapped import release
from indexer.runtime.progress import Progress

# k-means learns the lists from a bounded, seeded sample: TRAIN_POINTS_PER_LIST vectors per list (FAISS wants
# >= 39 and subsamples to 256 by default): the training cost grows with nlist, not with N, and the sample is the
# only copy of vectors training makes.
TRAIN_POINTS_PER_LIST = 64
ADD_CHUNK = 65_536  # vectors added per call (a memory-mapped corpus is read a chunk at a time)


def training_sample(vectors: np.ndarray, nlist: int, seed: int) -> np.ndarray:
    """At most TRAIN_POINTS_PER_LIST · nlist rows of `vectors`, drawn uniformly without replacement (seeded) and
    read in row order (a memory-mapped array is read once, forward); all of them when there are fewer."""
    cap = TRAIN_POINTS_PER_LIST * nlist
    if len(vectors) <= cap:
        out = np.ascontiguousarray(vectors, dtype=np.float32)
        release(vectors)
        return out
    rows = np.sort(np.random.default_rng(seed).choice(len(vectors), size=cap, replace=False))
    out = np.empty((cap, vectors.shape[1]), dtype=np.float32)
    # A chunk at a time, releasing the map's pages after each: 1M rows drawn from 10M touch every page of the
    # file (15 GB at 384 dims), which would all count in the build's RSS until the kernel needed the memory.
    for start in range(0, cap, ADD_CHUNK):
        out[start : start + ADD_CHUNK] = vectors[rows[start : start + ADD_CHUNK]]
        release(vectors)
    return out


@dataclass
class TwoLevel:
    """Two-level k-means's lists (`centroids`, unit rows) and the groups they were split from (`groups`, unit
    rows; `group_of[list]`): what `assign` uses to find a vector's list without scoring every list."""

    centroids: np.ndarray
    groups: np.ndarray
    group_of: np.ndarray

    def assign(self, x: np.ndarray, probe: int = 3) -> np.ndarray:
        """Each row's list (highest inner product) among the lists of its `probe` nearest groups: ~(groups + probe
        · nlist/groups) products per vector instead of nlist (16,384 at 10M: 30x fewer), a matrix product per
        group. A vector on a group's border may land in its second-best list (`bench/scale.py` measures the
        recall that the calibrated nprobe keeps either way)."""
        near = np.argpartition(-(x @ self.groups.T), min(probe, len(self.groups)) - 1, axis=1)[:, :probe]
        best = np.full(len(x), -np.inf, dtype=np.float32)
        out = np.zeros(len(x), dtype=np.int64)
        for g in range(len(self.groups)):
            rows = np.flatnonzero((near == g).any(axis=1))
            lists = np.flatnonzero(self.group_of == g)
            if not len(rows) or not len(lists):
                continue
            scores = x[rows] @ self.centroids[lists].T
            pick = scores.argmax(axis=1)
            top = scores[np.arange(len(rows)), pick]
            better = top > best[rows]
            best[rows[better]], out[rows[better]] = top[better], lists[pick[better]]
        return out


def two_level_centroids(sample: np.ndarray, nlist: int, seed: int, niter: int = 10) -> TwoLevel:
    """`nlist` unit centroids of `sample` by two-level spherical k-means (FAISS's `two_level_clustering`, with
    its sub-cluster sizes kept within what each group holds): sqrt(nlist) groups, then each group split into lists
    in proportion to its share of the sample."""
    n, dim = sample.shape
    groups = max(1, math.isqrt(nlist))
    top = faiss.Kmeans(dim, groups, niter=niter, seed=seed, spherical=True)  # on <= 256 per group
    top.train(sample)
    assign = top.index.search(sample, 1)[1].ravel()
    sizes = np.bincount(assign, minlength=groups)
    share = np.cumsum(sizes) * nlist // n
    lists = np.minimum(np.diff(share, prepend=0), sizes)  # never more lists than vectors in a group
    while (short := nlist - int(lists.sum())) > 0:  # what the cap took goes to the largest groups with room
        room = np.flatnonzero(lists < sizes)
        lists[room[np.argsort(-sizes[room], kind="stable")][:short]] += 1
    order = np.argsort(assign, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    parts = []
    with Progress(groups, "k-means groups", unit="group", bar=False) as bar:
        for g in range(groups):
            k, members = int(lists[g]), sample[order[bounds[g] : bounds[g + 1]]]
            if k == 1:
                parts.append(members.mean(axis=0, keepdims=True))
            elif k > 1:
                km = faiss.Kmeans(dim, k, niter=niter, seed=seed + g, spherical=True, min_points_per_centroid=1,
                                  max_points_per_centroid=TRAIN_POINTS_PER_LIST * 4)
                km.train(np.ascontiguousarray(members))
                parts.append(km.centroids)
            bar.update()

    def unit(a: np.ndarray) -> np.ndarray:
        a = a.astype(np.float32)
        return a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)

    return TwoLevel(unit(np.concatenate(parts)), unit(top.centroids),
                    np.repeat(np.arange(groups), lists).astype(np.int64))
