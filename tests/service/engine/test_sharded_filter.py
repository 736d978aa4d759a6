"""Filtered search on shards: each shard gets the whole version's matching ids and the number of lists to probe,
and the merge of the shards' answers equals the filtered search of the merged index — at 50/10/1/0.1 %
selectivity with `ShardSearcher` in this process, and over HTTP from `python -m service sharded` on the
session's Ray for a corpus with metadata built with `indexer build --engine ray --shards 2`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ray")

from indexer.runtime.faiss.exact import stored_vectors  # noqa: E402
from indexer.runtime.faiss.files import read_merged, write_index  # noqa: E402
from indexer.runtime.faiss.filtered import ListLocator, filtered_nprobe, filtered_search  # noqa: E402
from indexer.runtime.faiss.training import train_empty_ivf  # noqa: E402
from indexer.runtime.layout import IndexRoot  # noqa: E402
from indexer.runtime.topk import merge_top_k  # noqa: E402
from indexer.runtime.version import IndexVersion  # noqa: E402
from service.engine.sharded import ShardSearcher  # noqa: E402
from tests.conftest import start_server, stop_server  # noqa: E402
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


def test_a_filter_used_again_on_a_shard_gets_its_own_lists_and_the_same_answers(tmp_path: Path) -> None:
    """A filter sent by its key and used again: each shard replica builds its matches' own lists on its own thread
    (`ShardSearcher._own_lists_later`), never codes gathered for exact search, so the merge of the shards still
    equals the merged index's filtered search, ids and scores, before and after."""
    import time

    docs, queries = corpus(seed=5)
    ids = np.arange(N, dtype=np.int64)
    paths = []
    for shard in range(2):
        index = train_empty_ivf(docs, NLIST, NPROBE, seed=1234)
        rows = np.flatnonzero(ids % 2 == shard)
        index.add_with_ids(docs[rows], ids[rows])
        paths.append(tmp_path / f"shard-{shard}.faiss")
        write_index(index, paths[-1])
    shards = [ShardSearcher.func_or_class(str(p), NPROBE) for p in paths]
    merged = read_merged(paths)
    matching = np.sort(np.random.default_rng(6).choice(ids, N // 10, replace=False))  # 10 %: the IVF scan
    probe = filtered_nprobe(NPROBE, len(matching), N, NLIST)
    want = filtered_search(merged, queries, K, ListLocator(merged).prepare(matching), probe)

    def merged_search() -> tuple[np.ndarray, np.ndarray]:
        return merge_top_k([s.search(queries, K, probe=probe, filter_key="ten", ids_ref=[matching]) for s in shards],
                           K)

    first = merged_search()
    assert not any(s.filters.get("ten").codes_tried for s in shards)
    again = merged_search()  # used again: the lists are built off this request
    for _ in range(500):
        if all(s.filters.get("ten").codes_tried for s in shards):
            break
        time.sleep(0.01)
    for s in shards:
        prepared = s.filters.get("ten").prepared
        assert prepared.own is not None and prepared.gathered is None and len(prepared.lists) > probe
    built = merged_search()
    for got in (first, again, built):
        assert np.array_equal(got[1], want[1]) and np.array_equal(got[0], want[0])


def test_sharded_service_filters_like_the_merged_index(ray_cluster: str, minilm_mean: Path, quora_file: Path,
                                                       tmp_path: Path) -> None:
    from indexer.build import BuildConfig
    from indexer.ray_build import RayOptions, build_on_ray
    from tests.service.test_filtered_search import FILTERS, QUERIES, corpus_rows

    rows = corpus_rows(quora_file, 600)
    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    root = tmp_path / "root"
    # nlist 600 // 39 = 15; nprobe 2 so that a 50 % filter takes the IVF path (probe 4) and a 1 % one goes exact
    build_on_ray(BuildConfig(model_dir=minilm_mean, data=str(data), root=root, threads=2, nprobe=2),
                 RayOptions(workers=2, shards=2, block_rows=128))
    merged = IndexVersion(IndexRoot(root).current_dir())
    srv = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(root), "STRATA_WATCH_INTERVAL_S": "0"},
                       args=("sharded", "--ray-address", ray_cluster), timeout=300)
    try:
        from indexer.runtime.encoder import OnnxEncoder

        vecs = OnnxEncoder(minilm_mean).encode(QUERIES)
        docs = merged.store.documents(stored_vectors(merged.index)[0].tolist())
        paths = []
        for flt in (FILTERS[0], FILTERS[2]):  # 50 %, 1 %
            prepared = merged.match(flt).prepared
            assert prepared is not None
            probe = filtered_nprobe(merged.nprobe, len(prepared.ids), merged.ntotal, merged.nlist)
            paths.append(len(prepared.lists) <= probe)
        assert paths == [False, True]  # the IVF path with the selector, and the exact one
        with srv.client() as c:
            for flt in FILTERS:
                _, want = merged.search(vecs, 10, merged.match(flt))
                r = c.post("/search", json={"queries": QUERIES, "top_k": 10, "filter": flt, "mode": "dense"})
                assert r.status_code == 200, r.text
                for res, row in zip(r.json()["results"], want, strict=True):
                    assert [h["id"] for h in res["hits"]] == [docs[i].ext_id for i in row.tolist() if i >= 0], flt
            none = c.post("/search", json={"query": QUERIES[0], "filter": {"colour": "red"}})  # held by no document
            assert none.status_code == 200 and none.json()["hits"] == []
        # lexical and hybrid under a filter (BM25 in the API process, dense on the shards): as one process serves
        local = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(root), "STRATA_WATCH_INTERVAL_S": "0"})
        try:
            for mode in ("lexical", "hybrid"):
                for flt in FILTERS:
                    body = {"queries": QUERIES, "top_k": 10, "filter": flt, "mode": mode}
                    got, want = (s.client().post("/search", json=body) for s in (srv, local))
                    assert got.status_code == want.status_code == 200, got.text
                    assert ([[h["id"] for h in res["hits"]] for res in got.json()["results"]]
                            == [[h["id"] for h in res["hits"]] for res in want.json()["results"]]), (mode, flt)
        finally:
            stop_server(local)
    finally:
        stop_server(srv)
        merged.close()
