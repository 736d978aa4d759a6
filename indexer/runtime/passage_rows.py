"""A passage row as its document: what a stored row of a version of passages (`indexer.runtime.passages`) says
about the document it belongs to, read once per row and kept beside the row in the store's memory
(`StoredDoc.as_passage`), so a hit on it is built once, already in its document's shape.

A passage row's id is `ID_PREFIX` then `[document id, n]` as JSON; its metadata is the document's plus
`PASSAGE_KEY: [start, end, count]`. `row_view` is a pure function of the row (id, text, metadata): a row of an
immutable store has one view for good.

May import: the standard library only (the store and the version import it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

PASSAGE_KEY = "\x1fpassage"  # metadata of a passage row: [start, end, count]; never shown, never a user's key
ID_PREFIX = "\x1fP"  # a passage row's id: this, then [document id, n] as JSON

ExtId = int | str
RESERVED_ID = ("a string id may not start with U+001F then 'P': that prefix names a version of passages' rows "
               "(docs/passages.md)")


def reserved_id(ext: object) -> bool:
    """Whether an id given as a document's would read as a passage row's (`ID_PREFIX`): refused where ids come in
    (`PUT /documents`, `indexer build --data`), since a reader could not tell the document from another one's
    passage."""
    return isinstance(ext, str) and ext.startswith(ID_PREFIX)


@dataclass(frozen=True)
class PassageRef:
    """The passage of a hit: its number in the document, its `[start, end)` character offsets there and, once
    aggregated for a query, its HTML snippet with the query's terms marked."""

    index: int
    start: int
    end: int
    count: int  # the document's passages
    snippet: str = ""


def parse_passage_id(ext: ExtId) -> tuple[ExtId, int] | None:
    """(document id, n) of a passage row id; None for anything else."""
    if not isinstance(ext, str) or not ext.startswith(ID_PREFIX):
        return None
    doc, _, n = ext[len(ID_PREFIX) + 1 : -1].rpartition(",")
    # `passage_id` wrote the document's id as JSON: an integer, or a string escaped only if it holds a backslash
    if doc[0] != '"':
        return int(doc), int(n)
    return (doc[1:-1] if "\\" not in doc else json.loads(doc)), int(n)


def row_view(ext: ExtId, text: str, metadata: dict[str, Any]) -> tuple[ExtId, dict[str, Any], PassageRef] | None:
    """A passage row as its document: (document id, the document's metadata without `PASSAGE_KEY`, the passage
    without a snippet); None for a row that is not a passage row. A row without a valid passage record stands
    for passage n of one, the whole of its text."""
    parsed = parse_passage_id(ext)
    if parsed is None:
        return None
    meta = dict(metadata)
    rec = meta.pop(PASSAGE_KEY, None)
    start, end, count = rec if isinstance(rec, list) and len(rec) == 3 else (0, len(text), 1)
    return parsed[0], meta, PassageRef(parsed[1], int(start), int(end), int(count))
