"""The PISA engine's forward index: each row's terms and exact BM25 weights (CSR, memory-mapped), and the scoring
done from it. PISA ranks by quantised impacts; every answer is rescored here, exactly (`indexer.runtime.lexical_pisa`).
Imports numpy and `rowsets` only.

    forward.indptr.npy   row r's entries are [indptr[r], indptr[r + 1])
    forward.terms.npy    each entry's term id (int32)
    forward.weights.npy  each entry's Lucene BM25 weight (float32)

- `ForwardIndex.score_rows`: the exact BM25 of a set of rows, each row's entries read (PISA's candidates, hybrid's
  dense candidates, a filter's rows).
- `RowPostings`: a filter's rows' entries inverted, term → (row, weight), so that a query reads only its own terms'
  entries among them, not every entry of every row (at 10M documents a 1 % filter holds ~800,000 entries: measured
  in docs/decisions.md#a-filters-postings). Building one costs a few of those reads, so it is built for a filter
  used again, off the request path (`IndexVersion.match`), and kept in the engine's `RowPostingsCache` for as long
  as the filter's rows array lives (the version's `FilterCache` holds it).

Both sum a row's weights in float64 and round once to float32: the same scores either way (float32 weights add
exactly in float64 while one document's weights span less than 2**29, as BM25's do).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from indexer.runtime.rowsets import in_sorted

FORWARD = ("indptr", "terms", "weights")
HOLDS_PASSES = 12  # up to this many query terms, a row's terms are matched by a pass per term (`_holds`)


@dataclass(frozen=True)
class Query:
    """A query's known terms as ids (ascending), each with how many times the query holds it."""

    terms: np.ndarray  # int32, ascending
    counts: np.ndarray  # float64

    @classmethod
    def of(cls, counts: dict[int, int]) -> Query:
        terms = np.fromiter(counts, np.int32, count=len(counts))
        order = np.argsort(terms)
        return cls(terms[order], np.fromiter(counts.values(), np.float64, count=len(counts))[order])


class ForwardIndex:
    """The forward index in `folder` (`FORWARD`'s arrays, memory-mapped)."""

    def __init__(self, folder: Path) -> None:
        # plain arrays over the mappings: np.memmap's own indexing costs a Python call per read
        self.indptr, self.terms, self.weights = (np.asarray(np.load(folder / f"forward.{name}.npy", mmap_mode="r"))
                                                 for name in FORWARD)

    @staticmethod
    def save(folder: Path, indptr: np.ndarray, terms: np.ndarray, weights: np.ndarray) -> None:
        for name, arr in zip(FORWARD, (indptr, terms.astype(np.int32), weights.astype(np.float32)), strict=True):
            np.save(folder / f"forward.{name}.npy", arr)

    def entries(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where `rows`' entries are (positions in `terms`/`weights`, row by row) and whose each is (an index into
        `rows`)."""
        start, stop = self.indptr[rows], self.indptr[rows + 1]
        sizes = stop - start
        at = np.repeat(start - np.concatenate([[0], np.cumsum(sizes)[:-1]]), sizes) + np.arange(int(sizes.sum()))
        return at, np.repeat(np.arange(len(rows), dtype=np.int32), sizes)

    def n_entries(self, rows: np.ndarray) -> int:
        return int((self.indptr[rows + 1] - self.indptr[rows]).sum()) if len(rows) else 0

    def score_rows(self, query: Query, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Exact BM25 of `rows` (int64, sorted): (scores, rows) of those sharing a term with the query."""
        if not len(query.terms) or not len(rows):
            return np.zeros(0, np.float32), np.zeros(0, np.int64)
        at, owner = self.entries(rows)
        tids = np.asarray(self.terms[at])
        hit = _holds(tids, query.terms)
        weights = (np.asarray(self.weights[at[hit]], np.float64)
                   * query.counts[np.searchsorted(query.terms, tids[hit])])
        scores = np.bincount(owner[hit], weights, minlength=len(rows))
        keep = scores > 0
        return scores[keep].astype(np.float32), rows[keep]


