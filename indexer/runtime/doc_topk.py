"""The top k documents of a version of passages (`indexer build --chunk`), each ranked by its best passage: how
deep to search for k documents, and how the search deepens, bounded, when a few documents fill the candidates (a
PDF of 85 passages holds every one of a search's best 100).

The ranking never depends on k, so the first n documents of k are the documents of n for every n < k:
- dense and lexical rank documents by their best passage in one ranked list of passages, whose first documents
  are the same however deep it is searched (exact search, ties by id); it is searched `first_depth(k)` deep, then
  deeper (×4) while it holds fewer than k documents;
- hybrid fuses its two legs in tiers of fixed depths (`TIERS`: each leg's best 100 passages, then 400, …), and a
  tier's new documents rank after every document of the tiers before it. A fused score depends on the depth it
  was fused at (min-max normalisation over the candidates; RRF's ranks do not, its missing-list zeros do), so the
  tiers, not k, fix the depths.
The deepening stops at `MAX_DEPTH` passages per list: an answer it leaves short of k documents while more
passages may match is `short` (the API says `truncated`).
A ranked list becomes documents in one numpy pass: its rows' document ordinals (`DocRows`: the index's `doc_rows`,
from `Store.doc_rows`, the overlay's written rows beside them), then each document's first row.

May import: numpy, `indexer.runtime.passages`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from indexer.runtime.passages import fetch_depth

Ranked = tuple[np.ndarray, np.ndarray]  # one query's (scores, FAISS ids), best first; id -1 is padding
DocRows = Callable[[np.ndarray], np.ndarray]  # FAISS ids → their documents' ordinals, -1: none (`Store.doc_rows`)

TIERS = (100, 400, 1600, 6400)  # hybrid: passages per leg at each tier; the first is `fusion.HYBRID_DEPTH`
MAX_DEPTH = TIERS[-1]  # the bound: passages searched per list for one query


@dataclass
class DocRanking:
    """One query's documents, best first: each one's score and best passage, and whether the bound stopped it."""

    scores: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    fids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # each document's best passage
    docs: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # their ordinals (`DocRows`)
    short: bool = False

    def ranked(self) -> Ranked:
        return self.scores, self.fids


def first_depth(top_k: int) -> int:
    """Passages to search first for top_k documents."""
    return min(MAX_DEPTH, fetch_depth(top_k))


def exhausted(ranked: Ranked, depth: int) -> bool:
    """Whether a list searched `depth` deep came back with fewer: nothing more matches."""
    return int((np.asarray(ranked[1])[:depth] >= 0).sum()) < depth


def settle(search: Callable[[int], Ranked], first: Ranked, depth: int, k: int) -> Ranked:
    """The best k rows of a ranked list in one order whatever the depth it was searched to: rows of equal scores
    (passages repeating one text: boilerplate, copies) by id, and every row tied with the k-th seen before the cut.
    A vector search orders ties as its own k makes it (FAISS keeps a heap for a small k, a reservoir for a larger
    one), so a shallow list's first rows were other copies than a deep one's. `first` was searched
    `depth` (> k) deep; while its row past the k-th ties with the k-th, it is searched deeper by `search(d)` (x4,
    up to past `MAX_DEPTH`: beyond, the tied rows it holds are cut by id); fewer than k rows are padded
    (id -1) as a search pads them."""
    scores, ids = first
    while True:
        s, i = np.asarray(scores, np.float32)[:depth], np.asarray(ids, np.int64)[:depth]
        live = i >= 0
        s, i = s[live], i[live]
        if k <= 0 or len(i) <= k or s[k] < s[k - 1] or depth > max(MAX_DEPTH, k):
            break
        depth = max(MAX_DEPTH, k) + 1 if depth * 4 > max(MAX_DEPTH, k) else depth * 4
        scores, ids = search(depth)
    k = max(k, 0)
    order = np.lexsort((i, -s))[:k]
    out_s, out_i = np.full(k, -np.inf, np.float32), np.full(k, -1, np.int64)  # padded as a search pads
    out_s[: len(order)], out_i[: len(order)] = s[order], i[order]
    return out_s, out_i


class _Collector:
    """Documents of ranked passage lists, appended in rank order until top_k: each list's rows mapped to their
    documents (`DocRows`) and its first row of each document not collected yet kept, in one numpy pass."""

    def __init__(self, rows: DocRows, top_k: int) -> None:
        self._rows, self.top_k = rows, top_k
        self.out = DocRanking()

    @property
    def full(self) -> bool:
        return len(self.out.fids) >= self.top_k

    def add(self, ranked: Ranked) -> None:
        """The documents of `ranked` not collected yet, in its order (the first row of each: its best passage),
        until top_k; padding and rows gone since the search (ordinal -1) are skipped."""
        if self.full:
            return
        scores, ids = np.asarray(ranked[0], np.float32), np.asarray(ranked[1], np.int64)
        docs = self._rows(ids)
        pos = np.flatnonzero((docs >= 0) & (ids >= 0))
        pos = pos[first_rows(docs[pos])]  # each document's first row, in rank order
        out = self.out
        if len(out.docs):
            pos = pos[~np.isin(docs[pos], out.docs)]
        pos = pos[: self.top_k - len(out.fids)]
        if not len(out.fids):  # the first list: no arrays to join
            out.scores, out.fids, out.docs = scores[pos], ids[pos], docs[pos]
            return
        out.scores, out.fids = np.concatenate([out.scores, scores[pos]]), np.concatenate([out.fids, ids[pos]])
        out.docs = np.concatenate([out.docs, docs[pos]])


def first_rows(docs: np.ndarray) -> np.ndarray:
    """The positions of each value's first occurrence in `docs`, ascending (what `np.unique(return_index=True)`
    gives, sorted, without its other outputs): one stable argsort."""
    if len(docs) < 2:
        return np.arange(len(docs))
    order = np.argsort(docs, kind="stable")
    ranked = docs[order]
    first = np.empty(len(docs), dtype=bool)
    first[0] = True
    np.not_equal(ranked[1:], ranked[:-1], out=first[1:])
    return np.sort(order[first])


def rank_list(search: Callable[[int], Ranked], first: Ranked, depth: int, rows: DocRows, top_k: int) -> DocRanking:
    """Dense or lexical: the top_k documents of `first` (searched `depth` deep), searched deeper by `search(depth)`
    while it holds fewer and more may match."""
    while True:
        got = _Collector(rows, top_k)
        got.add((first[0][:depth], first[1][:depth]))
        if got.full or exhausted(first, depth):
            return got.out
        if depth >= MAX_DEPTH:
            got.out.short = True
            return got.out
        depth = min(MAX_DEPTH, depth * 4)
        first = search(depth)


def rank_fused(legs: Callable[[int], tuple[Ranked, Ranked]], first: tuple[Ranked, Ranked], depth: int,
               fuse: Callable[[Ranked, Ranked, int], Ranked], rows: DocRows, top_k: int) -> DocRanking:
    """Hybrid: the top_k documents of the two legs fused tier by tier (`TIERS`); `first` is the legs searched
    `depth` deep, `legs(depth)` searches them deeper when a tier needs it."""
    got = _Collector(rows, top_k)
    for tier in TIERS:
        if tier > depth:
            first, depth = legs(tier), tier
        dense, lexical = ((r[0][:tier], r[1][:tier]) for r in first)
        got.add(fuse(dense, lexical, 2 * tier))
        if got.full or (exhausted(dense, tier) and exhausted(lexical, tier)):
            return got.out
    got.out.short = True
    return got.out
