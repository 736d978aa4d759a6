"""Fusing two ranked lists (dense and lexical) of one query into one: reciprocal-rank fusion or a convex
combination of normalised scores. Pure numpy over (scores, ids) arrays, so the API and evaluations fuse alike.

The default is the convex combination with alpha 0.5: the best fusion on average over the BEIR sets measured,
close to the best alpha on each, and the least-tuned choice among those measured (docs/research.md has the
figures, `bench/beir.py` the command).

- RRF (Cormack et al. 2009): score(d) = Σ_lists 1 / (k + rank(d)), ranks from 1; a document missing from a list
  gets nothing from it. k = 60 by default.
- Convex: each list's scores min-max normalised to [0, 1] over its own candidates (a list of one document, or of
  equal scores, normalises to 1), then alpha · dense + (1 − alpha) · lexical; a document missing from a list
  gets 0 from it.

Ties are broken by the smaller id, so a fusion is deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

DEFAULT_RRF_K = 60.0
DEFAULT_ALPHA = 0.5
HYBRID_DEPTH = 100  # candidates taken from each list before fusing (at least top_k)

FusionKind = Literal["rrf", "convex"]


@dataclass(frozen=True)
class Fusion:
    kind: FusionKind = "convex"
    k: float = DEFAULT_RRF_K  # RRF's rank constant
    alpha: float = DEFAULT_ALPHA  # convex: the dense list's weight


def _valid(scores: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ids = np.asarray(ids, np.int64)
    keep = ids >= 0
    return np.asarray(scores, np.float64)[keep], ids[keep]


def _accumulate(ids: list[np.ndarray], weights: list[np.ndarray], k: int) -> tuple[np.ndarray, np.ndarray]:
    """The best k of the lists' documents by the sum of their weights, ties by the smaller id. In numpy, not a
    Python loop over the candidates (it runs on every hybrid `/search`): the sums are taken in the lists' order,
    as a dict accumulating list by list would take them, so the scores are the same to the last bit."""
    all_ids = np.concatenate(ids)
    if not all_ids.size:
        return np.zeros(0, np.float32), np.zeros(0, np.int64)
    uniq, inverse = np.unique(all_ids, return_inverse=True)  # ascending ids
    fused = np.bincount(inverse, weights=np.concatenate(weights), minlength=uniq.size)
    order = np.argsort(-fused, kind="stable")[:k]  # stable over ascending ids: ties go to the smaller id
    return fused[order].astype(np.float32), uniq[order]


def rrf(lists: list[tuple[np.ndarray, np.ndarray]], k: int, rrf_k: float = DEFAULT_RRF_K
        ) -> tuple[np.ndarray, np.ndarray]:
    """The best k of the lists' documents by reciprocal-rank fusion; each list (scores, ids) best first, id -1
    ignored."""
    valid = [_valid(scores, ids)[1] for scores, ids in lists]
    return _accumulate(valid, [1.0 / (rrf_k + np.arange(1, len(ids) + 1, dtype=np.float64)) for ids in valid], k)


def minmax(scores: np.ndarray) -> np.ndarray:
    if not len(scores):
        return scores
    lo, hi = float(scores.min()), float(scores.max())
    return np.ones_like(scores) if hi - lo <= 0 else (scores - lo) / (hi - lo)


def convex(dense: tuple[np.ndarray, np.ndarray], lexical: tuple[np.ndarray, np.ndarray], k: int,
           alpha: float = DEFAULT_ALPHA) -> tuple[np.ndarray, np.ndarray]:
    """The best k by alpha · minmax(dense) + (1 − alpha) · minmax(lexical)."""
    (ds, di), (ls, li) = _valid(*dense), _valid(*lexical)
    return _accumulate([di, li], [alpha * minmax(ds), (1.0 - alpha) * minmax(ls)], k)


def fuse(fusion: Fusion, dense: tuple[np.ndarray, np.ndarray], lexical: tuple[np.ndarray, np.ndarray], k: int
         ) -> tuple[np.ndarray, np.ndarray]:
    if fusion.kind == "rrf":
        return rrf([dense, lexical], k, fusion.k)
    return convex(dense, lexical, k, fusion.alpha)
