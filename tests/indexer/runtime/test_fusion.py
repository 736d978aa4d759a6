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
