"""Vectors in a build: the rows' vectors a corpus brings (`indexer build --data` with a vector column), checked
against the encoder's space, and the growing array every corpus build keeps its vectors in (memory-mapped in the
staging folder, so a corpus's vectors never have to fit in RAM).

A corpus brings a vector on every row or on none (the first row decides; a mix is a `FILE:LINE` error); the checks
(dimension, finite, non-zero) and the normalisation are `indexer.runtime.vectors`', shared with the API.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from indexer.corpus_batches import DocBatch
from indexer.corpus_rows import CorpusFormatError
from indexer.runtime.mapped import release
from indexer.runtime.vectors import check_vectors

VECTOR_BLOCK = 16_384  # rows per block of the growing vector array
NUMBER_TYPES = {int, float}  # what JSON numbers parse to (bool is a type of its own here, not int)


class RowVectors:
    """Whether the corpus brings vectors (decided by its first row), and the check that every row agrees."""

    def __init__(self, field: str, encoding: bool) -> None:
        self.field, self.encoding = field, encoding
        self.brought: bool | None = None

    def check(self, batch: DocBatch) -> None:
        """Every row of `batch` brings a vector if the corpus's first row did, none otherwise."""
        if not len(batch):
            return
        has = batch.has_vector if batch.has_vector is not None else np.fromiter(
            (batch.row_has_vector(i) for i in range(len(batch))), dtype=bool, count=len(batch))
        if self.brought is None:
            self.brought = bool(has[0])
            if self.brought and not self.encoding:
                raise CorpusFormatError(f"{batch.where(0)}: the corpus brings vectors ({self.field!r}); the Ray "
                                        f"build encodes: build it with --engine local")
        odd = np.flatnonzero(has != self.brought)
        if len(odd):
            i = int(odd[0])
            raise CorpusFormatError(
                f"{batch.where(i)}: {'no' if self.brought else 'a'} vector field {self.field!r}, but the rows before "
                f"it have {'one each' if self.brought else 'none'}: every row brings a vector, or none does")


def brought_vectors(batch: DocBatch, kept: list[int], dim: int, field: str) -> np.ndarray:
    """The vectors that rows `kept` of `batch` brought, checked against the encoder's space and normalised
    (`indexer.runtime.vectors`); a bad one is a `FILE:LINE` error."""
    if batch.matrix is not None:  # read column-wise: every row has one (`RowVectors.check`), all of one length
        arr = batch.matrix[np.asarray(kept, dtype=np.int64)]
        if arr.shape[1] != dim:
            raise CorpusFormatError(f"{batch.where(kept[0])}: vector field {field!r} holds dimension {arr.shape[1]}, "
                                    f"but the collection's encoder has dimension {dim}")
    else:
        vectors = batch.vectors or []
        for i in kept:  # ragged or non-numeric rows first: they cannot form one array
            v = vectors[i]
            n = v.shape[0] if isinstance(v, np.ndarray) else len(v) if isinstance(v, (list, tuple)) else -1
            if n != dim:
                got = f"dimension {n}" if n >= 0 else f"a {type(v).__name__}"
                raise CorpusFormatError(f"{batch.where(i)}: vector field {field!r} holds {got}, but the collection's "
                                        f"encoder has dimension {dim}")
            if isinstance(v, (list, tuple)) and not set(map(type, v)) <= NUMBER_TYPES:
                # numpy would read true/false as 1/0 and "0.5" as 0.5: refused, as HTTP refuses them
                bad = next(x for x in v if type(x) not in NUMBER_TYPES)
                raise CorpusFormatError(f"{batch.where(i)}: vector field {field!r} holds {json.dumps(bad)}, not a "
                                        f"number: a vector is a list of numbers")
        arr = None
    try:
        return check_vectors(arr if arr is not None else
                             np.stack([np.asarray(batch.vectors[i], dtype=np.float64) for i in kept]),  # type: ignore[index]
                             dim)
    except (TypeError, ValueError) as exc:
        row = int(str(exc).split(":")[0].removeprefix("row ")) if str(exc).startswith("row ") else 0
        reason = str(exc).split(": ", 1)[-1]
        raise CorpusFormatError(f"{batch.where(kept[row])}: vector field {field!r}: {reason}") from None


class VectorRows:
    """A growing (rows × dim) float32 array kept as fixed blocks, so growing never copies what is there.

    With `path` the blocks are windows of one file (memory-mapped: the kernel writes them out and may drop them,
    so a corpus's vectors never have to fit in RAM, and `take` hands back the file mapped read-only, no copy);
    without, they live in memory."""

    def __init__(self, dim: int, path: Path | None = None) -> None:
        self.dim = dim
        self.path = path
        self.blocks: list[np.ndarray] = []
        self.n = 0
        self.reserved = 0  # rows whose bytes the file has on disk
        if path is not None:
            path.write_bytes(b"")

    def _grow(self) -> None:
        if self.path is None:
            self.blocks.append(np.empty((VECTOR_BLOCK, self.dim), dtype=np.float32))
            return
        block_bytes = VECTOR_BLOCK * self.dim * 4
        offset = len(self.blocks) * block_bytes
        with open(self.path, "r+b") as f:
            f.truncate(offset + block_bytes)  # sparse: the rows written are reserved by `_reserve`
        self.blocks.append(np.memmap(self.path, dtype=np.float32, mode="r+", offset=offset,
                                     shape=(VECTOR_BLOCK, self.dim)))

    def _reserve(self, rows: int) -> None:
        """Disk blocks for the first `rows` rows before they are written through the map: on a full disk that is
        an OSError (ENOSPC) here, where a write into a sparse mapped page would be a SIGBUS."""
        if self.path is None or rows <= self.reserved:
            return
        with open(self.path, "r+b") as f:
            os.posix_fallocate(f.fileno(), self.reserved * self.dim * 4, (rows - self.reserved) * self.dim * 4)
        self.reserved = rows

    def put(self, rows: np.ndarray, vecs: np.ndarray) -> None:
        # the last of repeated rows wins (an id twice in one chunk)
        last = len(rows) - 1 - np.unique(rows[::-1], return_index=True)[1]
        rows, vecs = rows[last], vecs[last]
        need = int(rows.max()) + 1
        while len(self.blocks) * VECTOR_BLOCK < need:
            self._grow()
        self._reserve(need)
        self.n = max(self.n, need)
        block = rows // VECTOR_BLOCK
        for b in np.unique(block):
            mine = block == b
            self.blocks[b][rows[mine] % VECTOR_BLOCK] = vecs[mine]
            release(self.blocks[b])  # written: the page cache holds it, not this process (`runtime.mapped`)

    def take(self) -> np.ndarray:
        """All rows as one array (the blocks are released): for a file, the file itself mapped read-only."""
        if not self.blocks:
            return np.zeros((0, self.dim), np.float32)
        if self.path is None:
            out = np.concatenate(self.blocks)[: self.n]
            self.blocks = []
            return out
        for block in self.blocks:
            block.flush()  # type: ignore[attr-defined]
        self.blocks = []
        with open(self.path, "r+b") as f:
            f.truncate(self.n * self.dim * 4)
        return np.memmap(self.path, dtype=np.float32, mode="r", shape=(self.n, self.dim))


