"""Filtered search in FAISS (`faiss.filtered.filtered_search`): the hits are those of the same index search
restricted to the matching documents, and brute force over them whenever the search goes exact — at 50 %, 10 %,
1 % and 0.1 % selectivity, for both codecs and both kinds of ID selector (bitmap, hash set)."""

from __future__ import annotations

import dataclasses

import faiss
import numpy as np
import pytest

from indexer.runtime.faiss.exact import stored_vectors
from indexer.runtime.faiss.filtered import (
    ListLocator,
    by_id,
    exact_pays,
    filtered_nprobe,
    filtered_search,
    own_lists_pay,
)
from indexer.runtime.faiss.ivf import IvfIndex
from indexer.runtime.faiss.training import build_ivf, new_ivf

N, DIM, NLIST, NPROBE, K = 20_000, 32, 64, 4, 10  # 64 lists need >= 39 × 64 = 2,496 training vectors
SELECTIVITIES = (0.5, 0.1, 0.01, 0.001)


def corpus(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Clustered unit vectors (IVF's use case: random uniform ones have no neighbourhoods) and queries near them."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((200, DIM)).astype(np.float32)
    docs = centers[rng.integers(0, 200, N)] + 0.5 * rng.standard_normal((N, DIM)).astype(np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    queries = docs[rng.integers(0, N, 40)] + 0.3 * rng.standard_normal((40, DIM)).astype(np.float32)
    return docs, queries / np.linalg.norm(queries, axis=1, keepdims=True)


def brute_force(index: object, queries: np.ndarray, matching: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact top k over the matching documents' vectors as the index holds them (fp16 codes decoded)."""
    ids, vecs = stored_vectors(index)
    keep = np.isin(ids, matching)
    ids, vecs = ids[keep], vecs[keep]
    scores = queries @ vecs.T
    order = np.argsort(-scores, axis=1, kind="stable")[:, :K]
    return np.take_along_axis(scores, order, 1), ids[order]


def recall_at_k(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.mean([len(set(g) & set(w)) / K for g, w in zip(got.tolist(), want.tolist(), strict=True)]))


def assert_same_hits(got: tuple[np.ndarray, np.ndarray], want: tuple[np.ndarray, np.ndarray]) -> None:
    (gd, gi), (wd, wi) = got, want
    assert np.allclose(gd, wd, atol=1e-4)
    # ids equal except where two documents tie within float rounding (then their order may differ)
    differ = gi != wi
    assert np.all(np.abs(gd[differ] - wd[differ]) < 1e-4), "different documents at different scores"
    assert differ.mean() < 0.01


@pytest.mark.parametrize("codec", ["SQfp16", "Flat"])
@pytest.mark.parametrize("id_kind", ["qid", "string"])
def test_filtered_search_equals_brute_force_and_the_restricted_index(codec: str, id_kind: str) -> None:
    docs, queries = corpus()
    rng = np.random.default_rng(1)
    # "qid": integer ids (a bitmap selector); "string": FAISS ids from 2^62 as string ids get (a hash set)
    base = 7 if id_kind == "qid" else 1 << 62
    ids = (base + 3 * rng.permutation(N)).astype(np.int64)
    index, _, _ = build_ivf(docs, ids, NLIST, NPROBE, codec=codec)
    locator = ListLocator(index)
    # the unfiltered search's recall@10 against brute force: what the filtered ones are held to
    _, unfiltered = index.search(queries, K)
    baseline = recall_at_k(unfiltered, brute_force(index, queries, ids)[1])
    went_exact = {}
    for selectivity in SELECTIVITIES:
        matching = np.sort(rng.choice(ids, int(N * selectivity), replace=False))
        flt = locator.prepare(matching)
        assert np.array_equal(flt.ids, matching)
        want = brute_force(index, queries, matching)

        # every list probed: the selector inside the scan loses nothing, at any selectivity
        scores, got, _ = filtered_search(index, queries, K, flt, NLIST)
        assert_same_hits((scores, got), want)
        assert np.isin(got, matching).all()

        # the matches' codes gathered and scored exactly: brute force, with no list walked
        gathered = locator.prepare(matching, gather=lambda n: True)
        assert gathered.gathered is not None and len(gathered.gathered.ids) == len(matching)
        scores, got, exact = filtered_search(index, queries, K, gathered, NPROBE)
        assert exact
        assert_same_hits((scores, got), want)

        # the serving rule
        probe = filtered_nprobe(NPROBE, len(matching), N, NLIST)
        scores, got, exact = filtered_search(index, queries, K, flt, probe)
        went_exact[selectivity] = exact
        assert np.isin(got[got >= 0], matching).all()
        if exact:
            assert_same_hits((scores, got), want)
        else:  # what the same IVF search returns on an index that holds only the matching documents
            restricted = new_ivf(DIM, NLIST, codec, seed=0)
            restricted.quantizer.add(index.quantizer.reconstruct_n(0, NLIST))
            restricted.is_trained = True
            rows = np.flatnonzero(np.isin(ids, matching))
            restricted.add_with_ids(docs[rows], ids[rows])
            restricted.nprobe = probe
            r_scores, r_ids = restricted.search(queries, K)
            assert np.array_equal(got, r_ids) and np.allclose(scores, r_scores, atol=1e-5)
            # and nprobe grew with the selectivity, so the result is as close to brute force as unfiltered
            assert recall_at_k(got, want[1]) >= baseline - 0.03, (selectivity, recall_at_k(got, want[1]), baseline)
    # small matching sets sit in few lists: searched exactly; half the corpus is not
    assert went_exact == {0.5: False, 0.1: False, 0.01: True, 0.001: True}


@pytest.mark.parametrize("kind", ["rows", "rows with gaps", "string ids", "repeats"])
def test_the_locator_orders_ids_as_a_sort_does(kind: str) -> None:
    """`by_id` places a build's row ids by scatter (linear time), and sorts the rest: the same arrays either way."""
    rng = np.random.default_rng(3)
    ids = {"rows": rng.permutation(5000), "rows with gaps": rng.permutation(9000)[:5000],
           "string ids": (1 << 62) + rng.permutation(5000), "repeats": rng.integers(0, 3000, 5000)}[kind]
    ids = ids.astype(np.int64)
    lists, offsets = rng.integers(0, 64, len(ids)).astype(np.int32), rng.integers(0, 99, len(ids)).astype(np.int32)
    order = np.argsort(ids, kind="stable")
    got = by_id(ids, lists, offsets)
    for have, want in zip(got, (ids, lists, offsets), strict=True):
        assert np.array_equal(have, want[order])


def test_fewer_matches_than_k_and_ids_the_index_does_not_hold() -> None:
    docs, queries = corpus()
    ids = np.arange(N, dtype=np.int64)
    index, _, _ = build_ivf(docs, ids, NLIST, NPROBE)
    locator = ListLocator(index)
    flt = locator.prepare(np.array([42, 7, 7, 99_999_999, 1234]))  # unsorted, repeated, one unknown id
    assert flt.ids.tolist() == [7, 42, 1234]
    scores, got, exact = filtered_search(index, queries, K, flt, filtered_nprobe(NPROBE, 3, N, NLIST))
    assert exact and sorted(got[0, :3].tolist()) == [7, 42, 1234] and (got[:, 3:] == -1).all()
    assert np.allclose(scores[:, :3], np.sort(queries @ docs[[7, 42, 1234]].T, axis=1)[:, ::-1], atol=1e-3)
    nothing = locator.prepare(np.array([99_999_999]))
    scores, got, _ = filtered_search(index, queries, K, nothing, NPROBE)
    assert (got == -1).all()


def test_the_search_is_chosen_by_the_filters_cardinality() -> None:
    """Few matches: gathered and scored exactly; many: the IVF scan with the selector (nothing gathered)."""
    # at 1M vectors, 4,096 lists, nprobe 49, fp16 384-d: 1 % and 0.1 % are gathered, 10 % and 50 % are not
    assert [exact_pays(int(1e6 * s), 49, 1_000_000, 4096, 768) for s in SELECTIVITIES] == [False, False, True, True]
    assert not exact_pays(200_000, 1, 10_000_000, 16_384, 768)  # over GATHER_MAX_BYTES of codes: never gathered
    docs, queries = corpus()
    ids = np.arange(N, dtype=np.int64)
    from indexer.runtime.ann import IvfParams

    index = IvfIndex(build_ivf(docs, ids, NLIST, 1)[0], IvfParams(nlist=NLIST, nlist_requested=NLIST, nprobe=1))
    # at nprobe 1, 10,000 of 20,000: nothing pays; 2,000: the matches' own lists (`own_lists_pay`); 200: gathered
    for n, made in ((10_000, None), (2_000, "own"), (200, "gathered")):
        first = index.prepare(np.arange(0, 2 * n, 2, dtype=np.int64))
        assert first.gathered is None and first.own is None  # a filter seen once walks the lists
        flt = index.with_codes(first)  # used again
        assert (flt.gathered is not None) == (made == "gathered") and (flt.own is not None) == (made == "own")
        assert (flt is first) == (made is None) and index.with_codes(flt) is flt  # done once
        assert flt.nbytes >= flt.ids.nbytes + (0 if made is None else n * DIM * 2)
        scores, got, exact = index.filtered_search(queries, K, flt)
        assert exact == (made == "gathered") and np.isin(got[got >= 0], flt.ids).all()
        if made == "own":  # the same hits as the selector's search of the whole index
            want = index.filtered_search(queries, K, first)
            assert np.array_equal(got, want[1]) and np.array_equal(scores, want[0])


@pytest.mark.parametrize("codec", ["SQfp16", "Flat", "SQ8"])
@pytest.mark.parametrize("id_kind", ["qid", "string"])
def test_a_filters_own_lists_give_the_selector_searchs_hits_exactly(codec: str, id_kind: str) -> None:
    """A filter's matches copied into lists of their own (`ListLocator.own_lists`) over the index's quantizer: at
    every nprobe the search returns the selector-filtered search's ids and scores bit for bit (the same lists
    probed, the same codes scored; SQ8 codes of residuals too), and holds every match once, in its own list."""
    docs, queries = corpus(7)
    rng = np.random.default_rng(8)
    base = 7 if id_kind == "qid" else 1 << 62
    ids = (base + 3 * rng.permutation(N)).astype(np.int64)
    index, _, _ = build_ivf(docs, ids, NLIST, NPROBE, codec=codec)
    locator = ListLocator(index)
    for selectivity in (0.1, 0.01):
        matching = np.sort(rng.choice(ids, int(N * selectivity), replace=False))
        flt = locator.prepare(matching)
        own = locator.own_lists(np.searchsorted(locator.ids, flt.ids))
        assert own is not None and own.index.ntotal == len(matching)
        held = np.concatenate([faiss.rev_swig_ptr(own.index.invlists.get_ids(lst), own.index.invlists.list_size(lst))
                               for lst in range(NLIST) if own.index.invlists.list_size(lst)])
        assert np.array_equal(np.sort(held), matching)
        with_own = dataclasses.replace(flt, own=own)
        assert with_own.nbytes >= flt.nbytes + len(matching) * own.index.code_size
        for probe in (1, NPROBE, 3 * NPROBE):
            if len(flt.lists) <= probe:
                continue  # that search goes exact, over the lists holding a match
            want = filtered_search(index, queries, K, flt, probe)
            got = filtered_search(index, queries, K, with_own, probe)
            assert not got[2] and np.array_equal(got[1], want[1]) and np.array_equal(got[0], want[0])


def test_own_lists_pay_where_the_id_checks_are_most_of_the_scan() -> None:
    assert own_lists_pay(100_000, 10_000_000, 768)  # 1 % of 10M: 75 MiB of fp16 codes
    assert own_lists_pay(125_000, 1_000_000, 768)  # 1/8: the id checks still half the scan
    assert not own_lists_pay(125_001, 1_000_000, 768)
    assert not own_lists_pay(200_000, 10_000_000, 768)  # over GATHER_MAX_BYTES
    assert not own_lists_pay(0, 1_000, 768)


def test_filtered_nprobe_grows_as_the_selectivity_falls() -> None:
    assert filtered_nprobe(20, 100_000, 100_000, 1024) == 20  # everything matches: the unfiltered nprobe
    assert filtered_nprobe(20, 50_000, 100_000, 1024) == 40
    assert filtered_nprobe(20, 10_000, 100_000, 1024) == 200
    assert filtered_nprobe(20, 1_000, 100_000, 1024) == 1024  # clamped to nlist


def test_filter_cache_is_an_lru_bounded_in_entries_and_bytes() -> None:
    from indexer.runtime.version import FilterCache, FilterMatch

    cache = FilterCache(max_entries=2, max_bytes=10 * 16)  # ten ids (8 bytes each, and 8 for their lexical rows)
    key = FilterCache.key
    assert key({"a": 1, "b": {"in": [1, 2]}}) == key({"b": {"in": [1, 2]}, "a": 1})  # key order does not matter
    assert len({key({"a": 1}), key({"a": 1.0}), key({"a": True}), key({"a": "1"})}) == 4  # types do
    m = {name: FilterMatch(np.arange(n, dtype=np.int64)) for name, n in (("a", 3), ("b", 3), ("c", 3), ("big", 11))}
    cache.put("a", m["a"])
    cache.put("b", m["b"])
    assert cache.get("a") is m["a"]  # a is now the most recent
    cache.put("c", m["c"])  # over 2 entries: b, the least recent, goes
    assert cache.get("b") is None and cache.get("a") is m["a"] and cache.get("c") is m["c"]
    cache.put("big", m["big"])  # more bytes than the whole cache may hold: not kept, nothing evicted for it
    assert cache.get("big") is None and cache.get("a") is m["a"]
    cache.put("d", FilterMatch(np.arange(8, dtype=np.int64)))  # 3 + 3 + 8 > 10 ids' bytes: the oldest go until it fits
    assert cache.get("a") is None and cache.get("c") is None and cache.get("d") is not None


@pytest.mark.parametrize("id_kind", ["qid", "string"])
def test_a_filters_selector_is_built_by_its_first_dense_search_and_counted_before(id_kind: str) -> None:
    """A prepared filter builds no ID selector until a vector search needs one (a filter only lexical searches use
    never builds it); the first search builds it once, later ones reuse it, a filtered copy (`with_codes`) shares it,
    and the memory counted for it is the same before and after (a cache's bound holds from the start)."""
    import dataclasses

    docs, queries = corpus(5)
    base = 7 if id_kind == "qid" else 1 << 62
    ids = (base + 3 * np.arange(N)).astype(np.int64)
    index, _, _ = build_ivf(docs, ids, NLIST, NPROBE)
    matching = np.sort(np.random.default_rng(6).choice(ids, N // 100, replace=False))
    flt = ListLocator(index).prepare(matching)
    counted = flt.nbytes
    assert not flt._built  # prepared: no selector yet
    copy = dataclasses.replace(flt, gathered=None)
    first = filtered_search(index, queries, K, flt, NLIST)
    assert len(flt._built) == 1 and flt.selector is flt._built[0][0] and copy.selector is flt.selector
    assert flt.nbytes == counted
    again = filtered_search(index, queries, K, copy, NLIST)
    assert len(flt._built) == 1 and np.array_equal(first[1], again[1])
    assert_same_hits(first[:2], brute_force(index, queries, matching))
    assert ListLocator(index).prepare(np.zeros(0, np.int64)).selector is None  # nothing matches: no selector
