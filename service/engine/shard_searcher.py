"""A shard replica of the sharded backend (`service.engine.sharded`): one IVF shard file in memory, behind a Ray
Serve deployment, answering (scores, ids) for a batch of query vectors, with or without a filter, with the written
documents of its shard (`shard_writes.ShardWrites`).

A filter comes with the number of lists to probe for the whole version's selectivity; the shard applies
`filtered_search`'s rule to its own lists, never codes gathered by its own counts (the merge of the shards must
equal the merged index's filtered search). A filter sent again by its key is cached here; used again, its matches
get lists of their own (`faiss.filtered.OwnLists`), built on the replica's own thread: the same hits at the same
probe, without walking the other documents' ids.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import ray
from ray import serve

from indexer.runtime.ann import KIND_SPECS, SHARDED_KIND
from indexer.runtime.faiss.devices import set_threads
from indexer.runtime.faiss.files import read_index
from indexer.runtime.faiss.filtered import filtered_search
from indexer.runtime.faiss.kinds import open_index
from indexer.runtime.filters import Node
from indexer.runtime.prepare_later import PrepareLater
from indexer.runtime.shard_writes import ShardWrites
from indexer.runtime.version import FilterCache, FilterMatch, IndexLoadError

log = logging.getLogger(__name__)

# CPUs reserved per shard replica: a search is ~0.1 ms, and during a swap two versions' shards are up at once.
SHARD_CPUS = 0.25
# A retired replica first sleeps this long before it counts its requests in flight (Serve's default: 2 s, in every
# `serve.delete`, one application after the other): only this backend's handles call it and they stop at the swap.
# In-flight requests are still drained (Serve's graceful_shutdown_timeout_s, 20 s, is kept).
DRAIN_LOOP_S = 0.2



@serve.deployment(ray_actor_options={"num_cpus": SHARD_CPUS}, graceful_shutdown_wait_loop_s=DRAIN_LOOP_S)
class ShardSearcher:
    """One IVF shard file in memory (an `AnnIndex` of the sharded kind); answers (scores, ids) for a batch of query
    vectors."""

    def __init__(self, path: str, nprobe: int, threads: int = 1, log_file: str | None = None) -> None:
        self.threads = threads
        try:
            index = read_index(path)
        except RuntimeError as exc:  # FAISS's error for truncated or foreign files: say which file, like the local one
            raise IndexLoadError(f"{path} is not a readable FAISS index: {str(exc).splitlines()[0]}") from exc
        try:
            self.index = open_index(index, SHARDED_KIND)
            self.nprobe = self.index.set_default("nprobe", nprobe)  # clamped to nlist, like every index Strata opens
        except (RuntimeError, ValueError) as exc:  # not an IVF index
            raise IndexLoadError(f"{path} is not an {KIND_SPECS[SHARDED_KIND].label} shard: "
                                 f"{str(exc).splitlines()[0]}") from exc
        self.filters = FilterCache()  # this shard's share of the filters it was sent, by their key
        self._later = PrepareLater("filter-lists")  # a filter used again: its matches' own lists
        self.writes = ShardWrites(Path(path), self.index, Path(log_file) if log_file else None)  # its share of them
        if (nice := os.nice(0)) > 0:
            log.warning("shard replica %s runs at nice %d (Ray's worker_niceness): beside normal-priority work its "
                        "searches get a fraction of a core; start the cluster's nodes with RAY_worker_niceness=0",
                        Path(path).name, nice)

    def search(self, vectors: np.ndarray, k: int, ids: np.ndarray | None = None, probe: int = 0,
               search_params: dict[str, int] | None = None, filter_key: str | None = None,
               ids_ref: list | None = None, seq: int = 0, node: Node | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The shard's top k (at `search_params`' nprobe if given); with a filter, among its ids only (a filter's
        matches over the whole version, most of them in other shards), probing `probe` lists or the lists that hold
        this shard's matches. The filter comes as `ids`, or as `filter_key` with `ids_ref` ([an ObjectRef of the
        ids], put once by the API process): the shard prepares its share once per key and keeps it (`filters`),
        so a repeated filter costs neither the ids' transfer nor their preparation. `seq`: the writes the answer
        must hold (the API's applied seq: `shard_writes`), `node` the filter for the written documents."""
        set_threads(self.threads)  # per thread in OpenMP, and Serve may call from any thread
        if ids is None and filter_key is None:
            got = self.writes.search(vectors, k, seq, search_params=search_params)
            return got if got is not None else self.index.search(vectors, k, search_params=search_params)
        match = self._prepared(ids, filter_key, ids_ref)
        assert match.prepared is not None
        if node is not None and (got := self.writes.search(vectors, k, seq, (match, probe, node))) is not None:
            return got
        # the lists' rule only, never codes gathered by this shard's own counts: the merge must equal the merged
        # index's filtered search at the version's `probe`
        scores, found, _ = filtered_search(self.index.faiss, vectors, k, match.prepared, probe)
        return scores, found

    def _prepared(self, ids: np.ndarray | None, filter_key: str | None, ids_ref: list | None) -> FilterMatch:
        if filter_key is None:
            assert ids is not None
            return FilterMatch(ids, self.index.prepare(ids))
        cached = self.filters.get(filter_key)
        if cached is None:
            if ids is None:
                assert ids_ref is not None, "a filter key comes with its ids or their ObjectRef"
                held = ids_ref[0]  # an ObjectRef (a Serve call); the array itself when called in process
                ids = np.asarray(ray.get(held) if isinstance(held, ray.ObjectRef) else held, dtype=np.int64)
            cached = FilterMatch(ids, self.index.prepare(ids), key=filter_key)
            self.filters.put(filter_key, cached)
        elif not cached.codes_tried:  # used again: its matches' own lists (the same hits), built off the request
            self._own_lists_later(filter_key, cached)
        return cached

    def _own_lists_later(self, key: str, cached: FilterMatch) -> None:
        def build() -> None:
            assert cached.prepared is not None
            try:
                prepared = self.index.with_own_lists(cached.prepared)
            except (MemoryError, OSError) as exc:  # no memory for them, or a mapped file's read failed
                log.warning("filter %s: its own lists were not built: %s", key[:200], exc)
                prepared = cached.prepared
            if self.filters.get(key) is cached:  # not evicted meanwhile
                self.filters.put(key, FilterMatch(cached.ids, prepared, key=key, codes_tried=True))

        self._later.submit(key, build)

    def vectors_of(self, ids: np.ndarray) -> np.ndarray:
        """The vectors under `ids`, all of this shard (`ShardedIndex.vectors_of`), as its lists' codes decode them."""
        return self.index.vectors_of(ids)

    def info(self) -> tuple[int, int]:
        return self.index.ntotal, self.index.dim
