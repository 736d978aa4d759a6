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

May import: numpy, `indexer.runtime.passages`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from indexer.runtime.passages import ExtId, document_key, fetch_depth

Ranked = tuple[np.ndarray, np.ndarray]  # one query's (scores, FAISS ids), best first; id -1 is padding
DocKey = tuple[object, ExtId]  # `passages.document_key`: 17 and "17" are two documents
Keys = Callable[[list[int]], dict[int, ExtId]]  # FAISS ids → their rows' ids (unknown ids left out)

TIERS = (100, 400, 1600, 6400)  # hybrid: passages per leg at each tier; the first is `fusion.HYBRID_DEPTH`
MAX_DEPTH = TIERS[-1]  # the bound: passages searched per list for one query


@dataclass
class DocRanking:
    """One query's documents, best first: each one's score and best passage, and whether the bound stopped it."""

    scores: list[float] = field(default_factory=list)
    fids: list[int] = field(default_factory=list)  # each document's best passage
    keys: dict[DocKey, None] = field(default_factory=dict)  # the documents, in rank order
    short: bool = False

    def ranked(self) -> Ranked:
        return np.asarray(self.scores, np.float32), np.asarray(self.fids, np.int64)


def first_depth(top_k: int) -> int:
    """Passages to search first for top_k documents."""
    return min(MAX_DEPTH, fetch_depth(top_k))


def exhausted(ranked: Ranked, depth: int) -> bool:
    """Whether a list searched `depth` deep came back with fewer: nothing more matches."""
    return int((np.asarray(ranked[1])[:depth] >= 0).sum()) < depth


class _Collector:
    """Documents of ranked passage lists, appended in rank order until top_k (each row's document looked up once)."""

    def __init__(self, keys: Keys, top_k: int) -> None:
        self._keys, self.top_k = keys, top_k
        self._known: dict[int, DocKey | None] = {}
        self.out = DocRanking()

    @property
    def full(self) -> bool:
        return len(self.out.fids) >= self.top_k

    def add(self, ranked: Ranked) -> None:
        """The documents of `ranked` not collected yet, in its order, until top_k; the rows' documents are looked
        up a block at a time, so a list whose first rows already hold top_k documents is not looked up whole."""
        scores, ids = np.asarray(ranked[0]).tolist(), np.asarray(ranked[1]).tolist()
        pos = 0
        while pos < len(ids) and not self.full:
            block = ids[pos : pos + max(64, 2 * (self.top_k - len(self.out.fids)))]
            self._learn(block)
            for s, i in zip(scores[pos : pos + len(block)], block, strict=True):
                key = self._known.get(i) if i >= 0 else None
                if key is None or key in self.out.keys:  # padding, a row gone since the search, or a document ranked
                    continue
                self.out.keys[key] = None
                self.out.scores.append(float(s))
                self.out.fids.append(i)
                if self.full:
                    return
            pos += len(block)

    def _learn(self, ids: list[int]) -> None:
        new = [i for i in dict.fromkeys(ids) if i >= 0 and i not in self._known]
        if new:
            found = self._keys(new)
            for i in new:
                ext = found.get(i)
                self._known[i] = None if ext is None else document_key(ext)


def rank_list(search: Callable[[int], Ranked], first: Ranked, depth: int, keys: Keys, top_k: int) -> DocRanking:
    """Dense or lexical: the top_k documents of `first` (searched `depth` deep), searched deeper by `search(depth)`
    while it holds fewer and more may match."""
    while True:
        got = _Collector(keys, top_k)
        got.add((first[0][:depth], first[1][:depth]))
        if got.full or exhausted(first, depth):
            return got.out
        if depth >= MAX_DEPTH:
            got.out.short = True
            return got.out
        depth = min(MAX_DEPTH, depth * 4)
        first = search(depth)


def rank_fused(legs: Callable[[int], tuple[Ranked, Ranked]], first: tuple[Ranked, Ranked], depth: int,
               fuse: Callable[[Ranked, Ranked, int], Ranked], keys: Keys, top_k: int) -> DocRanking:
    """Hybrid: the top_k documents of the two legs fused tier by tier (`TIERS`); `first` is the legs searched
    `depth` deep, `legs(depth)` searches them deeper when a tier needs it."""
    got = _Collector(keys, top_k)
    for tier in TIERS:
        if tier > depth:
            first, depth = legs(tier), tier
        dense, lexical = ((r[0][:tier], r[1][:tier]) for r in first)
        got.add(fuse(dense, lexical, 2 * tier))
        if got.full or (exhausted(dense, tier) and exhausted(lexical, tier)):
            return got.out
    got.out.short = True
    return got.out
