"""The PISA engine's forward index (`indexer.runtime.forward_index`) on a real built index: a filter's rows' postings
score every query exactly as the forward index does, to the bit, tombstones left out; the cache holds them by the
rows array itself, for as long as that array lives, within its bound in bytes; `_holds` is membership."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np

from indexer.runtime import forward_index
from indexer.runtime.forward_index import ForwardIndex, Query, RowPostings, RowPostingsCache
from indexer.runtime.lexical import build_lexical, lexical_info, open_lexical
from tests.indexer.runtime.test_lexical_pisa import _zipf_docs


def _forward(tmp_path: Path) -> tuple[ForwardIndex, int, int]:
    """A built PISA index's forward index, its rows and vocabulary size."""
    index = open_lexical(tmp_path, build_lexical(tmp_path, _zipf_docs(6, 2000), lexical_info(engine="pisa")))
    return index.forward, index.ntotal, len(index.words)  # type: ignore[attr-defined]


def test_a_filters_postings_score_as_the_forward_index_does(tmp_path: Path) -> None:
    forward, n, v = _forward(tmp_path)
    rng = np.random.default_rng(1)
    for size in (0, 1, 37, 500, n):
        rows = np.sort(rng.choice(n, size, replace=False)).astype(np.int64)
        postings = RowPostings.build(forward, rows)
        assert postings.owners.size == forward.n_entries(rows)
        for counts in ({}, {0: 1}, {0: 2, 3: 1, 17: 1}, {v - 1: 1, 5: 3}, {t: 1 for t in range(0, v, 3)}):
            query = Query.of(counts)
            want = forward.score_rows(query, rows)
            got = postings.score(query)
            assert got[1].tolist() == want[1].tolist() and got[0].tobytes() == want[0].tobytes(), (size, counts)
            excluded = np.sort(rng.choice(n, 300, replace=False)).astype(np.int64)
            kept = rows[~np.isin(rows, excluded)]
            got, want = postings.score(query, excluded), forward.score_rows(query, kept)
            assert got[1].tolist() == want[1].tolist() and got[0].tobytes() == want[0].tobytes(), (size, counts)


def test_the_cache_holds_postings_by_their_rows_array_while_it_lives_within_its_bytes(tmp_path: Path) -> None:
    forward, n, _ = _forward(tmp_path)
    a, b, c = (np.arange(i, n, 7, dtype=np.int64) for i in range(3))
    built = {id(x): RowPostings.build(forward, x) for x in (a, b, c)}
    size = max(p.nbytes for p in built.values())
    cache = RowPostingsCache(max_bytes=2 * size)
    cache.put(a, built[id(a)])
    assert cache.get(a) is built[id(a)] and cache.get(a.copy()) is None and cache.get(None) is None
    cache.put(b, built[id(b)])
    cache.get(a)  # a used last: b is the oldest
    cache.put(c, built[id(c)])
    assert cache.get(a) is not None and cache.get(b) is None and cache.get(c) is not None
    assert len(cache) == 2 and cache.held <= 2 * size
    del a
    gc.collect()
    assert len(cache) == 1 and cache.held == built[id(c)].nbytes  # freed with its rows array
    small = RowPostingsCache(max_bytes=size // 2)
    small.put(c, built[id(c)])
    assert small.get(c) is None and small.held == 0  # over the whole bound: not kept


def test_holds_is_membership_in_the_query_terms_by_passes_or_binary_search() -> None:
    """`_holds` (which forward-index entries are query terms) equals a membership test for few terms (a pass per
    term), many terms (a binary search per entry) and none."""
    rng = np.random.default_rng(2)
    tids = rng.integers(0, 500, 20_000).astype(np.int32)
    for n_terms in (0, 1, 3, forward_index.HOLDS_PASSES, forward_index.HOLDS_PASSES + 1, 200):
        terms = np.unique(rng.integers(0, 500, n_terms)).astype(np.int32)
        assert forward_index._holds(tids, terms).tolist() == np.isin(tids, terms).tolist(), n_terms
