"""The hnsw kind: FAISS's HNSW graph with flat float32 storage, and its filtered search."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import faiss
import numpy as np

from indexer.runtime.ann import HnswParams, check_search_params
from indexer.runtime.faiss.base import params_for
from indexer.runtime.faiss.filtered import IdFilter
from indexer.runtime.faiss.idmap import IdMapped
from indexer.runtime.faiss.search import Exclusion

log = logging.getLogger(__name__)

HNSW_EXACT_FILTER_SHARE = 0.1
HNSW_MAX_EF = 4096


class HnswIndex(IdMapped):
    """FAISS's HNSW graph with flat float32 storage (`IndexHNSWFlat` in an `IndexIDMap2`).

    HNSW cannot remove a vector in place (FAISS's `remove_ids` is not implemented for it): `remove` rebuilds the
    graph from the vectors that stay (what `indexer add` replacing documents and `indexer compact` folding deletes
    cost); the API's deletes never reach it: they are tombstones of the write overlay, skipped inside the search."""

    kind = "hnsw"
    INNER = faiss.IndexHNSW

    def __init__(self, index: faiss.Index, params: HnswParams) -> None:
        super().__init__(index)
        self.params = params
        self._hnsw().hnsw.efSearch = params.ef_search

    def _hnsw(self) -> faiss.IndexHNSW:
        return faiss.downcast_index(self._index.index)

    @classmethod
    def params_for(cls, options: Mapping[str, Any], n_vectors: int, dim: int) -> HnswParams:
        """The graph's M and efConstruction as given (the CLI's defaults: `HnswParams`'), efSearch given or the
        default (calibration sets it after the build)."""
        default = HnswParams.model_fields
        return HnswParams(m=options.get("hnsw_m") or default["m"].default,
                          ef_construction=options.get("ef_construction") or default["ef_construction"].default,
                          ef_search=options.get("ef_search") or default["ef_search"].default)

    @classmethod
    def empty(cls, dim: int, params: HnswParams) -> HnswIndex:
        inner = faiss.IndexHNSWFlat(dim, params.m, faiss.METRIC_INNER_PRODUCT)
        inner.hnsw.efConstruction = params.ef_construction
        return cls(faiss.IndexIDMap2(inner), params)

    @classmethod
    def build(cls, vectors: np.ndarray, ids: np.ndarray, params: HnswParams) -> HnswIndex:
        out = cls.empty(vectors.shape[1], params)
        out.add(vectors, ids)
        return out

    def knob(self) -> tuple[str, int, int] | None:
        return ("ef_search", 1, min(HNSW_MAX_EF, max(16, self.ntotal)))  # past ntotal candidates change nothing

    def set_default(self, name: str, value: int) -> int:
        check_search_params(self.kind, {name: value})
        self.params.ef_search = self._hnsw().hnsw.efSearch = int(value)
        return int(value)

    def defaults(self) -> dict[str, int]:
        return {"ef_search": self.params.ef_search}

    def _ef(self, search_params: Mapping[str, int] | None, k: int) -> int:
        return max(k, params_for(search_params, self.kind).get("ef_search", self.params.ef_search))  # FAISS: ef >= k

    def search(self, queries: np.ndarray, k: int, *, exclude: Exclusion | None = None,
               search_params: Mapping[str, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        sel = exclude.selector if exclude is not None and len(exclude) else None
        params = faiss.SearchParametersHNSW(efSearch=self._ef(search_params, k), sel=sel)  # type: ignore[call-arg]
        return self._index.search(np.ascontiguousarray(queries, dtype=np.float32), k, params=params)

    def filtered_search(self, queries: np.ndarray, k: int, flt: IdFilter, *,
                        search_params: Mapping[str, int] | None = None, ntotal: int | None = None
                        ) -> tuple[np.ndarray, np.ndarray, bool]:
        n = len(queries)
        if flt.selector is None:
            return np.full((n, k), -np.inf, dtype=np.float32), np.full((n, k), -1, dtype=np.int64), True
        share = len(flt.ids) / max(1, ntotal or self.ntotal)
        if share <= HNSW_EXACT_FILTER_SHARE:
            scores, ids = self._exact_among(queries, k, flt)
            return scores, ids, True
        ef = min(HNSW_MAX_EF, max(self._ef(search_params, k), math.ceil(self._ef(search_params, k) / share)))
        params = faiss.SearchParametersHNSW(efSearch=ef, sel=flt.selector)  # type: ignore[call-arg]
        scores, ids = self._index.search(np.ascontiguousarray(queries, dtype=np.float32), k, params=params)
        return scores, ids, False

    def remove(self, ids: np.ndarray) -> int:
        held, vecs = self.stored_vectors()
        gone = np.isin(held, np.asarray(ids, dtype=np.int64))
        removed = int(gone.sum())
        if removed:
            log.info("HNSW cannot remove in place: rebuilding the graph of %d vectors without %d", len(held) - removed,
                     removed)
            fresh = HnswIndex.empty(self.dim, self.params)
            fresh.add(vecs[~gone], held[~gone])
            self._index, self._rows = fresh._index, None
            self._hnsw().hnsw.efSearch = self.params.ef_search
        return removed
