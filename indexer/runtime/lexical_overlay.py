"""Written documents' BM25 weights, searched beside a version's `LexicalIndex` until a compaction indexes them with
the rest (the overlay's lexical side: `indexer.runtime.overlay`)."""

from __future__ import annotations

import threading

from indexer.runtime.drain import drain
from indexer.runtime.lexical import LexicalIndex


class LexicalOverlay:
    """Written documents' BM25 weights, searched beside a base `LexicalIndex` (an inverted map, small until
    `indexer compact`). The caller serialises writes; searches read under the lock."""

    def __init__(self, base: LexicalIndex) -> None:
        self.base = base
        self._lock = threading.Lock()
        self._postings: dict[str, dict[int, float]] = {}
        # FAISS id -> its terms (to remove it), a tuple of strings: the garbage collector stops tracking it, so a
        # full collection does not walk one object per written document
        self._terms: dict[int, tuple[str, ...]] = {}

    def put(self, fid: int, text: str) -> None:
        self.put_weights(fid, self.base.weights(text))

    def put_weights(self, fid: int, weights: dict[str, float]) -> None:
        """`put` with the text's weights computed already (`base.weights`: the overlay computes them before it
        takes its own lock, so that the analysis of a write's texts never holds the searches' snapshot back)."""
        with self._lock:
            self._remove(fid)
            for term, w in weights.items():
                self._postings.setdefault(term, {})[fid] = w
            self._terms[fid] = tuple(weights)

    def drop(self, fid: int) -> None:
        with self._lock:
            self._remove(fid)

    def _remove(self, fid: int) -> None:
        for term in self._terms.pop(fid, ()):
            posting = self._postings.get(term)
            if posting is not None:
                posting.pop(fid, None)
                if not posting:
                    del self._postings[term]

    def __len__(self) -> int:
        return len(self._terms)

    def release(self) -> None:
        """Free what the written documents hold, a slice at a time (`drain`), once nothing searches it."""
        drain(self._terms)
        drain(self._postings)

    def scores(self, query: str) -> dict[int, float]:
        """FAISS id → score of the written documents that share a term with `query` (a repeated query term counts
        each time, as in the base index)."""
        acc: dict[int, float] = {}
        terms = self.base.analyzer.terms(query)
        with self._lock:
            for t in terms:
                for fid, w in self._postings.get(t, {}).items():
                    acc[fid] = acc.get(fid, 0.0) + w
        return acc
