"""The flat kind: exact search (`IndexFlatIP` in an `IndexIDMap2`)."""

from __future__ import annotations

from collections.abc import Mapping

import faiss
import numpy as np

from indexer.runtime.ann import FlatParams
from indexer.runtime.faiss.base import params_for
from indexer.runtime.faiss.filtered import IdFilter
from indexer.runtime.faiss.idmap import IdMapped
from indexer.runtime.faiss.search import Exclusion, remove_ids


class FlatIndex(IdMapped):
    """Exact search (`IndexFlatIP` in an `IndexIDMap2`): every answer, filtered or not, is exact."""

    kind = "flat"
    INNER = faiss.IndexFlat

    def __init__(self, index: faiss.Index, params: FlatParams | None = None) -> None:
        super().__init__(index)
        self.params = params or FlatParams()

    @classmethod
    def build(cls, vectors: np.ndarray, ids: np.ndarray, params: FlatParams | None = None) -> FlatIndex:
        index = faiss.IndexIDMap2(faiss.IndexFlatIP(vectors.shape[1]))
        out = cls(index, params)
        out.add(vectors, ids)
        return out

    def search(self, queries: np.ndarray, k: int, *, exclude: Exclusion | None = None,
               search_params: Mapping[str, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        params_for(search_params, self.kind)
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if exclude is None or not len(exclude):
            return self._index.search(queries, k)
        return self._index.search(queries, k, params=faiss.SearchParameters(sel=exclude.selector))

    def filtered_search(self, queries: np.ndarray, k: int, flt: IdFilter, *,
                        search_params: Mapping[str, int] | None = None, ntotal: int | None = None
                        ) -> tuple[np.ndarray, np.ndarray, bool]:
        params_for(search_params, self.kind)
        if flt.selector is None:
            n = len(queries)
            return np.full((n, k), -np.inf, dtype=np.float32), np.full((n, k), -1, dtype=np.int64), True
        scores, ids = self._exact_among(queries, k, flt)
        return scores, ids, True

    def remove(self, ids: np.ndarray) -> int:
        self._rows = None
        return remove_ids(self._index, ids)


# HNSW filtered search: a graph walk restricted to few matches wanders far before it finds k of them (and may
# not find them), so below this share of matching vectors the matches are scored exactly instead — Qdrant's
# `full_scan_threshold` rule. Above it, efSearch grows as 1 / selectivity (like IVF's nprobe), capped.
