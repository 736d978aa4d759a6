"""Filtered search on shards (`ShardSearcher` as a Serve replica runs it, here in this process, no cluster): each
shard gets the whole version's matching ids and the number of lists to probe, and the merge of the shards'
answers equals the filtered search of the merged index at 50/10/1/0.1 % selectivity."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ray")

from indexer.runtime.faiss_index import (  # noqa: E402
    ListLocator,
    filtered_nprobe,
    filtered_search,
    read_merged,
    train_empty_ivf,
    write_index,
)
from service.engine.sharded import ShardSearcher, merge_top_k  # noqa: E402
from tests.indexer.runtime.test_filtered_search import DIM, NLIST, NPROBE, SELECTIVITIES, K, N, corpus  # noqa: E402


def test_merged_filtered_answers_of_two_shards_equal_the_merged_index(tmp_path: Path) -> None:
    docs, queries = corpus(seed=3)
    rng = np.random.default_rng(4)
    ids = rng.permutation(10 * N)[:N].astype(np.int64)
    paths = []
    for shard in range(2):  # the Ray build's layout: one trained quantizer, ids split by id % shards
        index = train_empty_ivf(docs, NLIST, NPROBE, seed=1234)
        rows = np.flatnonzero(ids % 2 == shard)
        index.add_with_ids(docs[rows], ids[rows])
        paths.append(tmp_path / f"shard-{shard}.faiss")
        write_index(index, paths[-1])
    shards = [ShardSearcher.func_or_class(str(p), NPROBE) for p in paths]  # the replica's class itself
    merged = read_merged(paths)
    assert merged.ntotal == N and merged.d == DIM
    locator = ListLocator(merged)
    for selectivity in SELECTIVITIES:
        matching = np.sort(rng.choice(ids, int(N * selectivity), replace=False))
        probe = filtered_nprobe(NPROBE, len(matching), N, NLIST)  # what ShardedIndex.search sends
        want_scores, want_ids, _ = filtered_search(merged, queries, K, locator.prepare(matching), probe)
        got_scores, got_ids = merge_top_k([s.search(queries, K, matching, probe) for s in shards], K)
        assert np.array_equal(got_ids, want_ids), selectivity
        assert np.allclose(got_scores, want_scores, atol=1e-5)
        assert np.isin(got_ids, matching).all()
    # unfiltered, as before
    got_scores, got_ids = merge_top_k([s.search(queries, K) for s in shards], K)
    assert np.array_equal(got_ids, merged.search(queries, K)[1])
