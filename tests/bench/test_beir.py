"""bench/beir.py, bench/bm25_libs.py and bench/beir_data.py on small real inputs: fusion arithmetic, metrics
cross-checked against pytrec_eval, the bootstrap interval, both BM25 libraries, and the dataset checks."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from bench import beir_data
from bench.beir import (
    EvalData,
    convex,
    drop_identical,
    load_dataset,
    mean_pct,
    paired_ci,
    per_query_metrics,
    rrf,
)
from bench.bm25_libs import Bm25sRetriever, TantivyRetriever


def _ds(qrels: list[dict[str, int]]) -> EvalData:
    n = len(qrels)
    return EvalData("t", Path("."), [], [], [f"q{i}" for i in range(n)], [""] * n, qrels)


def test_rrf_sums_reciprocal_ranks_with_k_60() -> None:
    fused = rrf([[("a", 9.0), ("b", 8.0)]], [[("b", 3.0), ("c", 2.0)]])[0]
    got = dict(fused)
    assert got["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert got["a"] == pytest.approx(1 / 61)
    assert got["c"] == pytest.approx(1 / 62)
    assert [d for d, _ in fused] == ["b", "a", "c"]


def test_convex_min_max_normalises_each_list_and_scores_missing_as_zero() -> None:
    dense = [[("a", 0.9), ("b", 0.5), ("c", 0.1)]]
    lexical = [[("c", 30.0), ("d", 10.0)]]
    got = dict(convex(dense, lexical, 0.7)[0])
    assert got["a"] == pytest.approx(0.7)  # dense max, absent lexically
    assert got["b"] == pytest.approx(0.7 * 0.5)
    assert got["c"] == pytest.approx(0.3)  # dense min (0), lexical max (1)
    assert got["d"] == pytest.approx(0.0)
    assert dict(convex(dense, lexical, 1.0)[0])["a"] == pytest.approx(1.0)


def test_drop_identical_removes_the_query_itself() -> None:
    assert drop_identical([[("q0", 1.0), ("x", 0.5)]], ["q0"]) == [[("x", 0.5)]]


def test_metrics_match_pytrec_eval() -> None:
    pytrec_eval = pytest.importorskip("pytrec_eval")
    rng = np.random.default_rng(3)
    docs = [f"d{i}" for i in range(60)]
    qrels, run = [], []
    for _ in range(25):
        judged = {d: int(rng.integers(0, 3)) for d in rng.choice(docs, 6, replace=False)}
        judged[str(rng.choice(docs))] = 2  # at least one relevant
        qrels.append(judged)
        order = rng.permutation(docs)[:40]
        run.append([(d, float(40 - i)) for i, d in enumerate(order)])
    ds = _ds(qrels)
    ours = mean_pct(per_query_metrics(run, ds))
    ev = pytrec_eval.RelevanceEvaluator({f"q{i}": q for i, q in enumerate(qrels)},
                                        {"ndcg_cut.10", "recip_rank", "recall.100"})
    res = ev.evaluate({f"q{i}": dict(hits) for i, hits in enumerate(run)})
    ndcg = np.mean([r["ndcg_cut_10"] for r in res.values()]) * 100
    rec = np.mean([r["recall_100"] for r in res.values()]) * 100
    assert ours["ndcg_at_10"] == pytest.approx(ndcg, abs=0.01)
    assert ours["recall_at_100"] == pytest.approx(rec, abs=0.01)


def test_paired_ci_brackets_the_mean_difference() -> None:
    rng = np.random.default_rng(0)
    a = rng.random(400)
    b = a - 0.05 + rng.normal(0, 0.02, 400)
    mean, lo, hi = paired_ci(a, b, 1000)
    assert lo < mean < hi
    assert lo > 0  # a is better by 5 points with little noise
    assert mean == pytest.approx(5.0, abs=0.5)


CORPUS = [
    ("d1", "Statins lower cholesterol and the risk of heart attacks"),
    ("d2", "Rainfall in the Amazon basin shapes river levels"),
    ("d3", "Running shoes wear out after several hundred kilometres"),
]


@pytest.mark.parametrize("cls", [Bm25sRetriever, TantivyRetriever])
def test_bm25_libraries_rank_the_matching_document_first(cls: type) -> None:
    retr = cls([d for d, _ in CORPUS], [t for _, t in CORPUS])
    hits = retr.search("does a statin reduce cholesterol?", 10)  # stemming: statin ~ statins
    assert hits[0][0] == "d1"
    assert all(d != "d3" for d, _ in hits)  # no shared term, no hit
    assert retr.search("the of and", 10) == []  # stopwords only


def _beir_folder(root: Path, n_docs: int) -> Path:
    folder = root / "tiny"
    (folder / "qrels").mkdir(parents=True)
    with open(folder / "corpus.jsonl", "w") as fh:
        for i in range(n_docs):
            fh.write(json.dumps({"_id": f"d{i}", "title": "T", "text": f"text {i}"}) + "\n")
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "text 1"}) + "\n")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\r\nq1\td1\t1\r\n")
    return folder


def test_load_dataset_joins_title_and_reads_crlf_qrels(tmp_path: Path) -> None:
    ds = load_dataset(_beir_folder(tmp_path, 3))
    assert ds.doc_texts[0] == "T text 0"
    assert ds.query_ids == ["q1"] and ds.qrels == [{"d1": 1}]


def test_check_refuses_counts_other_than_the_papers(tmp_path: Path) -> None:
    folder = _beir_folder(tmp_path, 3)
    good = beir_data.Dataset("tiny", beir_data.Expected(docs=3, test_queries=1, test_qrels=1))
    assert beir_data.check(good, folder)["docs"] == 3
    bad = beir_data.Dataset("tiny", beir_data.Expected(docs=4, test_queries=1, test_qrels=1))
    with pytest.raises(beir_data.PrepareError, match="counts differ"):
        beir_data.check(bad, folder)
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td9\t1\n")
    with pytest.raises(beir_data.PrepareError, match="not in the corpus"):
        beir_data.check(good, folder)


def test_numpy_repr_sentences_are_parsed_as_literals() -> None:
    text = "['It\\'s one.' \"Two's \\\"quoted\\\".\"\n 'Three +/-'\n '0.2.']"
    assert beir_data._sentences(text) == ["It's one.", 'Two\'s "quoted".', "Three +/-", "0.2."]


def test_source_file_is_read_from_a_bare_snapshot_and_checked(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "f.txt").write_bytes(b"hello\n")
    git = ["git", "-C", str(work), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git[:3], "init", "-q"], check=True)
    subprocess.run([*git, "add", "f.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    commit = subprocess.run([*git[:3], "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    mirrors = tmp_path / "mirrors"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(mirrors / "owner+name" / "repo")], check=True)
    digest = hashlib.sha256(b"hello\n").hexdigest()
    assert beir_data.SourceFile("owner/name", commit, "f.txt", digest).read(mirrors) == b"hello\n"
    with pytest.raises(beir_data.PrepareError, match="sha256"):
        beir_data.SourceFile("owner/name", commit, "f.txt", "0" * 64).read(mirrors)
    with pytest.raises(beir_data.PrepareError, match="no snapshot"):
        beir_data.SourceFile("other/name", commit, "f.txt", digest).read(mirrors)


def test_render_puts_latency_beside_the_served_modes_rows() -> None:
    """`--latency` results: each served mode's p50 on the row that is what it returns (dense-index, bm25, cc@0.5),
    and the per-dataset speed table with build documents/s and hybrid / dense."""
    from bench.beir import render

    modes = {m: {"ndcg_at_10": 50.0, "mrr_at_10": 40.0, "recall_at_100": 90.0}
             for m in ("dense-exact", "dense-index", "bm25", "rrf", "cc@0.5")}
    latency = {"p50_ms_1_client": {"dense": 2.0, "lexical": 0.5, "hybrid": 3.0}, "build_docs_per_s": 123.4,
               "load_at_end": 1.5}
    report = {"stamp": "s", "command": "c", "machine": "m", "bootstrap": 10, "poolings": ["mean"], "datasets": [
        {"dataset": "d", "docs": 10, "queries": 2, "anchors": {}, "poolings": {"mean": {
            "modes": modes, "ci_ndcg_at_10": {}, "build": {}, "latency": latency,
            "timing": {"nlist": 4, "nprobe": 2, "index_ms_per_query": 0.1}}}}]}
    md = render(report)
    rows = {line.split("|")[1].strip(): line for line in md.splitlines() if line.startswith("| ")}
    assert rows["dense-index"].endswith("2.000 (dense) |") and rows["bm25"].endswith("0.500 (lexical) |")
    assert rows["cc@0.5"].endswith("3.000 (hybrid) |") and rows["rrf"].endswith("|  |")
    assert "| d | mean | 123.4 | 2.0 | 0.5 | 3.0 | 1.50 | 1.5 |" in md
