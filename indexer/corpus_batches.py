"""A corpus's rows a batch at a time, for the build's ingest (`indexer.ingest`): ids, texts, metadata as JSON and
the vectors the rows bring, column by column where the format allows it.

Why: read row by row, a 10M-document Parquet corpus spends most of its load stage building, checking and
serialising one Python dict per row (`corpus_rows.make_doc`). A Parquet batch whose metadata columns are all
scalars (integers, finite-or-missing floats, booleans, strings without NUL, none long enough to pass the JSON size
limit) holds nothing the per-row checks could refuse, so it is read column-wise (`columnar_batch`): the same ids,
texts and metadata JSON that the rows would give, and its vectors as one matrix. Any other batch (nested or
`metadata` columns, a null or blank id, a NUL…) and every other format go through `make_doc`, row by row, with
its errors (`batch_of_docs`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from json.encoder import encode_basestring  # type: ignore[attr-defined]
from pathlib import Path
from typing import Any

import numpy as np

from indexer.corpus_rows import CorpusFormatError, Doc, ExtId, Fields, join_title
from indexer.runtime.metadata import INT64_MAX, MAX_BYTES

# the JSON each document's metadata is stored as (what `json.dumps(meta, ensure_ascii=False)` writes)
dump_meta = json.JSONEncoder(ensure_ascii=False).encode


@dataclass(slots=True)
class DocBatch:
    """Rows in file order. Vectors: none (`vectors` and `matrix` None), one object per row as given (None where a
    row has none: rows read one by one), or the rows that have one as `matrix` rows, in order, with `has_vector`
    marking them (Parquet read column-wise)."""

    ext_ids: list[ExtId]
    texts: list[str]  # title joined; "" for an empty text
    metas: list[str]  # JSON
    where: Callable[[int], str]  # FILE:LINE of row i, for messages
    vectors: list[Any] | None = None
    matrix: np.ndarray | None = None
    has_vector: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.texts)

    def head(self, n: int) -> DocBatch:
        """The first `n` rows."""
        return DocBatch(self.ext_ids[:n], self.texts[:n], self.metas[:n], self.where,
                        None if self.vectors is None else self.vectors[:n],
                        None if self.matrix is None else self.matrix[: int(self.has_vector[:n].sum())],  # type: ignore[index]
                        None if self.has_vector is None else self.has_vector[:n])

    def row_has_vector(self, i: int) -> bool:
        if self.has_vector is not None:
            return bool(self.has_vector[i])
        return self.vectors is not None and self.vectors[i] is not None


def batch_of_docs(docs: list[Doc]) -> DocBatch:
    wheres = [d.where for d in docs]
    return DocBatch([d.ext_id for d in docs], [d.text for d in docs], [dump_meta(d.metadata) for d in docs],
                    wheres.__getitem__, vectors=[d.vector for d in docs])


def _scalar_column(col: Any) -> list[Any] | None:  # noqa: ANN401
    """A metadata column's values as `make_doc` would keep them (None: absent), or None when a value could fail
    the metadata schema (the batch then goes row by row)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = col.type
    if pa.types.is_null(t):
        return [None] * len(col)
    if pa.types.is_boolean(t) or (pa.types.is_integer(t) and not pa.types.is_uint64(t)):
        return col.to_pylist()
    if pa.types.is_uint64(t):
        top = pc.max(col).as_py()
        return col.to_pylist() if top is None or top <= INT64_MAX else None
    if pa.types.is_floating(t):
        values = col.to_pylist()
        if pc.all(pc.is_finite(col)).as_py() not in (True, None):  # NaN, ±inf: missing, as `meta_value` has it
            values = [v if v is not None and math.isfinite(v) else None for v in values]
        return values
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        if pc.any(pc.match_substring(col, "\x00")).as_py():
            return None
        return col.to_pylist()
    return None


def _json_bool(v: bool) -> str:
    return "true" if v else "false"


def _json_objects(keys: list[str], columns: list[list[Any]], n: int) -> list[str]:
    """Row i's JSON object of (key, column[i]) for the values not None, exactly as `dump_meta` writes the dict
    (`json.dumps(..., ensure_ascii=False)`), built a column at a time: each value's `"key": value` text once, then
    one join per row."""
    if not keys:
        return ["{}"] * n
    parts = []
    for key, values in zip(keys, columns, strict=True):
        head = encode_basestring(key) + ": "
        first = next((v for v in values if v is not None), None)
        # what JSONEncoder writes: escaped strings, true/false, int and float repr (the floats here are finite)
        text = (encode_basestring if isinstance(first, str) else _json_bool if isinstance(first, bool)
                else int.__repr__ if isinstance(first, int) else float.__repr__)
        parts.append([None if v is None else head + text(v) for v in values])
    return ["{" + ", ".join(p for p in row if p is not None) + "}" for row in zip(*parts, strict=True)]


