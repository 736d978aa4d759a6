"""Fusing two ranked lists (dense and lexical) of one query into one: reciprocal-rank fusion or a convex
combination of normalised scores. Pure numpy over (scores, ids) arrays, so the API and evaluations fuse alike.

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
    kind: FusionKind = "rrf"
    k: float = DEFAULT_RRF_K  # RRF's rank constant
    alpha: float = DEFAULT_ALPHA  # convex: the dense list's weight


def _valid(scores: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    keep = ids >= 0
    return np.asarray(scores, np.float64)[keep], np.asarray(ids, np.int64)[keep]


def _top(ids: np.ndarray, fused: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((ids, -fused))[:k]
    return fused[order].astype(np.float32), ids[order]


def rrf(lists: list[tuple[np.ndarray, np.ndarray]], k: int, rrf_k: float = DEFAULT_RRF_K
        ) -> tuple[np.ndarray, np.ndarray]:
    """The best k of the lists' documents by reciprocal-rank fusion; each list (scores, ids) best first, id -1
    ignored."""
    acc: dict[int, float] = {}
    for scores, ids in lists:
        _, ids = _valid(scores, ids)
        for rank, i in enumerate(ids.tolist(), start=1):
            acc[i] = acc.get(i, 0.0) + 1.0 / (rrf_k + rank)
    if not acc:
        return np.zeros(0, np.float32), np.zeros(0, np.int64)
    all_ids = np.fromiter(acc, dtype=np.int64, count=len(acc))
    return _top(all_ids, np.fromiter(acc.values(), dtype=np.float64, count=len(acc)), k)


def minmax(scores: np.ndarray) -> np.ndarray:
    if not len(scores):
        return scores
    lo, hi = float(scores.min()), float(scores.max())
    return np.ones_like(scores) if hi - lo <= 0 else (scores - lo) / (hi - lo)


def convex(dense: tuple[np.ndarray, np.ndarray], lexical: tuple[np.ndarray, np.ndarray], k: int,
           alpha: float = DEFAULT_ALPHA) -> tuple[np.ndarray, np.ndarray]:
    """The best k by alpha · minmax(dense) + (1 − alpha) · minmax(lexical)."""
    acc: dict[int, float] = {}
    for (scores, ids), weight in ((dense, alpha), (lexical, 1.0 - alpha)):
        scores, ids = _valid(*[np.asarray(x) for x in (scores, ids)])
        for i, s in zip(ids.tolist(), minmax(scores).tolist(), strict=True):
            acc[i] = acc.get(i, 0.0) + weight * s
    if not acc:
        return np.zeros(0, np.float32), np.zeros(0, np.int64)
    all_ids = np.fromiter(acc, dtype=np.int64, count=len(acc))
    return _top(all_ids, np.fromiter(acc.values(), dtype=np.float64, count=len(acc)), k)


def fuse(fusion: Fusion, dense: tuple[np.ndarray, np.ndarray], lexical: tuple[np.ndarray, np.ndarray], k: int
         ) -> tuple[np.ndarray, np.ndarray]:
    if fusion.kind == "rrf":
        return rrf([dense, lexical], k, fusion.k)
    return convex(dense, lexical, k, fusion.alpha)
