"""What the flat and hnsw kinds share: a FAISS index in an `IndexIDMap2`, its stored vectors and exact search
among a filter's matches."""

from __future__ import annotations

import threading
from pathlib import Path

import faiss
import numpy as np

from indexer.runtime.faiss.base import FaissBacked
from indexer.runtime.faiss.exact import knn_inner_product
from indexer.runtime.faiss.files import memory_bytes, write_index
from indexer.runtime.faiss.filtered import IdFilter


class IdMapped(FaissBacked):
    """Flat and HNSW: a FAISS index in an `IndexIDMap2` (rows in insertion order, ids beside them)."""

    def __init__(self, index: faiss.Index) -> None:
        self._index = index  # IndexIDMap2
        self._rows: tuple[np.ndarray, np.ndarray] | None = None  # (sorted ids, their rows)
        self._lock = threading.Lock()

    def _ids(self) -> np.ndarray:
        return faiss.vector_to_array(faiss.downcast_index(self._index).id_map).astype(np.int64, copy=False)

    def _flat_storage(self) -> faiss.Index:
        inner = faiss.downcast_index(self._index.index)
        return inner if isinstance(inner, faiss.IndexFlat) else faiss.downcast_index(inner.storage)

    def stored_vectors(self) -> tuple[np.ndarray, np.ndarray]:
        storage = self._flat_storage()
        n = int(storage.ntotal)
        vecs = storage.reconstruct_n(0, n) if n else np.zeros((0, self.dim), dtype=np.float32)
        return self._ids().copy(), vecs

    def vectors_of(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        held_ids, rows = self._row_index()
        pos = np.minimum(np.searchsorted(held_ids, ids), max(0, len(held_ids) - 1))
        missing = ids[held_ids[pos] != ids] if len(held_ids) else ids
        if len(missing):
            raise KeyError(f"id {int(missing[0])} is not in this index")
        if not len(ids):
            return np.zeros((0, self.dim), dtype=np.float32)
        return self._flat_storage().reconstruct_batch(rows[pos])

    def sample_stored(self, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        ids, vecs = self.stored_vectors()
        n = min(n, len(ids))
        picks = np.sort(np.random.default_rng(seed).choice(len(ids), size=n, replace=False)) if n else \
            np.zeros(0, dtype=np.int64)
        return ids[picks], vecs[picks]

    def exact_search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        ids, vecs = self.stored_vectors()
        scores, rows = knn_inner_product(queries, vecs, k)
        out_ids = np.where(rows >= 0, ids[np.clip(rows, 0, None)], -1) if rows.size else rows
        if scores.shape[1] < k:  # fewer vectors than k: pad like FAISS
            pad = k - scores.shape[1]
            scores = np.pad(scores, ((0, 0), (0, pad)), constant_values=-np.inf)
            out_ids = np.pad(out_ids, ((0, 0), (0, pad)), constant_values=-1)
        return scores, out_ids

    def _row_index(self) -> tuple[np.ndarray, np.ndarray]:
        with self._lock:
            if self._rows is None:
                ids = self._ids()
                order = np.argsort(ids, kind="stable")
                self._rows = (ids[order], order.astype(np.int64))
            return self._rows

    def prepare(self, ids: np.ndarray) -> IdFilter:
        ids = np.unique(np.asarray(ids, dtype=np.int64))
        held_ids, rows = self._row_index()
        if len(held_ids) == 0 or len(ids) == 0:
            return IdFilter(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        pos = np.minimum(np.searchsorted(held_ids, ids), len(held_ids) - 1)
        held = held_ids[pos] == ids
        ids, pos = ids[held], pos[held]
        if len(ids) == 0:
            return IdFilter(ids, np.zeros(0, dtype=np.int64))
        return IdFilter(ids, np.sort(rows[pos]))  # `lists`: the rows holding a match; its selector built when used

    def _exact_among(self, queries: np.ndarray, k: int, flt: IdFilter) -> tuple[np.ndarray, np.ndarray]:
        storage = self._flat_storage()
        vecs = storage.reconstruct_batch(flt.lists) if len(flt.lists) else np.zeros((0, self.dim), np.float32)
        scores, pos = knn_inner_product(queries, vecs, k)
        ids = self._ids()[flt.lists]
        out = np.full((len(queries), k), -1, dtype=np.int64)
        out_scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
        if pos.size:
            out[:, : pos.shape[1]] = np.where(pos >= 0, ids[np.clip(pos, 0, None)], -1)
            out_scores[:, : pos.shape[1]] = scores
        return out_scores, out

    def add(self, vectors: np.ndarray, ids: np.ndarray) -> None:
        self._index.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32), np.asarray(ids, dtype=np.int64))
        self._rows = None

    def memory_bytes(self) -> int:
        return memory_bytes(self._index)

    def save(self, path: Path) -> None:
        write_index(self._index, path)
