"""One row of a user's corpus → a `Doc`: its external id as given (a string stays a string, an integer an
integer), the text to encode and its metadata; and the error every corpus reader raises.

Conventions (docs/own-corpus.md repeats them):
- Title joining follows BEIR's `SentenceBERT.encode_corpus` (also MTEB's): `(title + " " + text).strip()` when a
  title field is set and the row has a non-empty title, else `text.strip()`. That joined string is what is
  encoded and stored as the document's text.
- Metadata is every field other than the id and text fields (the title included), unless `--metadata-fields`
  names them. A field called `metadata` holding an object (BEIR's corpus, Strata's write API) is flattened: its
  keys are metadata fields, and replace top-level fields of the same name. It must fit the metadata schema of
  `indexer.runtime.metadata` (64-bit integers, finite numbers, valid Unicode, bounded nesting and size), the
  same as `PUT /documents` takes: a row outside it is a `FILE:LINE` error.
- CSV/TSV cells have no types: a cell that is a canonical integer (`17`, `-3`; not `007`) becomes an int, a
  decimal number (`2.5`, `1e3`) a float, an empty cell is absent, anything else stays a string. The same rule
  applies to the id column, so `17` and `007` are the ids 17 and "007".
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any, Literal

from indexer.runtime.metadata import INT64_MAX, INT64_MIN, MAX_DEPTH, MetadataError, check_metadata, valid_unicode
from indexer.runtime.passage_rows import RESERVED_ID, reserved_id

CorpusFormat = Literal["quora", "jsonl", "csv", "tsv", "parquet", "beir", "files"]
ExtId = str | int
INT_RE = re.compile(r"-?(0|[1-9][0-9]*)")
FLOAT_RE = re.compile(r"-?([0-9]+\.[0-9]*|\.[0-9]+|[0-9]+(\.[0-9]*)?[eE][-+]?[0-9]+)")


class CorpusFormatError(ValueError):
    """A corpus, queries or qrels file that cannot be read; the message names the file (and line or row)."""


@dataclass(frozen=True)
class Fields:
    """Which fields hold the id, the text, the title (optional) and the metadata (None: every other field)."""

    id: str = "id"
    text: str = "text"
    title: str | None = None
    metadata: tuple[str, ...] | None = None
    # the field holding a vector the user brings (`indexer.runtime.vectors`); never metadata. A corpus whose
    # rows have it is built from those vectors, not encoded; one without it is encoded.
    vector: str = "vector"


@dataclass(slots=True)
class Doc:
    ext_id: ExtId
    text: str  # title and text joined (see the module docstring); "" for an empty text
    metadata: dict[str, Any]
    where: str  # FILE:LINE, for messages
    vector: Any = None  # the row's vector as given (a list or a float32 array; checked by the ingest), or None


def default_fields(fmt: CorpusFormat, *, id_field: str | None = None, text_field: str | None = None,
                   title_field: str | None = None, metadata_fields: list[str] | None = None,
                   vector_field: str | None = None) -> Fields:
    """The fields of a format, with the user's choices applied: BEIR defaults to `_id`, `text` and `title`; the
    other formats to `id` and `text`, no title."""
    beir = fmt == "beir"
    return Fields(id=id_field or ("_id" if beir else "id"), text=text_field or "text",
                  title=title_field if title_field is not None else ("title" if beir else None),
                  metadata=tuple(metadata_fields) if metadata_fields is not None else None,
                  vector=vector_field or "vector")


def join_title(title: str | None, text: str) -> str:
    """BEIR's document string: `(title + " " + text).strip()` when there is a title, else `text.strip()`."""
    return (title + " " + text).strip() if title else text.strip()


# --- values ------------------------------------------------------------------------------------------------------

def _check_int(v: int, what: str, where: str) -> int:
    if not INT64_MIN <= v <= INT64_MAX:
        raise CorpusFormatError(f"{where}: {what} {v} does not fit in 64 bits")
    return v


def typed_ext_id(v: object, where: str, field: str) -> ExtId:
    """An external id as given: a non-empty string or a 64-bit integer; anything else is a bad row."""
    if v is None:
        raise CorpusFormatError(f"{where}: id field {field!r} is null")
    if isinstance(v, bool) or not isinstance(v, (str, int)):
        raise CorpusFormatError(f"{where}: id field {field!r} must be a string or an integer, got "
                                f"{type(v).__name__} {v!r}"[:300])
    if isinstance(v, str):
        if not v.strip():
            raise CorpusFormatError(f"{where}: id field {field!r} is empty")
        if not valid_unicode(v):
            raise CorpusFormatError(f"{where}: id {v!r} is not valid Unicode (it holds a lone surrogate)"[:300])
        if reserved_id(v):
            raise CorpusFormatError(f"{where}: id {v[:40]!r}: {RESERVED_ID}")
        return v
    return _check_int(v, "id", where)


