"""Sets of rows or ids held as ascending int64 arrays (a filter's matching rows and the tombstones' rows, as
`LexicalIndex.rows_of` gives them): membership tested by binary search."""

from __future__ import annotations

import numpy as np


def in_sorted(values: np.ndarray, ascending: np.ndarray) -> np.ndarray:
    """`np.isin(values, ascending)` for an ascending array (every row set here comes from `rows_of`): a binary
    search per value. np.isin hashes or sorts both arrays on every call: 4.7 ms for 100 hits against a 1 % filter's
    100,000 rows at 10M documents, where this takes microseconds."""
    values = np.asarray(values)
    if not len(ascending) or not len(values):
        return np.zeros(len(values), bool)
    at = np.minimum(np.searchsorted(ascending, values), len(ascending) - 1)
    return np.asarray(ascending[at] == values)
