"""A served version's documents read back: by id (`Documents.get`), counted under a filter (`count`) and paged
through in a stable order (`scroll`) — the version's store and vectors under its write overlay, so a read sees
every write acknowledged before it (read-your-writes) and never a deleted document.

Documents, not rows: on a version of passages (`indexer build --chunk`, `indexer.runtime.passages`) a document is
its passage rows. It is found, counted and paged by its first passage (its *head row*; a whole document is its own
head row) and read back with every passage (number, offsets, text), its text laid out from them (the characters no
passage covers — whitespace between sentences — read as spaces), its metadata without the passages' record.

The scroll's order is the head rows' external ids as the store orders them (integers by value, before strings;
strings by their UTF-8 bytes, which is by code point), and its cursor is the last head row's id, encoded: an id
keeps its place through every write, compaction and reload, so paging through a whole collection visits each
document that is live throughout exactly once, however the writes land meanwhile (Qdrant's scroll by point id,
Elasticsearch's search_after). A document written meanwhile is visited when its id is past the cursor; one deleted
meanwhile is not visited after its delete.

Consistency: each call reads the overlay at one moment (`Overlay.view`, kept per applied seq, so a page after no
write takes no copy) and the version's store and index, which never change while served.

May import: numpy and the runtime's `store`, `overlay`, `filters`, `passages`, `rowsets`, `ids`.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import json
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from indexer.runtime.filters import Node, matches
from indexer.runtime.ids import ExtId
from indexer.runtime.live_index import LiveIndex
from indexer.runtime.overlay import Overlay, Snapshot, WrittenDoc
from indexer.runtime.passages import PASSAGE_KEY, parse_passage_id, passage_count, passage_id
from indexer.runtime.rowsets import in_sorted
from indexer.runtime.store import Store

MAX_SCAN_ROWS = 16_384  # the most rows one store query reads while a scroll page fills (doubling from 2 x limit)
_NONE = np.zeros(0, dtype=np.int64)
# a passage row's id starts with this (`passages.passage_id`); passage 0's ends with ",0]"
_PASSAGE_PREFIX = passage_id(0, 0)[: -len("[0,0]")]
_INT64 = (-(1 << 63), (1 << 63) - 1)


class ReadError(ValueError):
    """Base of what reading documents refuses; the message is the reason a client reads."""


class DocumentNotFound(ReadError):
    """No live document has the id (never written, or deleted)."""

    def __init__(self, doc_id: ExtId, where: str = "") -> None:
        super().__init__(f"no document with id {doc_id!r}{where} (never written, or deleted)")
        self.doc_id = doc_id


class BadCursor(ReadError):
    """A scroll cursor this API did not make."""


@dataclass(frozen=True)
class PassageText:
    index: int  # its number in the document
    start: int  # [start, end): character offsets into the document's text
    end: int
    text: str
    vector: np.ndarray | None = None


@dataclass(frozen=True)
class StoredDocument:
    id: ExtId
    text: str
    metadata: dict[str, Any]
    passages: list[PassageText] | None = None  # a version of passages: the document's, in order
    vector: np.ndarray | None = None  # a whole document's, when asked for (a passage's is on the passage)


@dataclass(frozen=True)
class Page:
    documents: list[StoredDocument]
    next_cursor: str | None  # None: the last page


def order_key(ext: ExtId) -> tuple[bool, int | str]:
    """The store's order of external ids (SQLite's: integers first, by value; then strings, by code point)."""
    return (isinstance(ext, str), ext)


def encode_cursor(ext: ExtId) -> str:
    return base64.urlsafe_b64encode(json.dumps([ext], ensure_ascii=False).encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> ExtId:
    """The head row id a cursor names; BadCursor for anything `encode_cursor` did not make."""
    try:
        value = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        value = None
    ok = isinstance(value, list) and len(value) == 1 and isinstance(value[0], int | str) \
        and not isinstance(value[0], bool) and (_is_unicode(value[0]) if isinstance(value[0], str)
                                                else _INT64[0] <= value[0] <= _INT64[1])
    if not ok:
        raise BadCursor(f"cursor {cursor[:80]!r} is not one this API made: pass the next_cursor of the page before, "
                        f"or none to start from the first document")
    return value[0]  # type: ignore[index]


def _is_unicode(text: str) -> bool:
    """No lone surrogate (JSON's `\\ud800` decodes to one): no id holds one, and SQLite cannot be handed one."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def is_head(ext: ExtId) -> bool:
    """Whether a row stands for its document: a whole document's row, or a document's passage 0."""
    parsed = parse_passage_id(ext)
    return parsed is None or parsed[1] == 0


@dataclass(frozen=True)
class _Row:
    fid: int
    ext: ExtId
    text: str
    metadata: dict[str, Any]
    written: bool  # the overlay's (its vector is the overlay's row), else the version's


@dataclass
class _View:
    """The overlay at one applied seq, arranged for reading: written rows by id, heads in scroll order."""

    seq: int
    by_ext: dict[ExtId, WrittenDoc]
    heads: list[WrittenDoc]  # in `order_key` order
    keys: list[tuple[bool, int | str]]  # their order keys, for bisect
    snap: Snapshot
    _row_of: dict[int, int] | None = field(default=None, repr=False)

    @classmethod
    def of(cls, seq: int, docs: list[WrittenDoc], snap: Snapshot) -> _View:
        heads = sorted((d for d in docs if is_head(d.ext_id)), key=lambda d: order_key(d.ext_id))
        return cls(seq, {d.ext_id: d for d in docs}, heads, [order_key(d.ext_id) for d in heads], snap)

    @property
    def tombstones(self) -> np.ndarray:
        """The version's FAISS ids deleted or replaced, ascending."""
        return self.snap.exclusion.ids if self.snap.exclusion is not None else _NONE

    def heads_after(self, after: ExtId | None, want: int, node: Node | None) -> list[_Row]:
        start = 0 if after is None else bisect.bisect_right(self.keys, order_key(after))
        out = []
        for d in self.heads[start:]:
            if node is None or matches(node, d.metadata):
                out.append(_Row(d.fid, d.ext_id, d.text, d.metadata, True))
                if len(out) >= want:
                    break
        return out

    def vector(self, fid: int) -> np.ndarray:
        if self._row_of is None:
            self._row_of = {f: r for r, f in enumerate(self.snap.fids.tolist()) if f >= 0}
        return np.array(self.snap.vectors[self._row_of[fid]], dtype=np.float32)


_VIEWS: weakref.WeakKeyDictionary[Overlay, _View] = weakref.WeakKeyDictionary()
_HEADS: weakref.WeakKeyDictionary[Store, tuple[np.ndarray | None]] = weakref.WeakKeyDictionary()


class Documents:
    """The documents of one served index: a `LiveIndex` (a version under its write overlay), or any served index
    with a `store` and no overlay. The version's vectors come from its `ann` (an `AnnIndex`), or from the index
    itself where its vectors live elsewhere (the sharded backend's `vectors_of` asks the shard of each id)."""

    def __init__(self, index: Any) -> None:  # noqa: ANN401 (a LiveIndex, or a served index with a store)
        self.index = index
        base = index.base if isinstance(index, LiveIndex) else index
        self.store, self.overlay = base.store, index.overlay if isinstance(index, LiveIndex) else None
        holder: Any = getattr(base, "ann", base)  # an AnnIndex, or the sharded index itself
        self.vectors_of = holder.vectors_of

    # -- the calls -----------------------------------------------------------------------------------------------
    def get(self, ids: Sequence[ExtId], *, with_vector: bool = False) -> list[StoredDocument | None]:
        """The documents with these ids, in their order (None: no live document has it)."""
        view = self._view()
        # a document is its own row or its passage 0; an id spelling a passage row's names no document (else
        # "\x1fP[1,3]" would read document 1's passage 3 as a document: such ids are refused as documents')
        own = [d if parse_passage_id(d) is None else None for d in ids]
        heads = self._rows([e for d, o in zip(ids, own, strict=True) for e in (o, passage_id(d, 0)) if e is not None],
                           view)
        found = [(heads.get(o) if o is not None else None) or heads.get(passage_id(d, 0))
                 for d, o in zip(ids, own, strict=True)]
        docs = self._documents([h for h in found if h is not None], view, with_vector)
        it = iter(docs)
        return [None if h is None else next(it) for h in found]

    def count(self, flt: object = None) -> int:
        """Live documents, those whose metadata match `flt` when given (`FilterError` when it does not fit)."""
        view = self._view()
        gone = view.tombstones if view is not None else _NONE
        heads = self._base_heads()
        if flt is None:
            base = self.store.count() if heads is None else len(heads)
            base -= len(gone) if heads is None else int(in_sorted(gone, heads).sum())
            return base + (len(view.heads) if view is not None else 0)
        ids, node = self._match(flt)
        if heads is not None:
            ids = ids[in_sorted(ids, heads)]
        written = 0 if view is None or node is None else sum(1 for d in view.heads if matches(node, d.metadata))
        return len(ids) - int(in_sorted(gone, ids).sum()) + written

    def scroll(self, limit: int, cursor: str | None = None, flt: object = None, *, with_vector: bool = False
               ) -> Page:
        """Up to `limit` documents after `cursor` (None: from the first), in id order, those matching `flt` only
        when given; the next page's cursor, None after the last."""
        after = None if cursor is None else decode_cursor(cursor)
        view = self._view()
        ids, node = self._match(flt) if flt is not None else (None, None)
        want = limit + 1  # one more than the page: whether there is a next one
        rows = self._base_heads_after(after, want, ids, view)
        if view is not None:
            rows += view.heads_after(after, want, node)
        rows = sorted(rows, key=lambda r: order_key(r.ext))[:want]
        page = rows[:limit]
        more = len(rows) > limit and bool(page)
        return Page(self._documents(page, view, with_vector), encode_cursor(page[-1].ext) if more else None)

    # -- rows ----------------------------------------------------------------------------------------------------
    def _view(self) -> _View | None:
        if self.overlay is None:
            return None
        cached = _VIEWS.get(self.overlay)
        seq, fresh = self.overlay.view(None if cached is None else cached.seq)
        if fresh is None and cached is not None:
            return cached
        assert fresh is not None
        view = _VIEWS[self.overlay] = _View.of(seq, *fresh)
        return view

    def _match(self, flt: object) -> tuple[np.ndarray, Node | None]:
        """The version's FAISS ids matching `flt` (ascending; the version's filter cache, shared with searches)
        and the parsed filter for written documents."""
        if isinstance(self.index, LiveIndex):
            m = self.index.match(flt)
            return m.base.ids, m.node
        return self.store.filter_ids(flt), None

    def _base_heads(self) -> np.ndarray | None:
        """The version's head rows' FAISS ids, ascending, for a version holding passage rows; None: every row is
        a document (kept per store: a store never changes)."""
        cached = _HEADS.get(self.store)
        if cached is None:
            any_passage = self.store.read("SELECT 1 FROM doc_ext WHERE ext_id >= ? AND ext_id < ? LIMIT 1",
                                          (_PASSAGE_PREFIX, _PASSAGE_PREFIX[:-1] + chr(ord(_PASSAGE_PREFIX[-1]) + 1)))
            heads = None
            if any_passage:
                rows = self.store.read("SELECT id FROM doc_ext WHERE NOT (typeof(ext_id) = 'text' AND "
                                       "substr(ext_id, 1, ?) = ?) OR substr(ext_id, -3) = ',0]' ORDER BY id",
                                       (len(_PASSAGE_PREFIX), _PASSAGE_PREFIX))
                heads = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            cached = _HEADS[self.store] = (heads,)
        return cached[0]

    def _base_heads_after(self, after: ExtId | None, want: int, ids: np.ndarray | None, view: _View | None
                          ) -> list[_Row]:
        """The version's first `want` live head rows past `after` (matching `ids` when given), read in pages of the
        store's id index."""
        gone = view.tombstones if view is not None else _NONE
        out: list[tuple[int, ExtId]] = []
        batch = min(MAX_SCAN_ROWS, max(64, 2 * want))
        while len(out) < want:
            where, params = ("", []) if after is None else ("WHERE ext_id > ? ", [after])
            rows = self.store.read(f"SELECT id, ext_id FROM doc_ext {where}ORDER BY ext_id LIMIT ?", [*params, batch])
            fids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            keep = ~in_sorted(fids, gone) & (True if ids is None else in_sorted(fids, ids))
            found = [(f, e) for (f, e), k in zip(rows, keep.tolist(), strict=True) if k and is_head(e)]
            out += found[: want - len(out)]
            if len(rows) < batch:
                break
            after, batch = rows[-1][1], min(MAX_SCAN_ROWS, batch * 2)
        stored = self._stored([f for f, _ in out])
        return [_Row(f, e, *stored[f], False) for f, e in out if f in stored]

    def _rows(self, exts: Iterable[ExtId], view: _View | None) -> dict[ExtId, _Row]:
        """The live rows with these ids at the view's moment: written, else the version's when not deleted or
        replaced."""
        out: dict[ExtId, _Row] = {}
        wanted = []
        for e in exts:
            w = view.by_ext.get(e) if view is not None else None
            if w is not None:
                out[e] = _Row(w.fid, e, w.text, w.metadata, True)
            else:
                wanted.append(e)
        held = list(self.store.ids_of(wanted).items())
        gone = in_sorted(np.fromiter((f for _, f in held), dtype=np.int64, count=len(held)),
                         view.tombstones if view is not None else _NONE)
        live = {e: f for (e, f), dead in zip(held, gone.tolist(), strict=True) if not dead}
        stored = self._stored(live.values())
        out.update({e: _Row(f, e, *stored[f], False) for e, f in live.items() if f in stored})
        return out

    def _stored(self, fids: Iterable[int]) -> dict[int, tuple[str, dict[str, Any]]]:
        """Text and metadata by FAISS id, read past the store's hot documents (a scroll would evict them all)."""
        wanted = sorted(set(fids))
        out: dict[int, tuple[str, dict[str, Any]]] = {}
        for start in range(0, len(wanted), 900):
            part = wanted[start : start + 900]
            rows = self.store.read(f"SELECT d.id, d.text, e.metadata FROM docs d LEFT JOIN doc_ext e ON e.id = d.id "
                                   f"WHERE d.id IN ({','.join('?' * len(part))})", part)
            out.update((fid, (text, json.loads(meta or "{}"))) for fid, text, meta in rows)
        return out

    # -- documents -----------------------------------------------------------------------------------------------
    def _documents(self, heads: list[_Row], view: _View | None, with_vector: bool) -> list[StoredDocument]:
        """Each head row's document: its other passages read (at the same moment), vectors when asked for."""
        more = [passage_id(parsed[0], i) for h in heads if (parsed := parse_passage_id(h.ext)) is not None
                for i in range(1, passage_count(h.metadata))]
        rows = self._rows(more, view) if more else {}
        vectors = self._vectors([*heads, *rows.values()], view) if with_vector else {}
        out = []
        for h in heads:
            parsed = parse_passage_id(h.ext)
            if parsed is None:
                out.append(StoredDocument(h.ext, h.text, h.metadata, None, vectors.get(h.fid)))
                continue
            doc, _ = parsed
            parts = [(0, h), *((i, rows[p]) for i in range(1, passage_count(h.metadata))
                               if (p := passage_id(doc, i)) in rows)]
            passages = [PassageText(i, int(r.metadata[PASSAGE_KEY][0]), int(r.metadata[PASSAGE_KEY][1]), r.text,
                                    vectors.get(r.fid)) for i, r in parts]
            meta = {k: v for k, v in h.metadata.items() if k != PASSAGE_KEY}
            out.append(StoredDocument(doc, laid_out(passages), meta, passages))
        return out

    def _vectors(self, rows: list[_Row], view: _View | None) -> dict[int, np.ndarray]:
        out = {r.fid: view.vector(r.fid) for r in rows if r.written and view is not None}
        base = [r.fid for r in rows if not r.written]
        if base:
            out.update(zip(base, self.vectors_of(np.asarray(base, dtype=np.int64)), strict=True))
        return out


def laid_out(passages: Sequence[PassageText]) -> str:
    """A document's text from its passages at their offsets; a character no passage covers reads as a space."""
    parts, pos = [], 0
    for p in sorted(passages, key=lambda p: p.start):
        if p.start > pos:
            parts.append(" " * (p.start - pos))
            pos = p.start
        if p.end > pos:
            parts.append(p.text[pos - p.start :])
            pos = p.end
    return "".join(parts)
