"""Pure helpers of the side-by-side bench: interleaved round order, percentiles, ratios (tested without the
peers' venvs in tests/bench/test_peer_stats.py)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar

import numpy as np

T = TypeVar("T")


def interleave(systems: Sequence[T], rounds: int) -> Iterator[tuple[int, T]]:
    """(round, system) in the order A B C A B C …: each round visits every system once, so a change of load on
    the shared machine during the run falls on every system alike rather than on whichever ran last."""
    for r in range(rounds):
        for s in systems:
            yield r, s


def percentiles(values: Iterable[float], qs: Sequence[float] = (50, 95, 99)) -> dict[float, float]:
    """Linear-interpolated percentiles (numpy's default); NaN for an empty sample rather than an exception, so a
    peer with no successful request still gets a row that says so."""
    arr = np.asarray(list(values), dtype=np.float64)
    if arr.size == 0:
        return {q: float("nan") for q in qs}
    return {q: float(v) for q, v in zip(qs, np.percentile(arr, qs), strict=True)}


def median(values: Iterable[float]) -> float:
    return percentiles(values, (50,))[50]


def safe_ratio(a: float | None, b: float | None, digits: int = 2) -> float | None:
    """a / b, or None where either is missing, zero or NaN (a peer that failed has no ratio, not 0 or inf)."""
    if a is None or b is None or not np.isfinite(a) or not np.isfinite(b) or b == 0:
        return None
    return round(a / b, digits)
