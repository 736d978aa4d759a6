"""Top-k merge: several (scores, ids) answers to the same queries made one, best first. Used wherever one search
is answered by several indexes: the live overlay (a version's answer and its written documents', dense and
lexical) and the sharded backend (one answer per shard)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def merge_top_k(parts: Sequence[tuple[np.ndarray, np.ndarray]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per query, the k best (score, id) over `parts` (each (scores, ids) of shape (n, k_i)), best first; ties keep
    the parts' order. Id -1 marks nothing: it sorts last, as does a non-finite score, and both come back as id -1
    with score -inf. Scores are float32."""
    scores = np.concatenate([np.where(ids >= 0, s, -np.inf) for s, ids in parts], axis=1)
    ids = np.concatenate([i for _, i in parts], axis=1)
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    top_scores = np.take_along_axis(scores, order, axis=1)
    top_ids = np.take_along_axis(ids, order, axis=1)
    top_ids[~np.isfinite(top_scores)] = -1
    return np.where(top_ids >= 0, top_scores, -np.inf).astype(np.float32), top_ids
