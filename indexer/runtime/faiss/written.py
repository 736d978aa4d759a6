"""Inverted lists over the live overlay's written vectors (`WrittenLists`), so that a search reads the few lists
near the query instead of every written vector (`indexer.runtime.overlay`, searched by `live_index.LiveIndex`).

Two sources of coarse quantizer:
- **the served version's** when it is IVF (`IvfIndex.written_lists`): the written vectors go to the version's own
  lists' centroids, probed with the version's nprobe (its calibrated default, or the request's), so the written
  documents are found as the version's are; nothing to train;
- **their own** otherwise (a flat, HNSW or empty version): `OWN_NLIST` centroids trained by k-means on the
  written vectors themselves (`trained`), probed `OWN_NPROBE` at a time.

The lists hold float32 copies of the written vectors under their overlay row numbers. Rows are only appended
(`add`); a search names the rows of its snapshot (`IDSelectorRange`, or a bitmap of the live ones when some rows
died since they were written), so rows appended after the snapshot and dead rows never answer. FAISS's lists are
not safe to read while they grow, so the lists are only appended to under one lock, by a search. A write assigns its
vectors to lists (the costly part) and queues the result; the next search, holding the lock, appends what is queued
before it reads `nprobe` lists. Why not the write itself: it runs below the searches' CPU priority (`write_nice`),
and a write preempted while holding the lock kept the searches waiting behind it (measured in
docs/decisions.md#search-during-an-ingest); under a steady ingest a search finds a few dozen rows queued to
append. Writes append themselves only when `PENDING_ROWS` are queued (no search came), so the queue stays bounded.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

import faiss
import numpy as np

from indexer.runtime.faiss.devices import get_threads, set_threads
from indexer.runtime.faiss.kmeans import training_sample

OWN_NLIST = 256  # centroids trained on the written vectors when the version has none to share
OWN_NPROBE = 16  # lists probed per query in those
OWN_KMEANS_ITER = 10
PENDING_ROWS = 2_048  # rows queued before a write appends them itself: the most a search appends (~1.5 ms)

Probe = Callable[[Mapping[str, int] | None], int]  # the lists probed for a search's parameters


class WrittenLists:
    """IVF-Flat lists over overlay rows (FAISS ids = row numbers), on a shared or an own coarse quantizer."""

    def __init__(self, quantizer: faiss.Index, keep: object, probe: Probe) -> None:
        self._quantizer = quantizer
        self._keep = keep  # what owns `quantizer` (the served version's index, or the quantizer itself)
        self._probe = probe
        self._index = faiss.IndexIVFFlat(quantizer, quantizer.d, int(quantizer.ntotal), faiss.METRIC_INNER_PRODUCT)
        self._lock = threading.Lock()  # the lists: held to append to them or to read them
        self._queue_lock = threading.Lock()  # `_queued` only: held for a list operation, never across FAISS
        self._queued: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (vectors, rows, lists) to append
        self._queued_rows = 0
        self.rows = 0  # rows added: 0 .. rows-1 (appended to the lists, or queued)

    @classmethod
    def sharing(cls, index: faiss.Index, probe: Probe) -> WrittenLists:
        """Empty lists on the coarse quantizer of the IVF `index` (kept alive by these lists)."""
        return cls(faiss.extract_index_ivf(index).quantizer, index, probe)

    @classmethod
    def trained(cls, vectors: np.ndarray, seed: int = 0, nlist: int = OWN_NLIST, nprobe: int = OWN_NPROBE
                ) -> WrittenLists:
        """Empty lists on `nlist` centroids trained by k-means on (a sample of) `vectors`, probed `nprobe` at a
        time."""
        nlist = max(1, min(nlist, len(vectors)))
        sample = np.ascontiguousarray(training_sample(vectors, nlist, seed), dtype=np.float32)
        kmeans = faiss.Kmeans(sample.shape[1], nlist, niter=OWN_KMEANS_ITER, seed=seed, spherical=True,
                              min_points_per_centroid=1)
        kmeans.train(sample)
        quantizer = faiss.IndexFlatIP(sample.shape[1])
        quantizer.add(kmeans.centroids)
        probe = min(nprobe, nlist)
        return cls(quantizer, quantizer, lambda _params: probe)

    def empty_like(self) -> WrittenLists:
        """New empty lists on the same quantizer (after the overlay renumbered its rows)."""
        return WrittenLists(self._quantizer, self._keep, self._probe)

    def add(self, vectors: np.ndarray, first_row: int) -> None:
        """Append rows `first_row` .. `first_row + len(vectors) - 1` (they must follow the rows held)."""
        if not len(vectors):
            return
        assert first_row == self.rows, (first_row, self.rows)
        rows = np.arange(first_row, first_row + len(vectors), dtype=np.int64)
        x = np.ascontiguousarray(vectors, dtype=np.float32)
        threads = get_threads()
        set_threads(1)  # a write's (or a swap's replay's) assignment never takes every core from the searches
        try:
            # the assignment (every vector against every centroid: most of an add's cost) outside the lock, since
            # the quantizer is only read; under it only the codes' append, so a search never waits behind a write's
            # assignment running at the write path's lower priority
            _, lists = self._quantizer.search(x, 1)
            lists = np.ascontiguousarray(lists.reshape(-1), dtype=np.int64)
        finally:
            set_threads(threads)
        with self._queue_lock:
            self._queued.append((x, rows, lists))
            self._queued_rows += len(x)
            self.rows = first_row + len(vectors)
            full = self._queued_rows >= PENDING_ROWS
        if full:  # no search has come to append them: this write does
            with self._lock:
                self._append_queued()

    def _append_queued(self) -> None:
        """Append the queued rows to the lists, in order (the caller holds `_lock`)."""
        with self._queue_lock:
            queued, self._queued, self._queued_rows = self._queued, [], 0
        for x, rows, lists in queued:
            self._index.add_core(len(x), faiss.swig_ptr(x), faiss.swig_ptr(rows), faiss.swig_ptr(lists))

    def search(self, queries: np.ndarray, k: int, rows: int, live: np.ndarray | None = None,
               search_params: Mapping[str, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k inner products over rows 0 .. `rows`-1 (only those `live` marks, when given), as (scores, row
        numbers), -1 where there is no hit."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if live is None:
            sel: faiss.IDSelector = faiss.IDSelectorRange(0, rows)
        else:
            bits = np.packbits(live[:rows], bitorder="little")  # FAISS's bitmap: bit i of byte i >> 3 is row i
            sel = faiss.IDSelectorBitmap(len(bits), faiss.swig_ptr(bits))
        params = faiss.SearchParametersIVF(sel=sel, nprobe=self._probe(search_params))  # type: ignore[call-arg]
        with self._lock:
            if self._queued:
                self._append_queued()
            scores, ids = self._index.search(queries, k, params=params)
        return scores, ids

    def release(self) -> None:
        """Free the lists' codes (FAISS's `reset`, which runs without the GIL); the quantizer is left alone."""
        with self._lock:
            with self._queue_lock:
                self._queued, self._queued_rows = [], 0
            self._index.reset()
            self.rows = 0

    @property
    def nlist(self) -> int:
        return int(self._index.nlist)

    def memory_bytes(self) -> int:
        return int(self.rows * (self._index.code_size + 8))
