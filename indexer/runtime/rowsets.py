"""Sets of rows or ids held as ascending int64 arrays (a filter's matching ids and their lexical rows, as
`FilterMatch.ids` and `LexicalIndex.rows_of` give them; the tombstones, as `Exclusion.ids`): membership tested by
binary search."""

from __future__ import annotations

import numpy as np


def in_sorted(values: np.ndarray, ascending: np.ndarray) -> np.ndarray:
    """`np.isin(values, ascending)` (any shape of `values`) for an ascending array: a binary search per value.
    np.isin hashes or sorts both arrays on every call, so its cost follows the filter's size; this one's follows
    the values' (docs/decisions.md)."""
    values = np.asarray(values)
    if not len(ascending) or not values.size:
        return np.zeros(values.shape, bool)
    at = np.minimum(np.searchsorted(ascending, values), len(ascending) - 1)
    return np.asarray(ascending[at] == values)


def ascending_unique(values: np.ndarray) -> np.ndarray:
    """`np.unique(values)`, in one pass when they are already ascending (a sorted filter's ids or rows, which
    np.unique would sort again)."""
    values = np.asarray(values)
    if len(values) < 2 or not bool((values[1:] >= values[:-1]).all()):
        return np.unique(values)
    keep = np.empty(len(values), bool)
    keep[0] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]
