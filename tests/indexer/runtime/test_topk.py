"""The one top-k merge (`indexer.runtime.topk`), checked against a sort of every (score, id) pair by hand, with
padding (-1 ids), -inf scores and ties."""

from __future__ import annotations

import numpy as np

from indexer.runtime.topk import merge_top_k


def reference(parts: list[tuple[np.ndarray, np.ndarray]], k: int) -> list[list[tuple[float, int]]]:
    out = []
    for q in range(len(parts[0][0])):
        pairs = [(float(s), int(i)) for scores, ids in parts for s, i in zip(scores[q], ids[q], strict=True)
                 if i >= 0 and np.isfinite(s)]
        out.append(sorted(pairs, key=lambda p: (-p[0], p[1]))[:k])  # ties by the smaller id, whatever the part
    return out


def test_merge_matches_a_sort_of_every_pair() -> None:
    rng = np.random.default_rng(0)
    for k in (1, 3, 7, 12):
        parts = []
        for width in (5, 0, 4, 6):
            scores = rng.integers(0, 6, size=(9, width)).astype(np.float32)  # small integers: many ties
            ids = rng.integers(0, 1000, size=(9, width)).astype(np.int64)
            ids[rng.random((9, width)) < 0.2] = -1  # padding
            scores[rng.random((9, width)) < 0.05] = -np.inf
            parts.append((scores, ids))
        scores, ids = merge_top_k(parts, k)
        assert scores.dtype == np.float32 and ids.dtype == np.int64 and scores.shape == ids.shape
        for q, want in enumerate(reference(parts, k)):
            got = [(float(s), int(i)) for s, i in zip(scores[q], ids[q], strict=True) if i >= 0]
            assert got == want
            assert (ids[q, len(got):] == -1).all() and np.isneginf(scores[q, len(got):]).all()


def test_padding_with_a_score_never_outranks_a_hit() -> None:
    faiss_padding = (np.array([[-3.4e38, 0.5]], np.float32), np.array([[-1, 4]], np.int64))
    other = (np.array([[0.1, 0.0]], np.float32), np.array([[9, -1]], np.int64))
    scores, ids = merge_top_k([faiss_padding, other], 3)
    assert ids.tolist() == [[4, 9, -1]] and scores[0, :2].tolist() == [0.5, np.float32(0.1)]
