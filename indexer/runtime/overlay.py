"""The live overlay of one index version: the writes acknowledged since it was built, kept beside it in memory
(`Overlay`; searched together with the version by `live_index.LiveIndex`).
- written documents: their vectors, with their external id, text and metadata (kept per document so that metadata
  filters can be applied to them too). Up to `LISTS_FROM` live rows a search scores them all (exact); from there on
  through inverted lists (`faiss.written.WrittenLists`) on the served version's coarse quantizer when it is IVF,
  else on centroids trained on the written vectors once they pass `LISTS_FROM` (on a background thread below the
  searches' priority; exact until they are ready). A filtered search scores its matching written rows exactly;
- tombstones: the base version's FAISS ids that were deleted or replaced, handed to the base search as an
  `Exclusion` it skips inside the search. A written document that replaces one of the base keeps its FAISS id
  (`fold.resolve_ids`), so the two never both answer.

Concurrency: writes (`Overlay.apply`) are serialised by the caller and take the overlay's lock briefly; a search
takes a consistent snapshot under that lock (a view of the vector rows, which are never changed once written, a
view of their ids, which a write copies before it marks a row dead while a snapshot may hold them, the exclusion
in force, the lists and how many rows they may answer with) and searches outside it. Deleting a written document
marks its row dead; the rows are packed when dead ones pass half of them (the lists are then rebuilt).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from indexer.runtime.ann import AUTO_FLAT_BELOW
from indexer.runtime.drain import drain
from indexer.runtime.faiss.devices import set_threads
from indexer.runtime.faiss.search import Exclusion
from indexer.runtime.faiss.written import WrittenLists
from indexer.runtime.fold import resolve_ids
from indexer.runtime.ids import ExtId, FaissIds
from indexer.runtime.lexical_overlay import LexicalOverlay
from indexer.runtime.metadata import FieldTypes
from indexer.runtime.passages import parse_passage_id
from indexer.runtime.priority import lower_thread
from indexer.runtime.version import IndexVersion
from indexer.runtime.writelog import UPSERT, LogEntry

log = logging.getLogger(__name__)

INITIAL_ROWS = 256
# live written rows from which a search reads inverted lists rather than every written vector: where an exact scan
# stops fitting a millisecond, as for `--index auto`'s choice of IVF over flat
LISTS_FROM = AUTO_FLAT_BELOW
TRAIN_NICE = 10  # the own lists' k-means runs this many nice levels below the searches


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
    lists: WrittenLists | None = None  # search the rows through these (None: exactly)

    @property
    def empty(self) -> bool:
        return len(self.fids) == self.dead and self.exclusion is None


class Overlay:
    def __init__(self, base: IndexVersion, applied_seq: int = 0, *, lists_from: int = LISTS_FROM,
                 train_in_background: bool = True) -> None:
        self.base = base
        self.dim = base.dim
        self.applied_seq = applied_seq  # the last log entry applied
        self._lock = threading.Lock()
        self._vecs = np.empty((INITIAL_ROWS, self.dim), dtype=np.float32)
        self._row_fid = np.full(INITIAL_ROWS, -1, dtype=np.int64)
        self._rows = 0
        self._dead = 0
        self._fids_shared = False  # a snapshot views `_row_fid`: copy it before marking a row dead
        self.lists_from = lists_from
        ann = getattr(base, "ann", None)  # (a sharded version has shards of lists, none to share)
        self._lists: WrittenLists | None = ann.written_lists() if ann is not None else None  # None: own ones
        self._generation = 0  # row numbering: changes when the rows are packed
        self._training: threading.Thread | None = None
        self.train_in_background = train_in_background
        self._row_of: dict[int, int] = {}  # FAISS id -> its live row
        # FAISS id -> the written document's (ext_id, text, seq), and its metadata: a plain tuple of atomic values,
        # which the garbage collector stops tracking (one holding a dict it never does), so a full collection (a
        # pause of every thread) does not walk one object per written document
        self._docs: dict[int, tuple[ExtId, str, int]] = {}
        self._meta: dict[int, dict[str, Any]] = {}
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
        # the rows about to be appended (one per upsert, in order) go to their lists first, outside the lock: a
        # search answers only from the rows a snapshot publishes, so none misses its list
        upserted, lists = [e.vector for e in entries if e.op == UPSERT], self._lists
        if lists is not None and upserted:
            lists.add(np.stack(upserted), self._rows)
        # what takes time is done before the lock every search's snapshot takes: the texts' BM25 weights (their
        # analysis), and room for the new rows (a growth copies every row: hundreds of MB at the overlay's bound).
        # Writes are serialised by the caller, so nothing else changes the rows meanwhile.
        weights = ({i: self.lexical.base.weights(e.text or "") for i, e in enumerate(entries) if e.op == UPSERT}
                   if self.lexical is not None else {})
        self._reserve(len(upserted))
        with self._lock:
            tombstones_before = len(self._tombstones)
            for i, e in enumerate(entries):
                fid = self._fid_of[e.ext_id]
                existed = self._live(fid)
                self._drop_row(fid)
                if fid in self._in_base:
                    self._tombstones.add(fid)
                if e.op == UPSERT:
                    assert e.vector is not None and e.text is not None
                    self._append_row(fid, e.vector)
                    self._forget(fid)
                    self._docs[fid], self._meta[fid] = (e.ext_id, e.text, e.seq), e.metadata
                    self._types.add(e.metadata)
                    if self.lexical is not None:
                        self.lexical.put_weights(fid, weights[i])
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
            if self._lists is not None and self._lists.rows < self._rows:  # installed meanwhile by `_train_lists`
                self._lists.add(self._vecs[self._lists.rows : self._rows], self._lists.rows)
            if self._dead > max(1024, self._rows // 2):
                self._pack()
            if self._lists is None and self._training is None and self._rows - self._dead >= self.lists_from:
                self._training = threading.Thread(target=self._train_lists, name="overlay-lists", daemon=True)
                if self.train_in_background:
                    self._training.start()
        if self._training is not None and not self.train_in_background and self._lists is None:
            self._train_lists()
        return out

    def _train_lists(self) -> None:
        """Train lists of the overlay's own on its rows (`WrittenLists.trained`), fill them outside the lock, and
        install them once caught up with the rows written meanwhile; dropped if the rows were renumbered."""
        if self.train_in_background:
            lower_thread(TRAIN_NICE)
            set_threads(1)
        try:
            with self._lock:
                vecs, rows, generation = self._vecs, self._rows, self._generation
            lists = WrittenLists.trained(vecs[:rows])
            while True:
                lists.add(vecs[lists.rows : rows], lists.rows)
                with self._lock:
                    if generation != self._generation:  # packed meanwhile: trained again on the next write
                        self._training = None
                        return
                    vecs, rows = self._vecs, self._rows
                    if rows - lists.rows <= INITIAL_ROWS:  # what is left is added under the lock
                        lists.add(vecs[lists.rows : rows], lists.rows)
                        self._lists, self._training = lists, None
                        log.info("overlay of %s: %d written rows searched through %d trained lists", self.base.version,
                                 rows, lists.nlist)
                        return
        except Exception:  # noqa: BLE001 (searches stay exact; no other try on this overlay, never a loop)
            log.exception("overlay of %s: training lists over the written rows failed: its written rows are "
                          "searched exactly", self.base.version)

    def _forget(self, fid: int) -> None:
        if self._docs.pop(fid, None) is not None:
            self._types.remove(self._meta.pop(fid))

    def _drop_row(self, fid: int) -> None:
        row = self._row_of.pop(fid, None)
        if row is not None:
            if self._fids_shared:  # a snapshot views these ids: it keeps them as they were
                self._row_fid, self._fids_shared = self._row_fid.copy(), False
            self._row_fid[row] = -1
            self._dead += 1

    def _reserve(self, n: int) -> None:
        """Room for `n` more rows, grown into new arrays (snapshots keep viewing the old ones) outside the lock and
        published under it: the caller serialises writes, so no row changes meanwhile. `apply` reserves its upserts'
        rows before it appends them."""
        if self._rows + n <= len(self._row_fid):
            return
        cap = max(2 * len(self._row_fid), self._rows + n)
        vecs = np.empty((cap, self.dim), dtype=np.float32)
        vecs[: self._rows] = self._vecs[: self._rows]
        ids = np.full(cap, -1, dtype=np.int64)
        ids[: self._rows] = self._row_fid[: self._rows]
        with self._lock:
            self._vecs, self._row_fid, self._fids_shared = vecs, ids, False

    def _append_row(self, fid: int, vector: np.ndarray) -> None:  # (under the lock, into rows `_reserve` made)
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
        self._fids_shared = False
        self._row_of = {int(f): r for r, f in enumerate(ids[: len(live)])}
        self._generation += 1
        if self._lists is not None:  # the rows were renumbered: the lists are filled again
            self._lists = self._lists.empty_like()
            self._lists.add(vecs[: len(live)], 0)

    # -- reads ---------------------------------------------------------------------------------------------------
    def first_passages(self) -> tuple[int, list[int]]:
        """The written rows that are a document's passage 0 (one per written document of a version of passages),
        and the base rows deleted or replaced: what `LiveIndex.documents` counts documents by."""
        with self._lock:
            written = sum(1 for d in self._docs.values() if (p := parse_passage_id(d[0])) and p[1] == 0)
            return written, list(self._tombstones)

    def snapshot(self) -> Snapshot:
        with self._lock:
            return self._snapshot()

    def _snapshot(self) -> Snapshot:
        self._fids_shared = True
        lists = self._lists if self._rows - self._dead >= self.lists_from else None
        return Snapshot(self._vecs[: self._rows], self._row_fid[: self._rows], self._dead, self._exclusion, lists)

    def seq(self) -> int:
        """The applied seq at a write's boundary (`apply` holds the lock for all of a write's entries): what a
        search that starts now sees at most (`LiveIndex.hits`' `since`)."""
        with self._lock:
            return self.applied_seq

    def view(self, known_seq: int | None = None) -> tuple[int, tuple[list[WrittenDoc], Snapshot] | None]:
        """The written documents with their rows and the tombstones, at one moment named by the applied seq
        (what reading documents back pages through: `indexer.runtime.reading`); None for them when that seq is
        `known_seq` (nothing changed since)."""
        with self._lock:
            if known_seq == self.applied_seq:
                return self.applied_seq, None
            return self.applied_seq, ([self._written(f) for f in self._docs], self._snapshot())

    def _written(self, fid: int) -> WrittenDoc:
        ext_id, text, seq = self._docs[fid]
        return WrittenDoc(fid, ext_id, text, self._meta[fid], seq)

    def lookup(self, fids: list[int]) -> tuple[dict[int, WrittenDoc], set[int]]:
        """The written documents among `fids`, and those of `fids` that are gone (deleted or replaced since a
        search returned them)."""
        with self._lock:
            docs = {f: self._written(f) for f in fids if f in self._docs}
            gone = {f for f in fids if f not in docs and (f in self._tombstones or f in self._ever)}
        return docs, gone

    def document(self, ext_id: ExtId) -> WrittenDoc | None:
        with self._lock:
            fid = self._fid_of.get(ext_id)
            return None if fid is None or fid not in self._docs else self._written(fid)

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

    # -- retirement ----------------------------------------------------------------------------------------------
    def release(self) -> None:
        """Free the written documents once nothing reads this overlay any more (its version swapped out and its
        last search done: `service.engine.leases`), a slice at a time (`drain`): freed in one go, the few objects
        per written document would hold the GIL for as long as it takes, and every search with it."""
        for container in (self._docs, self._meta, self._fid_of, self._row_of, self._in_base, self._ever,
                          self._tombstones):
            drain(container)
        if self.lexical is not None:
            self.lexical.release()
        if self._lists is not None:
            self._lists.release()
        with self._lock:
            self._vecs = np.empty((0, self.dim), dtype=np.float32)
            self._row_fid = np.empty(0, dtype=np.int64)
            self._rows = self._dead = 0
            self._exclusion = None

    @property
    def removed_from_base(self) -> int:
        return len(self._tombstones)