def cell_value(s: str) -> str | int | float | None:
    """A CSV cell's value: canonical integer → int, decimal number → float, empty → None, else the string."""
    if s == "":
        return None
    if INT_RE.fullmatch(s):
        v = int(s)
        return v if INT64_MIN <= v <= INT64_MAX else s
    if FLOAT_RE.fullmatch(s):
        return float(s)
    return s


def meta_value(v: Any, where: str, key: str, depth: int = 2) -> Any:  # noqa: ANN401
    """A metadata value as JSON can hold it: str, int, float, bool, None, lists and objects of those. NaN
    (Parquet's usual "missing") becomes None; dates and times become ISO strings (they then sort and compare as
    text); Decimals become floats. The result is then checked against the metadata schema (`make_doc`); here
    only the nesting is bounded, so that a hostile row cannot exhaust the stack (`depth`: the level of `v`, the
    metadata object being level 1)."""
    if v is None or isinstance(v, (bool, str, int)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, (datetime, date, time)):
        return v.isoformat()
    if isinstance(v, Decimal):
        return meta_value(float(v), where, key)
    if isinstance(v, (dict, list, tuple)) and depth > MAX_DEPTH:
        raise CorpusFormatError(f"{where}: metadata field {key!r} nests deeper than {MAX_DEPTH} levels")
    if isinstance(v, dict):
        return {str(k): meta_value(x, where, key, depth + 1) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [meta_value(x, where, key, depth + 1) for x in v]
    raise CorpusFormatError(f"{where}: metadata field {key!r} holds a {type(v).__name__}, which JSON cannot hold "
                            f"(leave it out with --metadata-fields)")


def text_value(v: object, where: str, field: str) -> str:
    if v is None:
        return ""
    if not isinstance(v, str):
        raise CorpusFormatError(f"{where}: field {field!r} must be a string, got {type(v).__name__}")
    if not valid_unicode(v):
        raise CorpusFormatError(f"{where}: field {field!r} is not valid Unicode (it holds a lone surrogate)")
    return v


def make_doc(row: dict[str, Any], fields: Fields, where: str, *, typed: bool = True, vector: Any = None) -> Doc:  # noqa: ANN401
    """A `Doc` from one row (a JSON object, a CSV record or a Parquet row); `vector`: the row's vector when the
    reader took it out already (Parquet reads a batch's vectors as one array), else the vector field's value."""
    if fields.id not in row:
        raise CorpusFormatError(f"{where}: no id field {fields.id!r} (pick one with --id-field)")
    if fields.text not in row:
        raise CorpusFormatError(f"{where}: no text field {fields.text!r} (pick one with --text-field)")
    raw_id = row[fields.id]
    if not typed and isinstance(raw_id, str) and raw_id.strip():
        raw_id = cell_value(raw_id)  # CSV: "17" is the integer id 17 (see the module docstring)
    ext_id = typed_ext_id(raw_id, where, fields.id)
    text = text_value(row[fields.text], where, fields.text)
    title = text_value(row.get(fields.title), where, fields.title) if fields.title else ""
    meta: dict[str, Any] = {}
    if vector is None:
        vector = row.get(fields.vector)
        if vector is not None and not typed:
            raise CorpusFormatError(f"{where}: a vector field {fields.vector!r} in a CSV/TSV file; bring vectors in "
                                    f"JSONL or Parquet")
    for key, value in row.items():
        if key in (fields.id, fields.text, fields.vector):
            continue
        if key == "metadata" and isinstance(value, dict):
            continue  # flattened below, after the top-level fields
        meta[key] = value
    nested = row.get("metadata")
    if isinstance(nested, dict):
        meta.update(nested)
    if fields.metadata is not None:
        meta = {k: meta[k] for k in fields.metadata if k in meta}
    out: dict[str, Any] = {}
    for key, value in meta.items():
        if not typed and isinstance(value, str) and key != fields.title:
            value = cell_value(value)
        value = meta_value(value, where, key)
        if value is not None:
            out[str(key)] = value
    try:
        check_metadata(out)  # the one schema, shared with PUT /documents (indexer.runtime.metadata)
    except MetadataError as exc:
        raise CorpusFormatError(f"{where}: {exc}") from None
    return Doc(ext_id, join_title(title, text), out, where, vector)
