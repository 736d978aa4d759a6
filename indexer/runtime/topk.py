"""Top-k merge: several (scores, ids) answers to the same queries made one, best first. Used wherever one search
is answered by several indexes: the live overlay (a version's answer and its written documents', dense and
lexical) and the sharded backend (one answer per shard). And `top_k_rows`: the best k of one list of scored rows,
every lexical engine's last step."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def merge_top_k(parts: Sequence[tuple[np.ndarray, np.ndarray]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per query, the k best (score, id) over `parts` (each (scores, ids) of shape (n, k_i)), best first; ties by
    the smaller id, whichever part holds them (the rule of every ranked list: `top_k_rows`, `doc_topk.settle`). Id
    -1 marks nothing: it sorts last, as does a non-finite score, and both come back as id -1 with score -inf.
    Scores are float32."""
    scores = np.concatenate([np.where(ids >= 0, s, -np.inf) for s, ids in parts], axis=1)
    ids = np.concatenate([i for _, i in parts], axis=1)
    order = np.lexsort((ids, -scores), axis=1)[:, :k]
    top_scores = np.take_along_axis(scores, order, axis=1)
    top_ids = np.take_along_axis(ids, order, axis=1)
    top_ids[~np.isfinite(top_scores)] = -1
    return np.where(top_ids >= 0, top_scores, -np.inf).astype(np.float32), top_ids


def top_k_rows(scores: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The best k of (scores, rows) with a score > 0, best first, ties by row (deterministic); rows distinct."""
    keep = scores > 0
    scores, rows = scores[keep], rows[keep]
    if scores.dtype == np.float32 and rows.size and 0 <= rows.min() and rows.max() < 1 << 32:
        # one uint64 key per row, (score descending, row ascending): a positive float32's bits order as it does,
        # so one argpartition and one argsort of single keys do what the partition and lexsort below do
        key = (~scores.view(np.uint32)).astype(np.uint64) << np.uint64(32) | rows.astype(np.uint64)
        sel = np.argpartition(key, k - 1)[:k] if k < key.size else np.arange(key.size)
        order = sel[np.argsort(key[sel])]
        return scores[order], rows[order]
    if k < scores.size:  # the k best; of those tied with the k-th, the lowest rows
        kth = np.partition(scores, scores.size - k)[scores.size - k]
        above = np.flatnonzero(scores > kth)
        tied = np.flatnonzero(scores == kth)
        tied = tied[np.argsort(rows[tied], kind="stable")][: k - above.size]
        sel = np.concatenate([above, tied])
        scores, rows = scores[sel], rows[sel]
    order = np.lexsort((rows, -scores))
    return scores[order], rows[order]
