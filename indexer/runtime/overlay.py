"""The live overlay: an index version plus the writes acknowledged since it was built, searched as one index; and
the fold of the same writes into a version (`fold`, what `indexer compact` writes), by the same rules.

`LiveIndex` implements the interface of the `IndexVersion` it wraps (`indexer.runtime.version.VectorIndex`, and
`lexical_search`), so the searcher and the engine see an index like any other; nothing else is forwarded (the
version beneath is `LiveIndex.base`). It adds an `Overlay`:
- written documents: their vectors in a small exact (flat inner-product) set, with their external id, text and
  metadata (kept per document so that metadata filters can be applied to them too);
- tombstones: the base version's FAISS ids that were deleted or replaced. The base search skips them *inside* the
  search (a FAISS ID selector given to `AnnIndex.search(exclude=...)`: the IVF scan, the HNSW walk or the flat
  scan), so it still returns k hits of its own. This is how every kind takes deletes, HNSW included, whose graph
  cannot remove a vector in place (`indexer compact` rebuilds it).
A search merges the base's top k and the overlay's exact top k by score. A written document that replaces one of
the base keeps its FAISS id, so the two never both answer.

FAISS ids of written documents (`indexer.runtime.ids`' rule, applied per version by `resolve_ids`, here and in
`fold`): an integer id in [0, 2^62) is its own; an id the base holds keeps the base's FAISS id; any other id gets
the next one above every FAISS id the base holds (from 2^62 up). They live only in memory: a replay onto another
version assigns them anew, and `indexer compact` writes them into the version it builds (`fold`).

Encoders: an upsert carries the vector of the encoder that served its write; applied to a version built with
another encoder, its text is encoded anew with the version's (`reencode_stale`, for the replay and the fold).

Concurrency: writes (`Overlay.apply`) are serialised by the caller and take the overlay's lock briefly; a search
takes a consistent snapshot under that lock (a view of the vector rows, which are never changed once written, a
copy of their ids, the exclusion in force) and searches outside it. Deleting a written document marks its row
dead; the rows are packed when dead ones pass half of them.

Filtered search (`match` + `search(..., match)`): the base searches its matching documents as usual
(`IndexVersion.match`), asked for as many more hits as there are tombstoned documents among the matches, which
are then dropped — so the base's answer is exact where its filtered search is exact; the written documents are
kept when their metadata matches (`filters.matches`, the SQL's reference semantics). A filter's fields and types
are checked against the schema the base and the written documents make together (`metadata.FieldTypes`): a field
or a type first written over HTTP filters at once, as it will after `indexer compact`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from indexer.runtime import bounded_leg
from indexer.runtime.bounded_leg import LexicalLeg
from indexer.runtime.faiss.exact import knn_inner_product
from indexer.runtime.faiss.search import Exclusion
from indexer.runtime.filters import Node, matches, parse_filter
from indexer.runtime.ids import ExtId, FaissIds
from indexer.runtime.lexical import LexicalOverlay
from indexer.runtime.manifest import Manifest
from indexer.runtime.metadata import FieldTypes
from indexer.runtime.passages import parse_passage_id
from indexer.runtime.rowsets import in_sorted
from indexer.runtime.store import Store
from indexer.runtime.topk import merge_top_k
from indexer.runtime.version import FilterMatch, Hit, IndexVersion
from indexer.runtime.writelog import UPSERT, LogEntry

INITIAL_ROWS = 256


@dataclass(frozen=True)
class WrittenDoc:
    fid: int  # its FAISS id in this overlay
    ext_id: ExtId
    text: str
    metadata: dict[str, Any]
    seq: int  # the log entry that wrote it


@dataclass
class Applied:
    """What applying entries changed (a delete of an id nobody holds is `missing`: logged, applied to nothing
    here, and still applied to any version that holds the id later)."""

    created: int = 0
    replaced: int = 0
    deleted: int = 0
    missing: int = 0


@dataclass(frozen=True)
class Snapshot:
    vectors: np.ndarray  # (rows, dim): written rows, dead ones included
    fids: np.ndarray  # (rows,): FAISS id of each row, -1 when dead
    dead: int
    exclusion: Exclusion | None

    @property
    def empty(self) -> bool:
        return len(self.fids) == self.dead and self.exclusion is None


@dataclass(frozen=True)
class LiveMatch:
    """A filter prepared for a `LiveIndex`: the base version's match, and the parsed filter for written
    documents."""

    base: FilterMatch
    node: Node


def _written_hit(fid: int, doc: WrittenDoc, score: float) -> Hit:
    """A hit on a written document, in the shape `IndexVersion.hits` gives base hits."""
    return Hit(fid, doc.ext_id, doc.text, score, doc.metadata)


def resolve_ids(store: Store, ext_ids: Iterable[ExtId], ids: FaissIds) -> tuple[dict[ExtId, int], set[int]]:
    """The FAISS ids of `ext_ids` in the version of `store`: the one it holds an id under, else `ids`' rule (its own,
    or the next free one); and those of them that the version holds."""
    wanted = list(dict.fromkeys(ext_ids))
    held = store.ids_of(wanted)
    return {e: ids.assign(e, held.get(e)) for e in wanted}, set(held.values())


def reencode_stale(entries: list[LogEntry], sha: str, encode: Callable[[list[str]], np.ndarray]) -> int:
    """Give the upserts of `entries` written with another encoder than `sha` the vector of their text by `encode`
    (the version's encoder), in place; returns how many."""
    stale = [i for i, e in enumerate(entries) if e.op == UPSERT and e.model != sha]
    if stale:
        vecs = encode([entries[i].text or "" for i in stale])
        for i, v in zip(stale, vecs, strict=True):
            e = entries[i]
            entries[i] = LogEntry(e.seq, e.op, e.ext_id, e.text, e.metadata, v, sha)
    return len(stale)


@dataclass(frozen=True)
class Fold:
    """Log entries' net effect on a version, in its FAISS ids (`fold`)."""

    upserts: list[tuple[int, LogEntry]]  # (FAISS id, upsert) of each document written, in seq order
    deletes: list[int]  # FAISS ids of the version's documents deleted
    replaced: list[int]  # FAISS ids of the version's documents that an upsert replaces

    @property
    def created(self) -> int:
        """Documents the version did not hold."""
        return len(self.upserts) - len(self.replaced)


def fold(net: Sequence[LogEntry], store: Store) -> Fold:
    """The net effect `net` (one entry per external id: `writelog.net_effect`) on the version of `store`, with the
    FAISS ids the overlay would give it: what `indexer compact` writes into the next version. A delete of an id the
    version does not hold changes nothing."""
    fid_of, held = resolve_ids(store, [e.ext_id for e in net], FaissIds(store.max_id()))
    upserts = [(fid_of[e.ext_id], e) for e in net if e.op == UPSERT]
    deletes = [fid_of[e.ext_id] for e in net if e.op != UPSERT and fid_of[e.ext_id] in held]
    return Fold(upserts, deletes, [f for f, _ in upserts if f in held])


class Overlay:
    def __init__(self, base: IndexVersion, applied_seq: int = 0) -> None:
        self.base = base
        self.dim = base.dim
        self.applied_seq = applied_seq  # the last log entry applied
        self._lock = threading.Lock()
        self._vecs = np.empty((INITIAL_ROWS, self.dim), dtype=np.float32)
        self._row_fid = np.full(INITIAL_ROWS, -1, dtype=np.int64)
        self._rows = 0
        self._dead = 0
        self._row_of: dict[int, int] = {}  # FAISS id -> its live row
        self._docs: dict[int, WrittenDoc] = {}  # FAISS id -> the written document
        self._fid_of: dict[ExtId, int] = {}  # external id -> FAISS id, for every id written here
        self._in_base: set[int] = set()  # FAISS ids of those that the base holds
        self._ever: set[int] = set()  # every FAISS id written here (a hit on one no longer written is dropped)
        self._tombstones: set[int] = set()  # base FAISS ids deleted or replaced
        self._exclusion: Exclusion | None = None
        self._ids = FaissIds(base.store.max_id())  # for the ids the base does not hold
        self._types = FieldTypes()  # the metadata fields and types of the written documents
        # written documents' BM25 weights, when the base has a lexical index (kept in step with the rows below)
        self.lexical = LexicalOverlay(base.lexical) if base.lexical is not None else None

    # -- writes --------------------------------------------------------------------------------------------------
    def _resolve(self, ext_ids: list[ExtId]) -> None:
        """FAISS ids for external ids not seen here yet (`resolve_ids`). The store is asked outside the lock
        (searches keep taking snapshots meanwhile); the caller serialises writes."""
        new = [e for e in dict.fromkeys(ext_ids) if e not in self._fid_of]
        if not new:
            return
        fid_of, in_base = resolve_ids(self.base.store, new, self._ids)
        with self._lock:
            self._in_base |= in_base
            self._fid_of.update(fid_of)

    def resolve(self, ext_ids: list[ExtId]) -> list[int]:
        """The FAISS ids of `ext_ids` here, assigning those not seen yet in order (a shard's overlay resolves every
        entry, applies its own: `indexer.runtime.shard_writes`)."""
        self._resolve(ext_ids)
        return [self._fid_of[e] for e in ext_ids]

    def _live(self, fid: int) -> bool:
        return fid in self._docs or (fid in self._in_base and fid not in self._tombstones)

    def apply(self, entries: list[LogEntry]) -> Applied:
        """Apply log entries in seq order (upserts carry the vector of this version's encoder)."""
        out = Applied()
        if not entries:
            return out
        self._resolve([e.ext_id for e in entries])
        with self._lock:
            tombstones_before = len(self._tombstones)
            for e in entries:
                fid = self._fid_of[e.ext_id]
                existed = self._live(fid)
                self._drop_row(fid)
                if fid in self._in_base:
                    self._tombstones.add(fid)
                if e.op == UPSERT:
                    assert e.vector is not None and e.text is not None
                    self._append_row(fid, e.vector)
                    self._forget(fid)
                    self._docs[fid] = WrittenDoc(fid, e.ext_id, e.text, e.metadata, e.seq)
                    self._types.add(e.metadata)
                    if self.lexical is not None:
                        self.lexical.put(fid, e.text)
                    self._ever.add(fid)
                    if existed:
                        out.replaced += 1
                    else:
                        out.created += 1
                else:
                    self._forget(fid)
                    if self.lexical is not None:
                        self.lexical.drop(fid)
                    if existed:
                        out.deleted += 1
                    else:
                        out.missing += 1
                self.applied_seq = max(self.applied_seq, e.seq)
            if len(self._tombstones) != tombstones_before:
                self._exclusion = Exclusion(np.fromiter(self._tombstones, dtype=np.int64, count=len(self._tombstones)))
            if self._dead > max(1024, self._rows // 2):
                self._pack()
        return out

    def _forget(self, fid: int) -> None:
        old = self._docs.pop(fid, None)
        if old is not None:
            self._types.remove(old.metadata)

    def _drop_row(self, fid: int) -> None:
        row = self._row_of.pop(fid, None)
        if row is not None:
            self._row_fid[row] = -1  # in place: snapshots hold a copy of the ids
            self._dead += 1

    def _append_row(self, fid: int, vector: np.ndarray) -> None:
        if self._rows == len(self._row_fid):  # grow into new arrays: snapshots keep viewing the old ones
            cap = 2 * len(self._row_fid)
            vecs = np.empty((cap, self.dim), dtype=np.float32)
            vecs[: self._rows] = self._vecs[: self._rows]
            ids = np.full(cap, -1, dtype=np.int64)
            ids[: self._rows] = self._row_fid[: self._rows]
            self._vecs, self._row_fid = vecs, ids
        self._vecs[self._rows] = vector
        self._row_fid[self._rows] = fid
        self._row_of[fid] = self._rows
        self._rows += 1

    def _pack(self) -> None:
        """Leave the dead rows behind (in new arrays: running searches keep their snapshot)."""
        live = np.flatnonzero(self._row_fid[: self._rows] >= 0)
        cap = max(INITIAL_ROWS, 2 * len(live))
        vecs = np.empty((cap, self.dim), dtype=np.float32)
        vecs[: len(live)] = self._vecs[live]
        ids = np.full(cap, -1, dtype=np.int64)
        ids[: len(live)] = self._row_fid[live]
        self._vecs, self._row_fid, self._rows, self._dead = vecs, ids, len(live), 0
        self._row_of = {int(f): r for r, f in enumerate(ids[: len(live)])}

    # -- reads ---------------------------------------------------------------------------------------------------
    def first_passages(self) -> tuple[int, list[int]]:
        """The written rows that are a document's passage 0 (one per written document of a version of passages),
        and the base rows deleted or replaced: what `LiveIndex.documents` counts documents by."""
        with self._lock:
            written = sum(1 for d in self._docs.values() if (p := parse_passage_id(d.ext_id)) and p[1] == 0)
            return written, list(self._tombstones)

    def snapshot(self) -> Snapshot:
        with self._lock:
            return Snapshot(self._vecs[: self._rows], self._row_fid[: self._rows].copy(), self._dead, self._exclusion)

    def view(self, known_seq: int | None = None) -> tuple[int, tuple[list[WrittenDoc], Snapshot] | None]:
        """The written documents with their rows and the tombstones, at one moment named by the applied seq
        (what reading documents back pages through: `indexer.runtime.reading`); None for them when that seq is
        `known_seq` (nothing changed since)."""
        with self._lock:
            if known_seq == self.applied_seq:
                return self.applied_seq, None
            snap = Snapshot(self._vecs[: self._rows], self._row_fid[: self._rows].copy(), self._dead, self._exclusion)
            return self.applied_seq, (list(self._docs.values()), snap)

    def lookup(self, fids: list[int]) -> tuple[dict[int, WrittenDoc], set[int]]:
        """The written documents among `fids`, and those of `fids` that are gone (deleted or replaced since a
        search returned them)."""
        with self._lock:
            docs = {f: self._docs[f] for f in fids if f in self._docs}
            gone = {f for f in fids if f not in docs and (f in self._tombstones or f in self._ever)}
        return docs, gone

    def document(self, ext_id: ExtId) -> WrittenDoc | None:
        with self._lock:
            fid = self._fid_of.get(ext_id)
            return None if fid is None else self._docs.get(fid)

    def deleted(self, ext_id: ExtId) -> bool:
        """Whether the id was deleted here (and not written again since)."""
        with self._lock:
            fid = self._fid_of.get(ext_id)
            return fid is not None and fid not in self._docs

    def schema(self, base: dict[str, str]) -> dict[str, str]:
        """The metadata schema of the base's documents (`base`) and the written ones together."""
        with self._lock:
            return self._types.schema(base)

    @property
    def written(self) -> int:
        return len(self._docs)

    @property
    def removed_from_base(self) -> int:
        return len(self._tombstones)


class LiveIndex:
    """An `IndexVersion` with its overlay of writes: a `VectorIndex` with `lexical_search`, like the version."""

    reencodes = True  # entries of another encoder are encoded anew when applied (`reencode_stale`)

    def __init__(self, base: IndexVersion, applied_seq: int = 0) -> None:
        self.base = base
        self.manifest: Manifest = base.manifest
        self.overlay = Overlay(base, applied_seq)

    @property
    def version(self) -> str:
        return self.base.version

    @property
    def dim(self) -> int:
        return self.base.dim

    @property
    def ntotal(self) -> int:
        """Documents served: the base's, less those deleted or replaced, plus the written ones."""
        return self.base.ntotal - self.overlay.removed_from_base + self.overlay.written

    def match(self, flt: object) -> LiveMatch:
        """A filter prepared for `search`; raises `FilterError` when it fits neither the base's metadata nor the
        written documents'."""
        schema = self.overlay.schema(self.base.store.metadata_schema())
        node = parse_filter(flt, schema)
        return LiveMatch(self.base.match(flt, schema), node)

    def search(self, vectors: np.ndarray, k: int, match: LiveMatch | None = None, *,
               search_params: dict[str, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        snap = self.overlay.snapshot()
        if match is not None:
            return self._search_filtered(vectors, k, match, snap, search_params)
        if snap.empty:
            return self.base.search(vectors, k, search_params=search_params)
        scores, ids = self.base.ann.search(vectors, k, exclude=snap.exclusion, search_params=search_params)
        if len(snap.fids) == snap.dead:
            return scores, ids
        # dead rows may rank among the first k: ask for that many more, then drop them
        o_scores, rows = knn_inner_product(vectors, snap.vectors, k + snap.dead)
        o_ids = np.where(rows >= 0, snap.fids[np.clip(rows, 0, None)], -1)
        return merge_top_k([(scores, ids), (o_scores, o_ids)], k)

    def _search_filtered(self, vectors: np.ndarray, k: int, match: LiveMatch, snap: Snapshot,
                         search_params: dict[str, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        if snap.empty:
            return self.base.search(vectors, k, match.base, search_params=search_params)
        gone = snap.exclusion.ids if snap.exclusion is not None else np.zeros(0, np.int64)
        extra = int(in_sorted(gone, match.base.ids).sum()) if len(gone) else 0  # (both ascending)
        scores, ids = self.base.search(vectors, k + extra, match.base, search_params=search_params)
        if extra:  # tombstoned matches took some of the places: drop them (the extra hits fill in)
            dropped = in_sorted(ids, gone)
            ids = np.where(dropped, -1, ids)
            scores = np.where(dropped, -np.inf, scores)
        live = snap.fids[snap.fids >= 0]
        docs, _ = self.overlay.lookup(live.tolist())
        # written rows whose document matches (dead rows have fid -1, never in `docs`); none gives (n, 0) answers
        rows_kept = np.fromiter((r for r, f in enumerate(snap.fids.tolist())
                                 if f in docs and matches(match.node, docs[f].metadata)), dtype=np.int64)
        o_scores, rows = knn_inner_product(vectors, snap.vectors[rows_kept], k)
        o_ids = np.where(rows >= 0, snap.fids[rows_kept][np.clip(rows, 0, None)], -1)
        return merge_top_k([(scores, ids), (o_scores, o_ids)], k)

    def lexical_search(self, queries: list[str], k: int, match: LiveMatch | None = None
                       ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per query, its best k by BM25 over the base (tombstones excluded inside the search) and the written
        documents (scored with the base's statistics, `lexical.LexicalOverlay`), with the same filter semantics as
        `search`: the base's matches exactly, written documents when their metadata match."""
        return [(leg.scores, leg.ids) for leg in self.lexical_legs(queries, k, match, bounded_from=None)]

    def lexical_legs(self, queries: list[str], k: int, match: LiveMatch | None = None, *,
                     bounded_from: int | None = None) -> list[LexicalLeg]:
        """`lexical_search`'s, with hybrid's leg on the base bounded where it reads more than `bounded_from` postings
        (`bounded_leg`); the written documents sharing a term are scored exactly in either case."""
        base, overlay = self.base.lexical, self.overlay.lexical
        assert base is not None and overlay is not None
        snap = self.overlay.snapshot()
        excluded = snap.exclusion.ids if snap.exclusion is not None else None
        rows = None if match is None else match.base.lexical_rows(base.rows_of)
        out = []
        for q in queries:
            leg = bounded_leg.begin(base, q, k, allowed_rows=rows, excluded=excluded, bounded_from=bounded_from)
            written = overlay.scores(q) if len(overlay) else {}
            if written:
                docs, _ = self.overlay.lookup(list(written))
                kept = [(s, f) for f, s in written.items() if f in docs and
                        (match is None or matches(match.node, docs[f].metadata))]
                if kept:
                    o_scores = np.array([[s for s, _ in kept]], np.float32)
                    o_ids = np.array([[f for _, f in kept]], np.int64)
                    m_scores, m_ids = merge_top_k([(leg.scores[None, :], leg.ids[None, :]), (o_scores, o_ids)], k)
                    keep = m_ids[0] >= 0
                    leg = replace(leg, scores=m_scores[0][keep], ids=m_ids[0][keep])
            out.append(leg)
        return out

    def complete_legs(self, legs: list[LexicalLeg], dense_ids: list[np.ndarray]
                      ) -> list[tuple[np.ndarray, np.ndarray]]:
        """The base's `complete_legs`: the written documents are in each leg already, exactly."""
        return self.base.complete_legs(legs, dense_ids)

    def live_metadata(self, ext_id: ExtId) -> dict[str, Any] | None:
        """The metadata of the document served under `ext_id` now (written, else the base's); None: none."""
        written = self.overlay.document(ext_id)
        if written is not None:
            return written.metadata
        if self.overlay.deleted(ext_id):
            return None
        fid = self.base.store.ids_of([ext_id]).get(ext_id)
        if fid is None or self.overlay.lookup([fid])[1]:
            return None
        doc = self.base.store.documents([fid]).get(fid)
        return None if doc is None else doc.metadata

    def hits(self, scores: np.ndarray, ids: np.ndarray) -> list[list[Hit]]:
        """The base's hits for its ids, the written documents' for theirs, in rank order; a document deleted or
        replaced between the search and this lookup is left out."""
        docs, gone = self.overlay.lookup([int(i) for i in ids.ravel() if i >= 0])
        if not docs and not gone:
            return self.base.hits(scores, ids)
        mine = np.isin(ids, np.fromiter((*docs, *gone), dtype=np.int64))
        base_hits = self.base.hits(scores, np.where(mine, -1, ids))
        out = []
        for srow, irow, brow, mrow in zip(scores, ids, base_hits, mine, strict=True):
            it = iter(brow)
            row = []
            for s, i, m in zip(srow.tolist(), irow.tolist(), mrow.tolist(), strict=True):
                if i < 0:
                    continue
                if not m:
                    row.append(next(it))
                elif i in docs:
                    row.append(_written_hit(i, docs[i], s))
            out.append(row)
        return out

    def documents(self) -> int:
        """Documents served now, writes and deletes included: the rows, or on a version of passages each document
        once (by its passage 0 row)."""
        if self.manifest.chunking() is None:
            return self.ntotal
        written, gone = self.overlay.first_passages()
        base_gone = sum(1 for e in self.base.ext_ids(gone).values() if (p := parse_passage_id(e)) and p[1] == 0)
        return self.manifest.data.n_docs - base_gone + written

    def ext_ids(self, ids: list[int]) -> dict[int, ExtId]:
        """The written documents' ids for theirs, the base's for the rest; a row deleted or replaced since the
        search is left out."""
        docs, gone = self.overlay.lookup(ids)
        out: dict[int, ExtId] = {f: d.ext_id for f, d in docs.items()}
        out.update(self.base.ext_ids([i for i in ids if i not in docs and i not in gone]))
        return out

    def close(self) -> None:
        self.base.close()


def served_counts(index: Any) -> tuple[int, int | None]:
    """(documents, passages) a served index holds now; passages None for a version of whole documents. An index
    without an overlay (the sharded backend) counts the documents its manifest records."""
    if index.manifest.chunking() is None:
        return index.ntotal, None
    return (index.documents() if isinstance(index, LiveIndex) else index.manifest.data.n_docs), index.ntotal
