"""Fusion math on hand-computed cases: reciprocal-rank fusion and the convex combination of min-max scores."""

from __future__ import annotations

import numpy as np
import pytest

from indexer.runtime.fusion import Fusion, convex, fuse, minmax, rrf


def lst(ids: list[int], scores: list[float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    return np.array(scores or [1.0] * len(ids), np.float32), np.array(ids, np.int64)


def test_rrf_matches_a_hand_computed_case() -> None:
    # dense: 7, 3, 9   lexical: 3, 5, 7 (k = 60)
    # 3: 1/62 + 1/61 = 0.032522   7: 1/61 + 1/63 = 0.032266   9: 1/63   5: 1/62
    scores, ids = rrf([lst([7, 3, 9]), lst([3, 5, 7])], k=4, rrf_k=60)
    assert ids.tolist() == [3, 7, 5, 9]
    assert scores == pytest.approx([1 / 62 + 1 / 61, 1 / 61 + 1 / 63, 1 / 62, 1 / 63], rel=1e-6)
    # with k = 1: 2 is second in both lists (1/3 + 1/3), 1 and 3 first in one (1/2 each)
    scores, ids = rrf([lst([1, 2]), lst([3, 2])], k=3, rrf_k=1)
    assert ids.tolist() == [2, 1, 3] and scores[0] == pytest.approx(1 / 3 + 1 / 3)


def test_rrf_ignores_padding_breaks_ties_by_id_and_truncates() -> None:
    scores, ids = rrf([lst([5, -1, -1]), lst([4])], k=10)
    assert ids.tolist() == [4, 5] and scores[0] == scores[1]  # equal ranks: the smaller id first
    assert rrf([lst([]), lst([])], k=5)[1].size == 0
    assert rrf([lst([1, 2, 3]), lst([4, 5, 6])], k=2)[1].tolist() == [1, 4]


def test_convex_matches_a_hand_computed_case() -> None:
    dense = lst([1, 2, 3], [0.9, 0.7, 0.5])  # minmax: 1, 0.5, 0
    lexical = lst([3, 4], [12.0, 4.0])  # minmax: 1, 0
    scores, ids = convex(dense, lexical, k=4, alpha=0.25)
    # 1: 0.25   2: 0.125   3: 0 + 0.75 = 0.75   4: 0
    assert ids.tolist() == [3, 1, 2, 4]
    assert scores == pytest.approx([0.75, 0.25, 0.125, 0.0])
    assert fuse(Fusion("convex", alpha=1.0), dense, lexical, 1)[1].tolist() == [1]  # dense only
    assert fuse(Fusion("convex", alpha=0.0), dense, lexical, 1)[1].tolist() == [3]  # lexical only


def test_minmax_of_equal_scores_is_one() -> None:
    assert minmax(np.array([2.0, 2.0])).tolist() == [1.0, 1.0]
    assert minmax(np.array([], np.float64)).size == 0


def _reference(lists: list[tuple[np.ndarray, np.ndarray]], weights: list[np.ndarray | None], k: int, rrf_k: float
               ) -> tuple[list[float], list[int]]:
    """The fusion written as a Python dict, list by list (the first implementation): RRF where a list's weights
    are None, else the given per-position weights; ties by the smaller id."""
    acc: dict[int, float] = {}
    for (_, ids), w in zip(lists, weights, strict=True):
        kept = [int(i) for i in ids if i >= 0]
        for rank, i in enumerate(kept, start=1):
            acc[i] = acc.get(i, 0.0) + (1.0 / (rrf_k + rank) if w is None else float(w[rank - 1]))
    ranked = sorted(acc.items(), key=lambda x: (-x[1], x[0]))[:k]
    return [float(np.float32(s)) for _, s in ranked], [i for i, _ in ranked]


def test_vectorised_fusion_equals_the_dict_reference_to_the_bit() -> None:
    """Random lists with shared ids, -1 padding and tied scores: the numpy fusion returns exactly the ids and
    scores of the dict-based reference, for RRF and the convex combination."""
    rng = np.random.default_rng(3)
    for case in range(400):
        lists = []
        for _ in range(2):
            n = int(rng.integers(0, 40))
            ids = rng.choice(60, size=n, replace=False).astype(np.int64)
            scores = np.sort(np.round(rng.random(n) * 4) / 4)[::-1].astype(np.float32)  # ties on purpose
            if case % 3 == 0 and n:
                ids[-1] = -1
            lists.append((scores, ids))
        k = int(rng.integers(1, 50))
        got_s, got_i = rrf(lists, k, rrf_k=60.0)
        ref_s, ref_i = _reference(lists, [None, None], k, 60.0)
        assert got_i.tolist() == ref_i and got_s.tolist() == ref_s, case
        alpha = float(rng.choice([0.0, 0.3, 0.5, 1.0]))
        (ds, di), (ls, li) = lists
        weights = [alpha * minmax(np.asarray(ds, np.float64)[di >= 0]),
                   (1 - alpha) * minmax(np.asarray(ls, np.float64)[li >= 0])]
        got_s, got_i = convex(lists[0], lists[1], k, alpha)
        ref_s, ref_i = _reference(lists, weights, k, 60.0)
        assert got_i.tolist() == ref_i and got_s.tolist() == ref_s, case
