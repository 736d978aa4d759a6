"""An index version plus its live overlay of writes, searched as one index (`LiveIndex`).

`LiveIndex` implements the interface of the `IndexVersion` it wraps (`indexer.runtime.version.VectorIndex`, and
`lexical_search`), so the searcher and the engine see an index like any other; nothing else is forwarded (the
version beneath is `LiveIndex.base`). The base search skips the overlay's tombstones *inside* the search (a FAISS
ID selector given to `AnnIndex.search(exclude=...)`: the IVF scan, the HNSW walk or the flat scan), so it still
returns k hits of its own; this is how every kind takes deletes, HNSW included, whose graph cannot remove a
vector in place (`indexer compact` rebuilds it). A search merges the base's top k and the overlay's top k by
score: exact over the written rows, or through their inverted lists once there are many (`overlay.LISTS_FROM`).

Filtered search (`match` + `search(..., match)`): the base searches its matching documents as usual
(`IndexVersion.match`), asked for as many more hits as there are tombstoned documents among the matches, which
are then dropped — so the base's answer is exact where its filtered search is exact; the written documents are
kept when their metadata matches (`filters.matches`, the SQL's reference semantics). A filter's fields and types
are checked against the schema the base and the written documents make together (`metadata.FieldTypes`): a field
or a type first written over HTTP filters at once, as it will after `indexer compact`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from indexer.runtime import bounded_leg
from indexer.runtime.bounded_leg import LexicalLeg
from indexer.runtime.drain import drain
from indexer.runtime.faiss.exact import knn_inner_product
from indexer.runtime.filters import Node, matches, parse_filter
from indexer.runtime.ids import ExtId
from indexer.runtime.manifest import Manifest
from indexer.runtime.overlay import Overlay, Snapshot, WrittenDoc
from indexer.runtime.passage_rows import PASSAGE_KEY, row_view
from indexer.runtime.passages import document_key, parse_passage_id
from indexer.runtime.rowsets import in_sorted
from indexer.runtime.topk import merge_top_k
from indexer.runtime.version import FilterMatch, Hit, IndexVersion

WRITTEN_DOCS_FROM = 1 << 40  # `LiveIndex.doc_rows`: written documents' ordinals, past any base's


@dataclass(frozen=True)
class LiveMatch:
    """A filter prepared for a `LiveIndex`: the base version's match, and the parsed filter for written
    documents."""

    base: FilterMatch
    node: Node


def _written_hit(fid: int, doc: WrittenDoc, score: float, passages: bool) -> Hit:
    """A hit on a written document, in the shape `IndexVersion.hits` gives base hits (`passages`: a passage row
    as its document's)."""
    view = row_view(doc.ext_id, doc.text, doc.metadata) if passages else None
    if view is not None:
        return Hit(fid, view[0], doc.text, score, view[1], view[2])
    return Hit(fid, doc.ext_id, doc.text, score, doc.metadata)


class LiveIndex:
    """An `IndexVersion` with its overlay of writes: a `VectorIndex` with `lexical_search`, like the version."""

    reencodes = True  # entries of another encoder are encoded anew when applied (`reencode_stale`)

    def __init__(self, base: IndexVersion, applied_seq: int = 0) -> None:
        self.base = base
        self.manifest: Manifest = base.manifest
        self.overlay = Overlay(base, applied_seq)
        self._written_docs: dict[tuple[object, ExtId], int] = {}  # `doc_rows`: written documents' ordinals
        self._written_lock = threading.Lock()

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

    def metadata_schema(self) -> dict[str, str]:
        """The metadata fields (field → type) of the base's documents and the written ones together (a base's
        field stays until a compaction folds its deleted holders away)."""
        return self.overlay.schema(self.base.store.metadata_schema())

    def match(self, flt: object) -> LiveMatch:
        """A filter prepared for `search`; raises `FilterError` when it fits neither the base's metadata nor the
        written documents'."""
        schema = self.metadata_schema()
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
        if snap.lists is not None:  # the lists near the query, among the snapshot's live rows
            o_scores, rows = snap.lists.search(vectors, k, len(snap.fids), snap.fids >= 0 if snap.dead else None,
                                               search_params)
        else:  # every row; dead rows may rank among the first k: ask for that many more, then drop them
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
        documents (scored with the base's statistics: `lexical_overlay.LexicalOverlay`), with the same filter
        semantics as `search`: the base's matches exactly, written documents when their metadata match."""
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

    def moment(self) -> int:
        """The overlay's applied seq now, at a write's boundary: a search begun here passes it to `hits`."""
        return self.overlay.seq()

    def hits(self, scores: np.ndarray, ids: np.ndarray, passages: bool = False, since: int | None = None
             ) -> list[list[Hit]]:
        """The base's hits for its ids, the written documents' for theirs, in rank order; a document deleted or
        replaced between the search and this lookup is left out (`passages`: passage rows as their documents).
        A rewrite keeps its rows' FAISS ids, so with `since` (`moment` when the search began) a written document
        logged after it is left out too: its row was scored (and filtered) as the earlier text, or its write was
        seen by one of the search's steps and not another."""
        docs, gone = self.overlay.lookup([int(i) for i in ids.ravel() if i >= 0])
        if since is not None:
            for f in [f for f, d in docs.items() if d.seq > since]:
                del docs[f]
                gone.add(f)
        if not docs and not gone:
            return self.base.hits(scores, ids, passages)
        mine = np.isin(ids, np.fromiter((*docs, *gone), dtype=np.int64))
        base_hits = self.base.hits(scores, np.where(mine, -1, ids), passages)
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
                    row.append(_written_hit(i, docs[i], s, passages))
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

    def doc_rows(self, ids: np.ndarray) -> np.ndarray:
        """The base's document ordinals (`Store.doc_rows`), -1 for a row deleted or replaced since the search, and
        for a written row its document's own ordinal past the base's (a write replaces every passage of its
        document, so no document has live rows both written and in the base)."""
        ids = np.asarray(ids, dtype=np.int64)
        out = self.base.doc_rows(ids)
        docs, gone = self.overlay.lookup([i for i in ids.ravel().tolist() if i >= 0])
        if not docs and not gone:
            return out
        changed = {**dict.fromkeys(gone, -1), **{f: self._written_doc(d.ext_id) for f, d in docs.items()}}
        keys = np.fromiter(changed, dtype=np.int64, count=len(changed))
        order = np.argsort(keys)
        keys, values = keys[order], np.fromiter(changed.values(), dtype=np.int64, count=len(changed))[order]
        at = np.minimum(np.searchsorted(keys, ids), len(keys) - 1)
        hit = keys[at] == ids
        out[hit] = values[at[hit]]  # the changed rows' ordinals, in one pass rather than a loop over every id
        return out

    def _written_doc(self, ext_id: ExtId) -> int:
        key = document_key(ext_id)
        with self._written_lock:
            return self._written_docs.setdefault(key, WRITTEN_DOCS_FROM + len(self._written_docs))

    def close(self) -> None:
        """Close the version and free the written documents (`Overlay.release`): once no search reads this index."""
        self.base.close()
        self.overlay.release()
        drain(self._written_docs)


def served_fields(index: Any) -> dict[str, str]:
    """The metadata fields the documents a served index holds now have (field → type, as filters check them;
    `LiveIndex.metadata_schema`), the passage rows' own record left out."""
    fields = index.metadata_schema() if isinstance(index, LiveIndex) else index.store.metadata_schema()
    return {k: v for k, v in fields.items() if k != PASSAGE_KEY}


def served_counts(index: Any) -> tuple[int, int | None]:
    """(documents, passages) a served index holds now; passages None for a version of whole documents. An index
    without an overlay (the sharded backend) counts the documents its manifest records."""
    if index.manifest.chunking() is None:
        return index.ntotal, None
    return (index.documents() if isinstance(index, LiveIndex) else index.manifest.data.n_docs), index.ntotal
