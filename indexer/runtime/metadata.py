"""The one schema for metadata values, shared by every way in (`indexer build --data`, `PUT /documents`, the
write log) and by filter values, plus the repair the service applies when a stored value breaks it anyway.

A document's metadata is a JSON object whose values are, all the way down:

- integers in the signed 64-bit range [-2^63, 2^63 - 1] (SQLite's INTEGER, FAISS-side ids, and what JSON
  clients in most languages read without loss; orjson refuses anything wider);
- finite floats (JSON has no NaN or infinity);
- strings of valid Unicode (no lone surrogates such as "\\ud800": UTF-8, SQLite and JSON encoders refuse them)
  without NUL (U+0000: SQLite's JSON functions, which index the metadata, end a string there, so "a\\u0000b"
  would be filtered as "a"; PostgreSQL's jsonb refuses it too);
- booleans and null;
- lists and objects of these, nested at most `MAX_DEPTH` levels (the metadata object itself is level 1) — the
  response of a `/search` wraps each hit's metadata in 5 more levels, and orjson stops at 254;
- with field names that are valid Unicode without NUL (SQLite would index `k\\u0000z` as `k`), and top-level
  names that are not empty or blank, nor `"\\x1fpassage"` (`passage_rows.PASSAGE_KEY`: a passage row's record);
- `MAX_BYTES` bytes at most as compact JSON (every hit carries its metadata: 100 hits of the limit are 6.4 MB).

Filter values (`indexer.runtime.filters`) are scalars under the same rules. Breaking a rule raises
`MetadataError`, whose message names the field (`a.b[2]`) and the reason; callers add the document (its id, or
`FILE:LINE`). `json_safe` is the service's last line of defence for documents stored before these rules: it
returns a copy that any JSON encoder takes, the offending values repaired, and says what it changed.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from indexer.runtime.passage_rows import PASSAGE_KEY

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
MAX_DEPTH = 32  # levels of lists/objects in one document's metadata, the metadata object itself included
MAX_BYTES = 64 * 1024  # one document's metadata as compact UTF-8 JSON
REPLACEMENT = "\ufffd"
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


class MetadataError(ValueError):
    """A metadata (or filter) value outside the schema; the message names the field and says why."""


def _show(v: object, limit: int = 60) -> str:
    text = repr(v)  # repr escapes lone surrogates: the message itself stays valid Unicode
    return text if len(text) <= limit else text[: limit - 3] + "..."


def valid_unicode(s: str) -> bool:
    """False for a string holding a lone surrogate (which UTF-8 cannot encode)."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def scalar_problem(v: object) -> str | None:
    """Why a scalar value is outside the schema (None: it fits, or it is not a scalar)."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int):
        if not INT64_MIN <= v <= INT64_MAX:
            return f"integer {_show(v)} does not fit in 64 bits (signed: -2^63 .. 2^63-1)"
    elif isinstance(v, float):
        if not math.isfinite(v):
            return f"{v} is not a finite number"
    elif isinstance(v, str):
        if not valid_unicode(v):
            return f"string {_show(v)} is not valid Unicode (it holds a lone surrogate)"
        if "\x00" in v:
            return f"string {_show(v)} holds a NUL character (U+0000), which metadata strings may not hold"
    return None


def check_metadata(meta: dict[str, Any]) -> None:
    """Raise `MetadataError` unless `meta` (one document's metadata, as a build or a write brings it) fits the
    schema; its top-level names may not be `PASSAGE_KEY`, a passage row's own record (a version of passages would
    drop the document's value silently). The write log's passage rows, which hold it, are checked by
    `_checked_json`."""
    if isinstance(meta, dict) and PASSAGE_KEY in meta:
        raise MetadataError(f"metadata field name {_show(PASSAGE_KEY)} is reserved (a version of passages keeps "
                            f"each passage's offsets under it)")
    _checked_json(meta)


def _checked_json(meta: dict[str, Any]) -> bytes:
    """`check_metadata`, returning the compact JSON it measured (so that `metadata_json` encodes it once)."""
    if not isinstance(meta, dict):
        raise MetadataError(f"metadata must be a JSON object, got {type(meta).__name__}")
    for key in meta:
        if not isinstance(key, str) or not key.strip():
            raise MetadataError(f"metadata field names must not be empty or blank, nor other than strings: got "
                                f"{_show(key)}")
    _check(meta, "", 1)
    encoded = compact_json(meta)
    if len(encoded) > MAX_BYTES:
        raise MetadataError(f"metadata is {len(encoded):,} bytes as JSON; the limit is {MAX_BYTES:,}")
    return encoded


def _field(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _check(value: object, path: str, depth: int, top: str = "") -> None:
    """`top`: the top-level field `path` is under (named when nesting is too deep: 32 levels of path say less)."""
    if isinstance(value, str):  # the common cases first: this runs once per value of every document built
        if not valid_unicode(value) or "\x00" in value:
            raise MetadataError(f"metadata field {path!r}: {scalar_problem(value)}")
    elif isinstance(value, dict):
        if depth > MAX_DEPTH:
            raise MetadataError(f"metadata field {top!r} nests deeper than {MAX_DEPTH} levels")
        for key, v in value.items():
            if not isinstance(key, str):
                raise MetadataError(f"metadata field {path!r} has a non-string key {_show(key)}")
            if not valid_unicode(key):
                raise MetadataError(f"metadata field name {_show(key)} in {path or 'metadata'!r} is not valid "
                                    f"Unicode (it holds a lone surrogate)")
            if "\x00" in key:
                raise MetadataError(f"metadata field name {_show(key)} in {path or 'metadata'!r} holds a NUL "
                                    f"character (U+0000), which field names may not hold")
            _check(v, _field(path, key), depth + 1, top or key)
    elif isinstance(value, (list, tuple)):
        if depth > MAX_DEPTH:
            raise MetadataError(f"metadata field {top!r} nests deeper than {MAX_DEPTH} levels")
        for i, v in enumerate(value):
            _check(v, f"{path}[{i}]", depth + 1, top)
    elif value is None or isinstance(value, (bool, int, float)):
        problem = scalar_problem(value)
        if problem:
            raise MetadataError(f"metadata field {path!r}: {problem}")
    else:
        raise MetadataError(f"metadata field {path!r} holds a {type(value).__name__}, which JSON cannot hold")


def compact_json(meta: dict[str, Any]) -> bytes:
    """Checked metadata as compact UTF-8 JSON: orjson's (in C: a write's commit encodes every document's metadata
    while holding the GIL), else the standard library's, the same text, for what orjson does not take (a float or
    int subclass, say)."""
    try:
        return orjson.dumps(meta)
    except (orjson.JSONEncodeError, TypeError):
        return _COMPACT.encode(meta).encode("utf-8")


def metadata_json(meta: dict[str, Any]) -> str:
    """Checked metadata as the store and the write log keep it (compact JSON, non-ASCII kept). It is read back with
    the standard library's `json.loads`, which reads an integer past 64 bits (an older version logged some) as the
    integer it is, where orjson reads a float."""
    return _checked_json(meta).decode("utf-8")


def json_safe(value: Any, max_depth: int = 240, _path: str = "", _notes: list[str] | None = None  # noqa: ANN401
              ) -> tuple[Any, list[str]]:
    """A copy of `value` that any JSON encoder takes, and a note per repair: an integer outside 64 bits becomes
    its decimal string, a NaN or infinity null, a lone surrogate U+FFFD, and whatever nests deeper than
    `max_depth` null. Everything else (numpy arrays and scalars included) passes through as it is."""
    notes: list[str] = [] if _notes is None else _notes
    if isinstance(value, (dict, list, tuple)) and max_depth <= 0:
        notes.append(f"{_path or '$'}: nested too deep, sent as null")
        return None, notes
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for k, v in value.items():
            key = k
            if isinstance(k, str) and not valid_unicode(k):
                key = _repair_str(k)
                notes.append(f"{_path or '$'}: field name {_show(k)} had a lone surrogate, replaced by U+FFFD")
            out[key] = json_safe(v, max_depth - 1, _field(_path, str(key)), notes)[0]
        return out, notes
    if isinstance(value, (list, tuple)):
        return [json_safe(v, max_depth - 1, f"{_path}[{i}]", notes)[0] for i, v in enumerate(value)], notes
    if isinstance(value, bool) or value is None:
        return value, notes
    if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
        notes.append(f"{_path}: integer outside 64 bits, sent as a string")
        return str(value), notes
    if isinstance(value, float) and not math.isfinite(value):
        notes.append(f"{_path}: {value} sent as null")
        return None, notes
    if isinstance(value, str) and not valid_unicode(value):
        notes.append(f"{_path}: lone surrogate replaced by U+FFFD")
        return _repair_str(value), notes
    return value, notes


def _repair_str(s: str) -> str:
    return "".join(REPLACEMENT if "\ud800" <= c <= "\udfff" else c for c in s)


def json_kind(v: object) -> str:
    """The schema's name for a metadata value's JSON type (what SQLite's json_each reports, in the schema's
    words): int, float, str, bool, json (lists and objects) or null."""
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "str"
    return "null" if v is None else "json"


def merge_types(types: Iterable[str]) -> str:
    """One schema type for the JSON types a field was seen with: int and float make float; bool, str and json
    stay apart ("int|str"); null only counts when it is all there is."""
    kinds = set(types)
    if {"int", "float"} <= kinds:
        kinds.discard("int")
    if len(kinds) > 1:
        kinds.discard("null")
    return "|".join(sorted(kinds))


class FieldTypes:
    """The (field, type) pairs of a changing set of documents' metadata, counted, so that documents can come and go
    (the write overlay's): `schema(base)` is the schema a store holding `base`'s documents and these would record
    (`indexer.runtime.store` derives it the same way, from json_each's types)."""

    def __init__(self) -> None:
        self._seen: Counter[tuple[str, str]] = Counter()

    def add(self, meta: Mapping[str, Any], sign: int = 1) -> None:
        for key, v in meta.items():
            pair = (key, json_kind(v))
            self._seen[pair] += sign
            if self._seen[pair] <= 0:
                del self._seen[pair]

    def remove(self, meta: Mapping[str, Any]) -> None:
        self.add(meta, -1)

    def schema(self, base: Mapping[str, str]) -> dict[str, str]:
        if not self._seen:
            return dict(base)
        kinds: dict[str, set[str]] = {k: set(t.split("|")) for k, t in base.items()}
        for key, kind in self._seen:
            kinds.setdefault(key, set()).add(kind)
        return {k: merge_types(v) for k, v in sorted(kinds.items())}