def columnar_batch(batch: Any, fields: Fields, path: Path, rows_before: int,  # noqa: ANN401
                   matrix: tuple[np.ndarray, np.ndarray] | None) -> DocBatch | None:
    """A Parquet record batch read column-wise (see the module docstring), or None when it must go row by row.
    `matrix`: the batch's vectors as (rows that have one, which rows have one)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    names = batch.schema.names
    if "metadata" in names and "metadata" not in (fields.id, fields.text, fields.vector):
        return None  # a metadata object to flatten: row by row
    ids = batch.column(fields.id)
    if ids.null_count or pa.types.is_uint64(ids.type):
        return None
    if not pa.types.is_integer(ids.type) and pc.any(pc.equal(pc.utf8_trim_whitespace(ids), "")).as_py():
        return None
    keys = [n for n in names if n not in (fields.id, fields.text, fields.vector)
            and (fields.metadata is None or n in fields.metadata)]
    if any(not k.strip() or "\x00" in k for k in keys):
        return None
    if fields.metadata is not None:  # `--metadata-fields` order, as `make_doc` keeps it
        keys = [k for k in fields.metadata if k in keys]
    longest = 0
    columns = []
    for k in keys:
        col = batch.column(k)
        values = _scalar_column(col)
        if values is None:
            return None
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            longest += pc.max(pc.binary_length(col)).as_py() or 0
        columns.append(values)
    if 6 * longest + 40 * (len(keys) + 1) > MAX_BYTES:  # could pass the JSON size limit: let make_doc measure it
        return None
    texts = [t or "" for t in batch.column(fields.text).to_pylist()]
    if fields.title:
        titles = batch.column(fields.title).to_pylist()
        texts = [join_title(ti, te) for ti, te in zip(titles, texts, strict=True)]
    else:
        texts = [t.strip() for t in texts]
    metas = _json_objects(keys, columns, len(texts))
    return DocBatch(ids.to_pylist(), texts, metas, lambda i: f"{path}:{rows_before + i + 1}",
                    matrix=None if matrix is None else matrix[0], has_vector=None if matrix is None else matrix[1])


# --- the vector column -------------------------------------------------------------------------------------------

def check_vector_type(path: Path, name: str, t: object) -> None:
    import pyarrow as pa

    if not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)) or not (
            pa.types.is_floating(t.value_type) or pa.types.is_integer(t.value_type)):  # type: ignore[attr-defined]
        raise CorpusFormatError(f"{path}: vector column {name!r} has type {t}; it must be list<float32> or "
                                f"fixed_size_list<float32, dim>")


def batch_matrix(path: Path, rows_before: int, col: object) -> tuple[np.ndarray, np.ndarray]:
    """A batch's vector column as (one float32 row per row that has a vector, which rows have one); a row of
    another length than the batch's first is a `FILE:ROW` error (the dimension check proper is the ingest's,
    against the encoder)."""
    import pyarrow as pa

    assert isinstance(col, (pa.ListArray, pa.LargeListArray, pa.FixedSizeListArray))
    n = len(col)
    valid = np.ones(n, dtype=bool) if col.null_count == 0 else ~np.asarray(col.is_null())
    lengths = np.asarray(col.value_lengths().fill_null(0))
    flat = np.asarray(col.flatten().to_numpy(zero_copy_only=False), dtype=np.float32)
    present = lengths[valid]
    dim = int(present[0]) if len(present) else 0
    bad = np.flatnonzero(valid & (lengths != dim))
    if len(bad):
        i = int(bad[0])
        raise CorpusFormatError(f"{path}:{rows_before + i + 1}: a vector of dimension {int(lengths[i])}, but the "
                                f"rows before it have dimension {dim}")
    return (flat.reshape(-1, dim) if dim else np.zeros((0, 0), np.float32)), valid


def row_vectors(matrix: np.ndarray, valid: np.ndarray) -> list[object]:
    """One row of `matrix` per valid row (views of it), None elsewhere."""
    out: list[object] = [None] * len(valid)
    if matrix.size:
        rows = np.cumsum(valid) - 1
        for i in np.flatnonzero(valid):
            out[i] = matrix[rows[i]]
    return out
