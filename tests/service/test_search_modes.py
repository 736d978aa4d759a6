"""`/search` modes over real HTTP (uvicorn on 127.0.0.1, the real all-MiniLM-L6-v2 encoder, FAISS, SQLite and the
bm25s lexical index that `indexer build` writes beside the vectors): lexical mode is Lucene BM25 over the store's
texts and needs no encoder, hybrid is the reciprocal-rank (or convex) fusion of the two lists, filters are exact in
both, the response names the mode and its stages, /stats and /metrics count modes, bad parameters are 422s with a
reason, and a version built without a lexical index serves dense and refuses lexical/hybrid with a reason."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from indexer.quora import read_rows
from indexer.runtime.fusion import convex, rrf
from indexer.runtime.layout import IndexRoot
from indexer.runtime.lexical import Analyzer
from indexer.runtime.manifest import Manifest
from indexer.runtime.store import STORE, Store
from tests.conftest import Server, indexer_cli, start_server, stop_server
from tests.indexer.runtime.test_lexical import reference

N_DOCS = 400
QUERIES = ["How do I learn Python programming?", "What is the best way to lose weight fast?",
           "How can I invest in the share market in India?"]


@pytest.fixture(scope="module")
def rows(quora_file: Path) -> list[dict[str, Any]]:
    """Distinct Quora questions (rows < 300,000): integer qids, every fourth a string id; metadata `bucket`."""
    seen: dict[str, int] = {}
    for row in read_rows(quora_file):
        for qid, text in ((row.qid1, row.question1), (row.qid2, row.question2)):
            if text.strip() and text not in seen and len(seen) < N_DOCS:
                seen[text] = qid
        if len(seen) >= N_DOCS:
            break
    return [{"id": qid if n % 4 else f"s{qid}", "text": text, "bucket": n % 5}
            for n, (text, qid) in enumerate(seen.items())]


def build(tmp: Path, rows: list[dict[str, Any]], model: Path, *extra: str) -> Path:
    data = tmp / "docs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    root = tmp / "root"
    r = indexer_cli("build", "--root", str(root), "--data", str(data), "--model", str(model), "--nlist", "8",
                    "--nprobe", "8", "--threads", "1", *extra, timeout=600)
    assert r.returncode == 0, r.stderr
    return root


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, rows: list[dict[str, Any]], minilm_mean: Path) -> Path:
    return build(tmp_path_factory.mktemp("modes"), rows, minilm_mean)


@pytest.fixture(scope="module")
def served(root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("modes-server"), {"STRATA_INDEX_ROOT": str(root),
                                                                 "STRATA_WATCH_INTERVAL_S": "0"})
    yield srv
    stop_server(srv)


def search(c: httpx.Client, **body: Any) -> dict[str, Any]:
    r = c.post("/search", json={"top_k": 10} | body)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture(scope="module")
def fids(root: Path, rows: list[dict[str, Any]]) -> dict[Any, int]:
    """External id → FAISS id in the served version (the server breaks ties by FAISS id)."""
    store = Store(IndexRoot(root).current_dir() / STORE)
    try:
        return store.ids_of([r["id"] for r in rows])
    finally:
        store.close()


def bm25_reference(rows: list[dict[str, Any]], fids: dict[Any, int], query: str, keep: Any = None
                   ) -> list[tuple[Any, float]]:
    """Lucene BM25 by hand over every document (k1 0.9, b 0.4, English analysis), best first, ties by FAISS id."""
    by_fid = {fids[r["id"]]: r for r in rows}
    scores = reference(query, [(f, r["text"]) for f, r in by_fid.items()], 0.9, 0.4, Analyzer("english", "english"))
    ranked = sorted((p for p in scores.items() if keep is None or keep(by_fid[p[0]])), key=lambda p: (-p[1], p[0]))
    return [(by_fid[f]["id"], s) for f, s in ranked]


def assert_ranked(hits: list[dict[str, Any]], want: list[tuple[Any, float]], k: int) -> None:
    """`hits` are the best k of `want` (id, score) by score: equal scores, every hit's own score right, and every
    document scoring above the last hit present (documents tied at the cut, in float32, may be either)."""
    assert len(hits) == min(k, len(want))
    assert [h["score"] for h in hits] == pytest.approx([sc for _, sc in want[:k]], rel=1e-5)
    score_of = dict(want)
    assert all(h["score"] == pytest.approx(score_of[h["id"]], rel=1e-5) for h in hits)
    if hits:
        cut = hits[-1]["score"] * (1 + 1e-5)
        assert {i for i, sc in want if sc > cut} <= {h["id"] for h in hits}


def as_list(hits: list[dict[str, Any]], fids: dict[Any, int]) -> tuple[np.ndarray, np.ndarray]:
    """An API answer as the (scores, FAISS ids) list the fusion takes."""
    return (np.array([h["score"] for h in hits], np.float32), np.array([fids[h["id"]] for h in hits], np.int64))


def test_the_build_records_the_lexical_index_and_the_default_mode(root: Path) -> None:
    manifest = Manifest.load(IndexRoot(root).current_dir())
    assert (manifest.lexical is not None
            and (manifest.lexical.stemmer, manifest.lexical.stopwords) == ("english", "english"))
    assert ((manifest.lexical.k1, manifest.lexical.b, manifest.lexical.n_docs) == (0.9, 0.4, N_DOCS)
            and manifest.lexical.engine == "bm25s")
    assert (IndexRoot(root).current_dir() / "lexical" / "rows.npy").is_file()
    assert manifest.default_mode is None and manifest.search_mode() == "hybrid"


def test_each_mode_reports_what_ran_and_its_stages(served: Server) -> None:
    with served.client() as c:
        default = search(c, query=QUERIES[0])
        assert default["mode"] == "hybrid" and len(default["hits"]) == 10
        st = default["stages"]
        assert st["encode_ms"] > 0 and st["dense_ms"] > 0 and st["lexical_ms"] > 0 and st["fusion_ms"] > 0
        lexical = search(c, query=QUERIES[0], mode="lexical")
        assert lexical["mode"] == "lexical" and lexical["encode_ms"] == 0
        assert lexical["stages"]["encode_ms"] == lexical["stages"]["dense_ms"] == lexical["stages"]["fusion_ms"] == 0
        dense = search(c, query=QUERIES[0], mode="dense")
        assert dense["mode"] == "dense" and dense["stages"]["lexical_ms"] == dense["stages"]["fusion_ms"] == 0
        assert dense["hits"][0]["score"] <= 1.0 and lexical["hits"][0]["score"] > 1.0  # cosine vs BM25


def test_lexical_mode_is_lucene_bm25_over_the_documents(served: Server, rows: list[dict[str, Any]],
                                                        fids: dict[Any, int]) -> None:
    with served.client() as c:
        body = search(c, queries=QUERIES, mode="lexical")
    for q, res in zip(QUERIES, body["results"], strict=True):
        assert_ranked(res["hits"], bm25_reference(rows, fids, q), 10)


def test_lexical_mode_needs_no_encoder(served: Server) -> None:
    def encoded(c: httpx.Client) -> float:
        m = re.search(r'strata_texts_encoded_total\{endpoint="/search"\} (\S+)', c.get("/metrics").text)
        return float(m.group(1)) if m else 0.0

    with served.client() as c:
        before = encoded(c)
        for q in QUERIES:
            search(c, query=q, mode="lexical")
        assert encoded(c) == before
        search(c, query=QUERIES[0], mode="dense")
        assert encoded(c) == before + 1


@pytest.mark.parametrize("flt", [{"bucket": 2}, {"bucket": {"in": [0, 4]}}])
def test_filters_are_exact_in_lexical_and_hybrid(served: Server, rows: list[dict[str, Any]], fids: dict[Any, int],
                                                 flt: dict[str, Any]) -> None:
    allowed = {2} if flt == {"bucket": 2} else {0, 4}
    by_fid = {f: e for e, f in fids.items()}

    def keep(r: dict[str, Any]) -> bool:
        return r["bucket"] in allowed

    with served.client() as c:
        for q in QUERIES:
            lex = search(c, query=q, mode="lexical", filter=flt, top_k=10)["hits"]
            want = bm25_reference(rows, fids, q, keep)
            # exact: the best of the matching documents, as many as match with a score > 0 (up to top_k)
            assert_ranked(lex, want, 10)
            assert all(h["metadata"]["bucket"] in allowed for h in lex)
            # hybrid: the default fusion (convex, alpha 0.5) of the filtered dense and lexical top 100, every hit
            # matching
            dense100 = search(c, query=q, mode="dense", filter=flt, top_k=100)["hits"]
            lex100 = search(c, query=q, mode="lexical", filter=flt, top_k=100)["hits"]
            hyb = search(c, query=q, mode="hybrid", filter=flt, top_k=10)["hits"]
            assert all(h["metadata"]["bucket"] in allowed for h in hyb) and len(hyb) == 10
            _, fused = convex(as_list(dense100, fids), as_list(lex100, fids), 10, 0.5)
            assert [h["id"] for h in hyb] == [by_fid[i] for i in fused.tolist()]


def test_rrf_k_and_convex_alpha_change_the_fusion(served: Server, fids: dict[Any, int]) -> None:
    by_fid = {f: e for e, f in fids.items()}
    with served.client() as c:
        q = QUERIES[1]
        dense = search(c, query=q, mode="dense", top_k=100)["hits"]
        lex = search(c, query=q, mode="lexical", top_k=100)["hits"]
        lists = [as_list(hs, fids) for hs in (dense, lex)]
        for k in (1, 60, 1000):
            hyb = search(c, query=q, mode="hybrid", fusion="rrf", k=k)["hits"]
            scores, ids = rrf(lists, 10, k)
            assert [h["id"] for h in hyb] == [by_fid[i] for i in ids.tolist()]
            assert [h["score"] for h in hyb] == pytest.approx(scores.tolist(), rel=1e-5)
        for alpha in (0.0, 0.3, 1.0):
            hyb = search(c, query=q, mode="hybrid", fusion="convex", alpha=alpha)["hits"]
            scores, ids = convex(lists[0], lists[1], 10, alpha)
            assert [h["id"] for h in hyb] == [by_fid[i] for i in ids.tolist()], alpha
        # the default fusion is convex with alpha 0.5 (bench/results/beir-average-20261125T1550Z.md); `k` alone is rrf
        scores, ids = convex(lists[0], lists[1], 10, 0.5)
        for body in ({}, {"alpha": 0.5}, {"fusion": "convex"}):
            hyb = search(c, query=q, mode="hybrid", **body)["hits"]
            assert [h["id"] for h in hyb] == [by_fid[i] for i in ids.tolist()], body
            assert [h["score"] for h in hyb] == pytest.approx(scores.tolist(), rel=1e-5), body
        assert [h["id"] for h in search(c, query=q, mode="hybrid", k=1000)["hits"]] == \
            [by_fid[i] for i in rrf(lists, 10, 1000)[1].tolist()]
        # the extremes are the single lists
        assert [h["id"] for h in search(c, query=q, mode="hybrid", fusion="convex", alpha=1.0, top_k=5)["hits"]] == \
            [h["id"] for h in dense[:5]]
        assert [h["id"] for h in search(c, query=q, mode="hybrid", fusion="convex", alpha=0.0, top_k=5)["hits"]] == \
            [h["id"] for h in lex[:5]]


def test_hybrid_takes_the_vector_searchs_parameters(served: Server, fids: dict[Any, int]) -> None:
    """nprobe reaches the dense half of a hybrid search (one list of 8 holds fewer than its 100 candidates);
    mode lexical runs no vector search, so it takes none, and a parameter of another index kind is refused."""
    by_fid = {f: e for e, f in fids.items()}
    with served.client() as c:
        q = QUERIES[0]
        dense1 = search(c, query=q, mode="dense", top_k=100, nprobe=1)["hits"]
        assert len(dense1) < len(search(c, query=q, mode="dense", top_k=100)["hits"]) == 100
        lex = search(c, query=q, mode="lexical", top_k=100)["hits"]
        hyb = search(c, query=q, mode="hybrid", nprobe=1)["hits"]
        _, fused = convex(as_list(dense1, fids), as_list(lex, fids), 10, 0.5)
        assert [h["id"] for h in hyb] == [by_fid[i] for i in fused.tolist()]
        r = c.post("/search", json={"query": q, "mode": "lexical", "nprobe": 2})
        assert r.status_code == 422 and "mode 'lexical' runs none" in r.text, r.text
        r = c.post("/search", json={"query": q, "mode": "hybrid", "ef_search": 64})
        assert r.status_code == 422 and "ef_search" in r.text and "ivf" in r.text, r.text


@pytest.mark.parametrize(("body", "reason"), [
    ({"mode": "sparse"}, "'dense', 'lexical' or 'hybrid'"),
    ({"mode": "dense", "fusion": "rrf"}, "apply to mode 'hybrid', not 'dense'"),
    ({"mode": "lexical", "alpha": 0.5}, "apply to mode 'hybrid', not 'lexical'"),
    ({"mode": "hybrid", "fusion": "rrf", "alpha": 0.5}, "fusion 'rrf' takes 'k'"),
    ({"mode": "hybrid", "k": 10, "alpha": 0.5}, "fusion 'rrf' takes 'k'"),
    ({"mode": "hybrid", "fusion": "convex", "k": 10}, "fusion 'convex' takes 'alpha'"),
    ({"mode": "hybrid", "fusion": "convex", "alpha": 1.5}, "less than or equal to 1"),
    ({"mode": "hybrid", "k": 0}, "greater than 0"),
    ({"mode": "hybrid", "fusion": "max"}, "'rrf' or 'convex'"),
])
def test_bad_parameters_are_422_with_a_reason(served: Server, body: dict[str, Any], reason: str) -> None:
    with served.client() as c:
        r = c.post("/search", json={"query": QUERIES[0]} | body)
    assert r.status_code == 422 and reason in r.text, r.text


def test_stats_and_metrics_show_the_modes(served: Server) -> None:
    with served.client() as c:
        for mode in ("lexical", "hybrid", "dense"):
            search(c, query=QUERIES[2], mode=mode)
        stats = c.get("/stats").json()
        metrics = c.get("/metrics").text
    assert stats["index"]["default_mode"] == "hybrid" and stats["index"]["lexical"]["stemmer"] == "english"
    assert all(stats["windows"][0]["modes"][m] >= 1 for m in ("dense", "lexical", "hybrid"))
    for mode in ("dense", "lexical", "hybrid"):
        assert re.search(rf'strata_searches_total\{{mode="{mode}"\}} [1-9]', metrics), mode
    assert 'strata_search_stage_seconds_count{mode="hybrid",stage="fusion"}' in metrics
    assert 'stage="encode"' not in "".join(line for line in metrics.splitlines() if 'mode="lexical"' in line)


def test_a_version_without_a_lexical_index_serves_dense_and_refuses_lexical(
        tmp_path: Path, rows: list[dict[str, Any]], minilm_mean: Path) -> None:
    root = build(tmp_path, rows[:60], minilm_mean, "--no-lexical")
    manifest = Manifest.load(IndexRoot(root).current_dir())
    assert manifest.lexical is None and manifest.search_mode() == "dense"
    assert not (IndexRoot(root).current_dir() / "lexical").exists()
    srv = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(root), "STRATA_WATCH_INTERVAL_S": "0"})
    try:
        with srv.client() as c:
            assert search(c, query=QUERIES[0])["mode"] == "dense"
            for mode in ("lexical", "hybrid"):
                r = c.post("/search", json={"query": QUERIES[0], "mode": mode})
                assert r.status_code == 422 and "was built without one" in r.text, r.text
            assert c.get("/stats").json()["index"]["lexical"] is None
    finally:
        stop_server(srv)


def test_build_refuses_bad_lexical_settings_before_any_work(tmp_path: Path, rows: list[dict[str, Any]],
                                                            minilm_mean: Path) -> None:
    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows[:20]), encoding="utf-8")
    for extra, reason in ((["--lexical-stemmer", "klingon"], "unknown stemmer 'klingon'"),
                          (["--no-lexical", "--default-mode", "hybrid"], "--default-mode hybrid needs a lexical"),
                          (["--bm25-b", "2"], "b must be in [0, 1]")):
        r = indexer_cli("build", "--root", str(tmp_path / "root"), "--data", str(data), "--model", str(minilm_mean),
                        *extra)
        assert r.returncode != 0 and reason in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert not (tmp_path / "root" / "versions").exists() or not any((tmp_path / "root" / "versions").iterdir())


def test_default_mode_is_a_build_option(tmp_path: Path, rows: list[dict[str, Any]], minilm_mean: Path) -> None:
    root = build(tmp_path, rows[:60], minilm_mean, "--default-mode", "lexical", "--lexical-stemmer", "none")
    manifest = Manifest.load(IndexRoot(root).current_dir())
    assert manifest.default_mode == "lexical" and manifest.lexical is not None and manifest.lexical.stemmer == "none"
    srv = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(root), "STRATA_WATCH_INTERVAL_S": "0"})
    try:
        with srv.client() as c:
            body = search(c, query="learning")
            assert body["mode"] == "lexical" and body["encode_ms"] == 0
            # no stemming: "learning" does not match "learn"
            assert all("learning" in h["text"].lower() for h in body["hits"])
            # the version's default mode is lexical: a vector search parameter is refused, not ignored
            r = c.post("/search", json={"query": "learning", "nprobe": 2})
            assert r.status_code == 422 and "runs none" in r.text and '"nprobe"' in r.text, r.text
    finally:
        stop_server(srv)
