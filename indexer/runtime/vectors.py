"""Vectors a user brings (`indexer build --data` with a vector column, `PUT /documents` and `/search` with
`"vector"`): the one check every entry point applies before a vector reaches an index.

The collection's encoder defines the space: a brought vector must have its dimension, be finite and non-zero.
It is then L2-normalised like the encoder's own output (every index searches by inner product on unit vectors,
so an unnormalised vector would rank by its length, not its direction). What a user promises by bringing
vectors — the same model, pooling and normalisation as the collection's encoder — is in docs/own-corpus.md.

Indexes store float32, so a value must be finite *as a float32* (|x| ≤ 3.4e38; JSON's 1e39 is a finite float64
but an infinite float32, refused), and a vector whose values all round to 0 in float32 (|x| < 1.4e-45) has no
direction. The norm itself is taken in float64 over the float32 values: in float32 the sum of squares overflows
from |x| ≈ 1e19 (384 × 1e38) and underflows below |x| ≈ 1e-19, which would make [1e19, …] a zero vector and
[2e-38, …] "all zeros"; in float64 neither happens for any finite float32.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

FLOAT32_MAX = float(np.finfo(np.float32).max)


class VectorError(ValueError):
    """A brought vector that cannot enter the collection's space; the message says why (and which row)."""


def check_vectors(vectors: np.ndarray | Sequence[Sequence[float]], dim: int) -> np.ndarray:
    """`vectors` (n × d) as L2-normalised float32 rows; `VectorError` naming the first bad row (0-based) when
    d is not `dim`, a value is NaN or infinite (as a float32), or a row is all zeros (as float32)."""
    try:
        arr = np.asarray(vectors, dtype=np.float64)
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
    in_range = (np.abs(arr) <= FLOAT32_MAX).all(axis=1)
    if not in_range.all():
        raise VectorError(f"row {int(np.argmin(in_range))}: the vector holds a value beyond float32's range "
                          f"(|x| > {FLOAT32_MAX:.4g}): vectors are stored as float32, where it is infinite")
    arr = arr.astype(np.float32).astype(np.float64)  # the values an index would store, exactly
    norms = np.sqrt(np.einsum("ij,ij->i", arr, arr))  # float64: no overflow or underflow for a float32's square
    if not (norms > 0).all():
        raise VectorError(f"row {int(np.argmin(norms > 0))}: the vector is all zeros (it has no direction; "
                          f"values under 1.4e-45 are 0 as float32)")
    return (arr / norms[:, None]).astype(np.float32)


def check_vector(vector: Sequence[float] | np.ndarray, dim: int) -> np.ndarray:
    """One vector (length `dim`), normalised; `VectorError` saying why not."""
    try:
        arr = np.asarray(vector, dtype=np.float64) if not isinstance(vector, np.ndarray) else vector
    except (TypeError, ValueError) as exc:
        raise VectorError(f"a vector must be a list of numbers: {exc}") from None
    if arr.ndim != 1:
        raise VectorError("a vector must be a flat list of numbers")
    if len(arr) != dim:
        raise VectorError(f"a vector of dimension {len(arr)}, but the collection's encoder has dimension {dim}")
    try:
        return check_vectors(arr[None, :], dim)[0]
    except VectorError as exc:
        raise VectorError(str(exc).removeprefix("row 0: ")) from None
