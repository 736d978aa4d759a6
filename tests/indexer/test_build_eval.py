"""`indexer build` and `indexer eval` on the real Quora data with the real default encoder (3,000 rows)."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from indexer.build import BuildConfig, build
from indexer.evaluate import query_ranks
from indexer.runtime.encoder import OnnxEncoder
from indexer.runtime.faiss.exact import exact_search
from indexer.runtime.layout import IndexRoot
from indexer.runtime.manifest import Manifest
from indexer.runtime.version import IndexVersion
from tests.conftest import TEST_ROWS

EVAL_KEYS = {"mrr_at_10", "recall_at_10", "exact_mrr_at_10", "avg_retrieval_ms", "memory_gb", "n_queries", "n_docs"}


def test_manifest_records_the_build(quora_root: Path, minilm_mean: Path) -> None:
    manifest = Manifest.load(IndexRoot(quora_root).current_dir())
    enc = json.loads((minilm_mean / "encoder.json").read_text())
    assert (manifest.model.onnx_sha256 == enc["onnx_sha256"] and manifest.model.pooling == "mean"
            and manifest.model.dim == 384)
    assert manifest.data.rows_read == TEST_ROWS and manifest.data.protocol == "paper"
    assert manifest.index.ntotal == manifest.data.n_docs > 2900
    # nlist by size (4·sqrt(2,982) → 256), which 2,982 vectors cannot train either: scaled to n // 39
    assert manifest.index.nlist_requested == 256 and manifest.index.nlist == manifest.data.n_docs // 39
    assert manifest.eval is not None and manifest.eval.n_queries == manifest.data.n_queries
    # all-MiniLM-L6-v2 was trained on Quora duplicates: on this easy subset it is near-perfect
    assert 0.8 < manifest.eval.mrr_at_10 <= manifest.eval.exact_mrr_at_10 + 0.02
    assert manifest.build_seconds.encode_docs_s > 0


def test_eval_cli_json(quora_root: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"  # `eval` stores its figures in the manifest: not in the shared fixture
    shutil.copytree(quora_root, root, symlinks=True)
    r = subprocess.run([sys.executable, "-m", "indexer.cli", "eval", "--root", str(root), "--json",
                        "--nprobe", "2"], capture_output=True, text=True, check=True)
    out = json.loads(r.stdout)
    assert EVAL_KEYS <= out.keys()
    assert out["nprobe"] == 2 and out["batch_size"] == 1
    assert 0 < out["mrr_at_10"] <= 1 and out["avg_retrieval_ms"] > 0 and out["memory_gb"] > 0
    # fewer probes cannot beat exact search on the same vectors
    assert out["mrr_at_10"] <= out["exact_mrr_at_10"] + 1e-9
    stored = Manifest.load(IndexRoot(root).current_dir())
    assert stored.eval is not None and stored.eval.nprobe == 2
    shared = Manifest.load(IndexRoot(quora_root).current_dir())
    assert shared.eval is not None and shared.eval.nprobe == shared.index.nprobe != 2


def test_eval_cli_table(quora_root: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "indexer.cli", "eval", "--root", str(quora_root)],
                       capture_output=True, text=True, check=True)
    assert "MRR@10" in r.stdout and "avg retrieval time (ms/query)" in r.stdout and "index memory (GB)" in r.stdout


def test_rebuild_switches_current_and_old_version_stays_readable(
    quora_root: Path, minilm_mean: Path, quora_file: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root_dir = tmp_path / "root"
    shutil.copytree(quora_root, root_dir, symlinks=True)
    root = IndexRoot(root_dir)
    old_version = root.current_version()
    served = IndexVersion(root.current_dir())  # what a running server holds
    probe = np.asarray(served.query_vectors()[:5])
    before = served.search(probe, 5)[1]

    with caplog.at_level(logging.WARNING):
        manifest = build(BuildConfig(model_dir=minilm_mean, data=str(quora_file), root=root_dir, rows=500, nlist=64,
                              threads=2, keep=2))
    assert "needs >= 2496 training vectors" in caplog.text
    assert root.current_version() == manifest.version != old_version
    assert root.versions() == sorted([old_version, manifest.version])
    assert np.array_equal(served.search(probe, 5)[1], before)  # old files untouched
    assert IndexVersion(root.version_dir(old_version)).ntotal == served.ntotal
    served.close()


def test_build_cli_names_bad_data_line(minilm_mean: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.tsv"
    bad.write_text("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n0\t1\t2\ta?\tb?\t0\n1\t3\t4\tc?\n")
    root = tmp_path / "root"
    r = subprocess.run([sys.executable, "-m", "indexer.cli", "build", "--data", str(bad), "--model",
                        str(minilm_mean), "--root", str(root)], capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"{bad}:3: expected 6 tab-separated fields, got 4" in r.stderr
    assert IndexRoot(root).versions() == [] and IndexRoot(root).current_version() is None


def test_tune_sweeps_on_the_versions_own_vectors(quora_root: Path) -> None:
    from indexer.tune import Candidate, pareto, sweep

    version = IndexVersion(IndexRoot(quora_root).current_dir())
    grid = [Candidate("Flat", [("", 0)]), Candidate("IVF64,Flat", [("nprobe", 1), ("nprobe", 64)]),
            Candidate("HNSW32,Flat", [("efSearch", 64)])]
    rows = pareto(list(sweep(version, grid, max_queries=300)))
    version.close()
    exact, ivf1, ivf_all, hnsw = rows
    assert exact.recall_vs_exact == 1.0 and exact.search_param == "exact"
    assert ivf_all.recall_vs_exact == 1.0 and abs(ivf_all.mrr_at_10 - exact.mrr_at_10) < 1e-9  # probing all lists
    assert ivf1.recall_vs_exact < 1.0 and ivf1.mrr_at_10 <= exact.mrr_at_10
    assert hnsw.memory_mb > exact.memory_mb  # the graph costs memory
    assert any(r.pareto for r in rows)
    assert not (ivf_all.pareto and ivf_all.ms_per_query > exact.ms_per_query and ivf_all.memory_mb > exact.memory_mb)


def test_tune_cli(quora_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "tune.json"
    r = subprocess.run([sys.executable, "-m", "indexer.cli", "tune", "--root", str(quora_root), "--queries", "200",
                        "--factories", "Flat", "IVF64,Flat", "HNSW16,Flat", "--out", str(out)],
                       capture_output=True, text=True, check=True)
    assert "Pareto front" in r.stdout and "IVF64,Flat" in r.stdout and "HNSW16,Flat" in r.stdout
    assert "nprobe=64" in r.stdout and "efSearch=128" in r.stdout and "SQ8" not in r.stdout
    rows = json.loads(out.read_text())["rows"]
    keys = {"factory", "search_param", "mrr_at_10", "recall_vs_exact", "ms_per_query", "memory_mb", "pareto"}
    assert keys <= rows[0].keys()


def test_exact_reference_on_a_seeded_sample_past_the_budget(quora_root: Path) -> None:
    from indexer.evaluate import evaluate, exact_sample

    version = IndexVersion(IndexRoot(quora_root).current_dir())
    try:
        whole = evaluate(version, exact_budget=None)
        n_q, n_d = whole.n_queries, whole.n_docs
        sampled = evaluate(version, exact_budget=n_d * 100)
    finally:
        version.close()
    assert whole.exact_n_queries is None and whole.mrr_at_10_on_exact_sample is None
    assert sampled.exact_n_queries == 100 < n_q
    # the index's own MRR@10 still covers every query; the exact figures and the paired one cover the sample
    assert sampled.mrr_at_10 == whole.mrr_at_10 and sampled.n_queries == n_q
    pick = exact_sample(n_q, n_d, n_d * 100)
    assert pick is not None and len(pick) == 100 and np.array_equal(pick, exact_sample(n_q, n_d, n_d * 100))
    assert sampled.mrr_at_10_on_exact_sample <= sampled.exact_mrr_at_10 + 0.02
    assert sampled.exact_mrr_at_10 != whole.exact_mrr_at_10 or sampled.ann_recall_at_10 != whole.ann_recall_at_10
    r = subprocess.run([sys.executable, "-m", "indexer.cli", "eval", "--root", str(quora_root), "--exact-all",
                        "--json"], capture_output=True, text=True, check=True)
    assert json.loads(r.stdout)["exact_n_queries"] is None


def test_eval_queries_reuse_the_vectors_of_identical_documents(minilm_mean: Path) -> None:
    from indexer.build import encode_reusing

    enc = OnnxEncoder(minilm_mean)
    docs = ["How do I learn Python?", "What is the capital of France?", "Why is the sky blue?"]
    doc_vecs = enc.encode(docs)
    doc_vecs[1] = 0.0  # a marker: a reused row is copied, not re-encoded
    queries = ["What is the capital of France?", "How can I cook rice?", "How do I learn Python?"]
    got = encode_reusing(enc, queries, docs, doc_vecs, batch_size=8)
    assert np.array_equal(got[0], doc_vecs[1]) and np.array_equal(got[2], doc_vecs[0])
    assert np.allclose(got[1], enc.encode(["How can I cook rice?"])[0], atol=1e-5)


def _build(root: Path, model: Path, data: Path, rows: int, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "indexer.cli", "build", "--root", str(root), "--model", str(model),
                           "--data", str(data), "--rows", str(rows), "--threads", "1", *extra],
                          capture_output=True, text=True, timeout=600)


def test_keep_prunes_old_versions_through_real_builds(minilm_mean: Path, quora_file: Path, tmp_path: Path) -> None:
    root = IndexRoot(tmp_path / "root")
    built = []
    for rows in (100, 120, 140):
        r = _build(root.root, minilm_mean, quora_file, rows, "--keep", "2", "--no-eval")
        assert r.returncode == 0, r.stderr
        built.append(root.current_version())
    assert root.versions() == built[1:] and root.current_version() == built[2]  # the oldest went, current stays
    assert Manifest.load(root.current_dir()).data.rows_read == 140
    r = _build(root.root, minilm_mean, quora_file, 100, "--keep", "1", "--no-eval")
    assert r.returncode == 0, r.stderr
    assert root.versions() == [root.current_version()]


def test_a_second_build_is_refused_while_one_runs(minilm_mean: Path, quora_file: Path, tmp_path: Path) -> None:
    import os
    import signal
    import time

    root = IndexRoot(tmp_path / "root")
    assert _build(root.root, minilm_mean, quora_file, 100, "--no-eval").returncode == 0
    served = root.current_version()
    first = subprocess.Popen([sys.executable, "-m", "indexer.cli", "build", "--root", str(root.root), "--model",
                              str(minilm_mean), "--data", str(quora_file), "--rows", "3000", "--threads", "1"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not list(root.root.glob(".building-*")) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert list(root.root.glob(".building-*")), "the first build never started"
        second = _build(root.root, minilm_mean, quora_file, 100, "--no-eval")
        assert first.poll() is None, "the first build finished before the second one started"
        assert second.returncode == 2 and "Traceback" not in second.stderr
        assert f"another `indexer build` is running on {root.root}" in second.stderr
        assert root.current_version() == served and len(root.versions()) == 1
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait()


def test_full_protocol_excludes_each_querys_own_id(minilm_mean: Path, quora_file: Path, tmp_path: Path) -> None:
    """`--protocol full`: every question is a document and a query, so each query finds itself first; the
    evaluation leaves that hit out and ranks the rest."""
    from indexer.evaluate import rank_metrics

    manifest = build(BuildConfig(model_dir=minilm_mean, data=str(quora_file), root=tmp_path / "root", rows=300,
                          protocol="full", threads=2))
    assert manifest.data.protocol == "full" and manifest.eval is not None
    version = IndexVersion(IndexRoot(tmp_path / "root").current_dir())
    try:
        qids, _, gold = version.store.eval_set()
        qvecs = version.query_vectors()
        assert qvecs is not None and set(qids) <= set(version.store.texts(qids))  # queries are documents
        _, ids = version.search(qvecs, 11)
    finally:
        version.close()
    assert np.mean(ids[:, 0] == np.asarray(qids)) > 0.95  # a query's nearest document is itself
    assert not any(q in g for q, g in zip(qids, gold, strict=True))  # its gold are its duplicates only
    kept = np.array([[i for i in row if i != q][:10] for row, q in zip(ids.tolist(), qids, strict=True)])
    with_self, _ = rank_metrics(ids[:, :10], gold)
    without_self, _ = rank_metrics(kept, gold)
    assert manifest.eval.mrr_at_10 == pytest.approx(without_self, abs=1e-6)  # what the build recorded
    assert with_self < without_self  # counting itself would push every gold hit down a rank
    version = IndexVersion(IndexRoot(tmp_path / "root").current_dir())
    try:
        ranks = query_ranks(version)  # per query, with the same self-exclusion
    finally:
        version.close()
    assert list(ranks.query_ids) == qids
    assert ranks.ivf_rr.mean() == pytest.approx(manifest.eval.mrr_at_10, abs=1e-6)
    assert ranks.exact_rr.mean() == pytest.approx(manifest.eval.exact_mrr_at_10, abs=1e-6)


def test_query_ranks_are_the_evaluations_rankings_per_query(quora_root: Path) -> None:
    """`query_ranks` (paired encoder comparisons, bench/encoder_choice.py) averages to the figures `evaluate`
    records, and a query's reciprocal rank is 1 / the rank of its first gold document."""
    version = IndexVersion(IndexRoot(quora_root).current_dir())
    try:
        ranks = query_ranks(version)
        ev = version.manifest.eval
        qids, _, gold = version.store.eval_set()
        _, exact = exact_search(version.index, version.query_vectors(), 10)
    finally:
        version.close()
    assert ev is not None and len(ranks.ivf_rr) == len(ranks.exact_rr) == ev.n_queries
    assert ranks.ivf_rr.mean() == pytest.approx(ev.mrr_at_10, abs=1e-6)
    assert ranks.exact_rr.mean() == pytest.approx(ev.exact_mrr_at_10, abs=1e-6)
    expected = [next((1 / (i + 1) for i, d in enumerate(row) if d in g), 0.0)
                for row, g in zip(exact.tolist(), gold, strict=True)]
    assert np.allclose(ranks.exact_rr, expected)
    assert set(np.unique(ranks.exact_rr)) <= {0.0, *(1 / r for r in range(1, 11))}
    assert 0 < (ranks.exact_rr < 1).sum() < len(qids)  # some queries miss rank 1: the values are not all equal
