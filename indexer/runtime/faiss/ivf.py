"""The ivf kind: Strata's IVF index (fp16 or float32 codes holding the vectors); nprobe is clamped to nlist
everywhere, and filtered searches go through the lists' `ListLocator`."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from indexer.runtime.ann import AnnIndex, IvfParams, check_search_params
from indexer.runtime.faiss.base import FaissBacked, params_for
from indexer.runtime.faiss.exact import exact_search, sample_stored, stored_vectors
from indexer.runtime.faiss.files import memory_bytes, split_ivf, write_index
from indexer.runtime.faiss.filtered import (
    IdFilter,
    ListLocator,
    exact_pays,
    filtered_nprobe,
    filtered_search,
    own_lists_pay,
)
from indexer.runtime.faiss.kmeans import TRAIN_POINTS_PER_LIST
from indexer.runtime.faiss.quantizer import quantizer_for
from indexer.runtime.faiss.search import Exclusion, remove_ids, search
from indexer.runtime.faiss.training import (
    DEFAULT_NPROBE,
    MIN_POINTS_PER_LIST,
    auto_nlist,
    build_ivf,
    clamp_nprobe,
    codec_for_budget,
    effective_nlist,
    nlist_of,
    set_nprobe,
    train_empty_ivf,
)
from indexer.runtime.faiss.written import WrittenLists

log = logging.getLogger(__name__)


class IvfIndex(FaissBacked):
    """Strata's IVF index (fp16 or float32 codes holding the vectors); nprobe is clamped to nlist everywhere."""

    kind = "ivf"

    @classmethod
    def build_from(cls, params: IvfParams, vectors: np.ndarray, ids: np.ndarray, seed: int
                   ) -> tuple[AnnIndex, float, float]:
        index, train_s, add_s = build_ivf(vectors, ids, params.nlist, params.nprobe, seed, params.codec,
                                          params.quantizer)
        return cls(index, params), train_s, add_s

    @classmethod
    def holds(cls, top: faiss.Index) -> bool:
        return isinstance(top, faiss.IndexIVF)

    @classmethod
    def params_of(cls, top: faiss.Index) -> IvfParams:
        """An opened IVF index's parameters read off it: its lists and its nprobe."""
        nlist = nlist_of(top)
        return IvfParams(nlist=nlist, nlist_requested=nlist, nprobe=clamp_nprobe(faiss.extract_index_ivf(top).nprobe,
                                                                                  nlist))

    @classmethod
    def split_file(cls, path: Path, outs: list[Path], progress: Callable[[int, int], None] | None = None
                   ) -> list[int]:
        return split_ivf(path, outs, progress)

    @classmethod
    def train_empty(cls, sample: np.ndarray, params: IvfParams, seed: int) -> faiss.Index:  # type: ignore[override]
        return train_empty_ivf(sample, params.nlist, params.nprobe, seed, params.codec, params.quantizer)

    @classmethod
    def params_for(cls, options: Mapping[str, Any], n_vectors: int, dim: int) -> IvfParams:
        """nlist by size (`auto_nlist`, cut for >= 39 training vectors per list) unless given, the codec given or
        the most precise fitting `memory_budget`, the graph quantizer from its nlist on, nprobe given or the
        default (calibration sets it after the build); the reasons logged and recorded in `nlist_reason`."""
        requested = options.get("nlist") or auto_nlist(n_vectors)
        nlist = effective_nlist(n_vectors, requested)
        reason = (f"--nlist {options.get('nlist')}" if options.get("nlist") else
                  f"by size: 4·sqrt({n_vectors}) rounded to a power of two")
        if nlist != requested:
            reason += f", cut to {nlist} for >= {MIN_POINTS_PER_LIST} training vectors per list"
        sample = min(n_vectors, TRAIN_POINTS_PER_LIST * nlist)
        log.info("IVF lists: nlist %d (%s); k-means on %d vectors", nlist, reason, sample)
        codec = options.get("codec")
        if codec is None:
            codec, why = codec_for_budget(n_vectors, dim, nlist, options.get("memory_budget"))
            if options.get("memory_budget") is not None:
                log.info("IVF codec %s (%s)", codec, why)
                reason += f"; codec {codec}: {why}"
        quantizer = quantizer_for(nlist)
        if quantizer != "flat":
            log.info("IVF quantizer: an HNSW graph over the %d centroids (a flat one reads every centroid per "
                     "query)", nlist)
            reason += "; lists found through an HNSW graph over the centroids"
        return IvfParams(nlist=nlist, nlist_requested=requested, codec=codec,
                         nprobe=clamp_nprobe(options.get("nprobe") or DEFAULT_NPROBE, nlist), nlist_reason=reason,
                         train_sample=sample, quantizer=quantizer)

    def __init__(self, index: faiss.Index, params: IvfParams) -> None:
        self._index = index
        self.params = params
        self._locator: ListLocator | None = None
        self._lock = threading.Lock()
        # found once: every FAISS call releases the GIL and waits to take it back, which under a loaded server's
        # other threads cost a search more than the call itself (py-spy at 10M, hybrid at 8 connections)
        self._ivf = faiss.extract_index_ivf(index)
        self._nlist = int(self._ivf.nlist)
        self._nprobe = self.params.nprobe = set_nprobe(index, params.nprobe)

    @property
    def nlist(self) -> int:
        return self._nlist

    @property
    def nprobe(self) -> int:  # the default, only set through `set_default`
        return self._nprobe

    def knob(self) -> tuple[str, int, int] | None:
        return ("nprobe", 1, self.nlist)

    def set_default(self, name: str, value: int) -> int:
        check_search_params(self.kind, {name: value})
        self._nprobe = self.params.nprobe = set_nprobe(self._index, value)
        return self._nprobe

    def defaults(self) -> dict[str, int]:
        return {"nprobe": self.nprobe}

    def _probe(self, search_params: Mapping[str, int] | None) -> int:
        given = params_for(search_params, self.kind)
        return clamp_nprobe(given.get("nprobe", self.nprobe), self.nlist)

    def search(self, queries: np.ndarray, k: int, *, exclude: Exclusion | None = None,
               search_params: Mapping[str, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The top k of each query at the asked (else the index's) nprobe. At the index's own nprobe, a query whose
        probed lists held fewer than k live vectors (FAISS pads with -1) is searched again with nprobe doubled, up to
        nlist, while the index holds more: such an answer comes back short only when the index itself is. An nprobe
        the caller sets is used as given (a sweep measures what it asks for)."""
        excluded = len(exclude) if exclude is not None else 0
        asked = params_for(search_params, self.kind)
        probe = clamp_nprobe(asked.get("nprobe", self.nprobe), self.nlist)
        if not search_params and not excluded:
            scores, ids = search(self._index, queries, k)
        else:
            scores, ids = self._search_at(queries, k, exclude, probe)
        want = min(k, self.ntotal - excluded)  # excluded ids are all in the index, or fewer are live: want less
        deepen = want > 0 and len(ids) > 0 and "nprobe" not in asked
        short = np.flatnonzero(ids[:, want - 1] < 0) if deepen else np.zeros(0, np.int64)
        while short.size and probe < self.nlist:
            probe = min(2 * probe, self.nlist)
            scores[short], ids[short] = self._search_at(queries[short], k, exclude, probe)
            short = short[ids[short, want - 1] < 0]
        return scores, ids

    def _search_at(self, queries: np.ndarray, k: int, exclude: Exclusion | None, nprobe: int
                   ) -> tuple[np.ndarray, np.ndarray]:
        sel = exclude.selector if exclude is not None and len(exclude) else None
        params = faiss.SearchParametersIVF(sel=sel, nprobe=nprobe)  # type: ignore[call-arg]
        return self._ivf.search(np.ascontiguousarray(queries, dtype=np.float32), k, params=params)

    def locator(self) -> ListLocator:
        with self._lock:  # built once, then shared: by `warm_filters` when serving, else by the first filtered search
            if self._locator is None:
                self._locator = ListLocator(self._index)
            return self._locator

    def prepare(self, ids: np.ndarray) -> IdFilter:
        return self.locator().prepare(ids)

    def warm_filters(self) -> None:
        self.locator()

    def with_codes(self, flt: IdFilter) -> IdFilter:
        """`flt` with its matches' codes gathered when scoring them all costs less than the filtered IVF search at
        the default nprobe (`exact_pays`), else in lists of their own where those spare most of that search's id
        checks (`own_lists_pay`); else `flt` itself. For a filter used again (the version's cache has it done on a
        thread of its own): copying the codes costs about two list walks, so a filter seen once is not worth it."""
        if flt.gathered is not None or flt.own is not None or not len(flt.ids):
            return flt
        locator = self.locator()
        if exact_pays(len(flt.ids), self.nprobe, self.ntotal, self._nlist, int(self._ivf.code_size)):
            if not locator.can_gather:
                return flt
            return dataclasses.replace(flt, gathered=locator.gather(np.searchsorted(locator.ids, flt.ids)))
        return self.with_own_lists(flt)

    def with_own_lists(self, flt: IdFilter) -> IdFilter:
        """`flt` with its matches in lists of their own where those spare most of the filtered IVF search's id
        checks (`own_lists_pay`), else `flt`: never exact, the same hits as `flt` at every probe (a shard's choice,
        whose merge must equal the merged index's search)."""
        if flt.own is not None or not own_lists_pay(len(flt.ids), self.ntotal, int(self._ivf.code_size)):
            return flt
        locator = self.locator()
        own = locator.own_lists(np.searchsorted(locator.ids, flt.ids))
        return flt if own is None else dataclasses.replace(flt, own=own)

    def filtered_search(self, queries: np.ndarray, k: int, flt: IdFilter, *,
                        search_params: Mapping[str, int] | None = None, ntotal: int | None = None,
                        n_match: int | None = None) -> tuple[np.ndarray, np.ndarray, bool]:
        """`filtered_search` at `filtered_nprobe` of the selectivity `n_match` / `ntotal` (default: this index's
        matches and vectors; a shard passes the whole version's)."""
        n_match = len(flt.ids) if n_match is None else n_match
        probe = filtered_nprobe(self._probe(search_params), n_match, ntotal or self.ntotal, self.nlist)
        return filtered_search(self._index, queries, k, flt, probe)

    def exact_search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return exact_search(self._index, queries, k)

    def stored_vectors(self) -> tuple[np.ndarray, np.ndarray]:
        return stored_vectors(self._index)

    def vectors_of(self, ids: np.ndarray) -> np.ndarray:
        return self.locator().vectors_of(ids)

    def sample_stored(self, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        return sample_stored(self._index, n, seed)

    def add(self, vectors: np.ndarray, ids: np.ndarray) -> None:
        self._index.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32), np.asarray(ids, dtype=np.int64))
        self._locator = None

    def remove(self, ids: np.ndarray) -> int:
        self._locator = None
        return remove_ids(self._index, ids)

    def memory_bytes(self) -> int:
        return memory_bytes(self._index)

    def written_lists(self) -> WrittenLists:
        """The overlay's written vectors go to this index's lists' centroids, probed with its nprobe."""
        return WrittenLists.sharing(self._index, self._probe)

    def save(self, path: Path) -> None:
        write_index(self._index, path)