@dataclass(frozen=True)
class RowPostings:
    """`rows`' forward entries inverted: term `terms[i]`'s entries among these rows are [offsets[i], offsets[i + 1])
    of `owners` (indexes into `rows`, ascending within a term) and `weights`."""

    rows: np.ndarray  # int64, sorted: the filter's rows
    terms: np.ndarray  # int32, ascending: the terms these rows hold
    offsets: np.ndarray  # int64, len(terms) + 1
    owners: np.ndarray  # int32
    weights: np.ndarray  # float32

    @classmethod
    def build(cls, forward: ForwardIndex, rows: np.ndarray) -> RowPostings:
        at, owners = forward.entries(rows)
        tids = np.asarray(forward.terms[at])
        order = np.argsort(tids, kind="stable")  # stable: each term's owners stay ascending
        tids, owners = tids[order], owners[order]
        weights = np.asarray(forward.weights[at[order]], np.float32)
        terms, first = np.unique(tids, return_index=True)
        offsets = np.append(first, len(tids)).astype(np.int64)
        # a copy: the cache keys these by the caller's array, which must not be kept alive by them
        return cls(np.array(rows, np.int64), terms.astype(np.int32), offsets, owners, weights)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.rows, self.terms, self.offsets, self.owners, self.weights))

    def score(self, query: Query, excluded_rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Exact BM25 of these rows but `excluded_rows`: (scores, rows) of those sharing a term with the query, the
        scores `ForwardIndex.score_rows` gives them."""
        if not len(self.terms) or not len(query.terms):
            return np.zeros(0, np.float32), np.zeros(0, np.int64)
        at = np.searchsorted(self.terms, query.terms)
        found = (at < len(self.terms)) & (self.terms[np.minimum(at, len(self.terms) - 1)] == query.terms)
        if not found.any():
            return np.zeros(0, np.float32), np.zeros(0, np.int64)
        spans = [(self.offsets[i], self.offsets[i + 1], c) for i, c in zip(at[found], query.counts[found], strict=True)]
        owners = np.concatenate([self.owners[a:b] for a, b, _ in spans])
        weights = np.concatenate([self.weights[a:b].astype(np.float64) * c for a, b, c in spans])
        scores = np.bincount(owners, weights, minlength=len(self.rows))
        keep = np.flatnonzero(scores > 0)
        rows = self.rows[keep]
        scores = scores[keep].astype(np.float32)
        if excluded_rows is not None and len(excluded_rows):
            kept = ~in_sorted(rows, excluded_rows)
            scores, rows = scores[kept], rows[kept]
        return scores, rows


class RowPostingsCache:
    """An engine's `RowPostings`, by the rows array they were built for (that very array: a filter's rows, kept by
    the version's `FilterCache` entry), dropped when the array is freed or the LRU's bound in bytes is passed."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[int, tuple[weakref.ref[np.ndarray], RowPostings]] = OrderedDict()
        self._held = 0
        self._lock = threading.RLock()  # re-entered when an array freed under it calls `_forget`

    def get(self, rows: np.ndarray | None) -> RowPostings | None:
        if rows is None:
            return None
        with self._lock:
            item = self._items.get(id(rows))
            if item is None or item[0]() is not rows:
                return None
            self._items.move_to_end(id(rows))
            return item[1]

    def put(self, rows: np.ndarray, postings: RowPostings) -> None:
        if postings.nbytes > self.max_bytes:
            return
        key = id(rows)
        ref = weakref.ref(rows, lambda r: self._forget(key, r))
        with self._lock:
            self._drop(key)
            self._items[key] = (ref, postings)
            self._held += postings.nbytes
            while self._held > self.max_bytes:
                self._drop(next(iter(self._items)))

    def _forget(self, key: int, ref: weakref.ref[np.ndarray]) -> None:
        with self._lock:
            item = self._items.get(key)
            if item is not None and item[0] is ref:  # not a newer array that took the same id
                self._drop(key)

    def _drop(self, key: int) -> None:
        item = self._items.pop(key, None)
        if item is not None:
            self._held -= item[1].nbytes

    @property
    def held(self) -> int:
        return self._held

    def __len__(self) -> int:
        return len(self._items)


def _holds(tids: np.ndarray, terms: np.ndarray) -> np.ndarray:
    """Which of `tids` are among `terms` (ascending): one comparison pass per term for a query's few terms (a 1 %
    filter at 10M is ~800,000 entries: a binary search per entry cost 1.6x these passes), a binary search per entry
    for many terms."""
    if not 0 < len(terms) <= HOLDS_PASSES:
        return in_sorted(tids, terms)
    hit = tids == terms[0]
    for term in terms[1:]:
        hit |= tids == term
    return hit
