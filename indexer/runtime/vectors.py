"""Vectors a user brings (`indexer build --data` with a vector column, `PUT /documents` and `/search` with
`"vector"`): the one check every entry point applies before a vector reaches an index.

The collection's encoder defines the space: a brought vector must have its dimension, be finite and non-zero.
It is then L2-normalised like the encoder's own output (every index searches by inner product on unit vectors,
so an unnormalised vector would rank by its length, not its direction). What a user promises by bringing
vectors — the same model, pooling and normalisation as the collection's encoder — is in docs/own-corpus.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class VectorError(ValueError):
    """A brought vector that cannot enter the collection's space; the message says why (and which row)."""


def check_vectors(vectors: np.ndarray | Sequence[Sequence[float]], dim: int) -> np.ndarray:
    """`vectors` (n × d) as L2-normalised float32 rows; `VectorError` naming the first bad row (0-based) when
    d is not `dim`, a value is NaN or infinite, or a row is all zeros."""
    try:
        arr = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise VectorError(f"vectors must be lists of numbers: {exc}") from None
    if arr.ndim == 1 and arr.size == 0:
        arr = arr.reshape(0, dim)
    if arr.ndim != 2:
        raise VectorError("vectors must be lists of numbers of one length each")
    if arr.shape[1] != dim:
        raise VectorError(f"row 0: a vector of dimension {arr.shape[1]}, but the collection's encoder has "
                          f"dimension {dim}")
    finite = np.isfinite(arr).all(axis=1)
    if not finite.all():
        raise VectorError(f"row {int(np.argmin(finite))}: the vector holds NaN or infinity")
    norms = np.linalg.norm(arr, axis=1)
    if not (norms > 0).all():
        raise VectorError(f"row {int(np.argmin(norms > 0))}: the vector is all zeros (it has no direction)")
    return arr / norms[:, None]


def check_vector(vector: Sequence[float] | np.ndarray, dim: int) -> np.ndarray:
    """One vector (length `dim`), normalised; `VectorError` saying why not."""
    arr = np.asarray(vector, dtype=np.float32) if not isinstance(vector, np.ndarray) else vector
    if arr.ndim != 1:
        raise VectorError("a vector must be a flat list of numbers")
    if len(arr) != dim:
        raise VectorError(f"a vector of dimension {len(arr)}, but the collection's encoder has dimension {dim}")
    try:
        return check_vectors(arr[None, :], dim)[0]
    except VectorError as exc:
        raise VectorError(str(exc).removeprefix("row 0: ")) from None
