"""bench/beir.py, bench/bm25_libs.py and bench/beir_data.py on small real inputs: fusion arithmetic, metrics
cross-checked against pytrec_eval, the bootstrap interval, both BM25 libraries, and the dataset checks."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import zipfile
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
    target_lines,
)
from bench.bm25_libs import Bm25sRetriever, TantivyRetriever
from tests.conftest import REPO


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


def test_convex_orders_equal_scores_the_same_in_every_process() -> None:
    """Duplicate documents tie exactly; the fused order must not follow Python's per-process string hash seed (it
    moved NFCorpus hybrid nDCG@10 by 0.15 between runs)."""
    import sys

    script = ("from bench.beir import convex; "
              "print(convex([[('a', .9)] + [(f'dup{i}', .5) for i in range(12)] + [('z', .1)]], "
              "[[('b', 9.)] + [(f'dup{i}', 3.) for i in reversed(range(12))] + [('y', 1.)]], .5))")
    outs = {subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout for seed in range(6)}
    assert len(outs) == 1, outs
    assert "('dup0', 0.375), ('dup1', 0.375)" in outs.pop()  # ties keep the dense order


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


def _snapshot(tmp_path: Path, files: dict[str, bytes]) -> tuple[Path, str]:
    """A bare snapshot `owner+name/repo` (as `fetch` lays it out) of one commit holding `files`."""
    work = tmp_path / "work"
    for rel, data in files.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_bytes(data)
    git = ["git", "-C", str(work), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git[:3], "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    commit = subprocess.run([*git[:3], "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    mirrors = tmp_path / "mirrors"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(mirrors / "owner+name" / "repo")], check=True)
    return mirrors, commit


TINY_CORPUS = b"".join(json.dumps({"_id": f"d{i}", "title": "", "text": f"text {i}"}).encode() + b"\n"
                       for i in range(3))
TINY_QUERIES = json.dumps({"_id": "q1", "text": "text 1"}).encode() + b"\n"
TINY_QRELS = b"query-id\tcorpus-id\tscore\r\nq1\td1\t1\r\n"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_beir_zip_is_extracted_as_is_with_dev_qrels_and_checked(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("tiny/corpus.jsonl", TINY_CORPUS)
        zf.writestr("tiny/queries.jsonl", TINY_QUERIES)
        zf.writestr("tiny/qrels/test.tsv", TINY_QRELS)
        zf.writestr("tiny/qrels/dev.tsv", TINY_QRELS)
    mirrors, commit = _snapshot(tmp_path, {"data/tiny.zip": buf.getvalue()})
    ds = beir_data.Dataset(
        "tiny", beir_data.Expected(docs=3, test_queries=1, test_qrels=1),
        sources={"zip": beir_data.SourceFile("owner/name", commit, "data/tiny.zip", _sha(buf.getvalue()))},
        outputs={"corpus.jsonl": _sha(TINY_CORPUS), "qrels/test.tsv": _sha(TINY_QRELS),
                 "qrels/dev.tsv": _sha(TINY_QRELS)})
    beir_data.DATASETS["tiny"] = ds
    beir_data.PREPARERS["tiny"] = beir_data.prepare_beir_zip
    try:
        out = beir_data.prepare("tiny", tmp_path / "beir", mirrors, force=False)
        assert (out / "corpus.jsonl").read_bytes() == TINY_CORPUS
        assert (out / "qrels" / "dev.tsv").read_bytes() == TINY_QRELS  # kept byte for byte (CRLF)
        assert not (out / "qrels" / "train.tsv").exists()
        stamp = json.loads((out / "PREPARED.json").read_text())
        assert stamp["counts"]["docs"] == 3 and stamp["files"]["qrels/dev.tsv"]["sha256"] == _sha(TINY_QRELS)
        # a prepared file that differs from the recorded digest is refused
        (out / "corpus.jsonl").write_bytes(TINY_CORPUS.replace(b"text 2", b"text 9"))
        with pytest.raises(beir_data.PrepareError, match="sha256"):
            beir_data.prepare("tiny", tmp_path / "beir", mirrors, force=False)
        # and so is a zip without the test qrels
        with pytest.raises(beir_data.PrepareError, match="no tiny/qrels/test.tsv"):
            beir_data.extract_beir_zip(_zip_without_test(), "tiny", tmp_path / "other")
    finally:
        del beir_data.DATASETS["tiny"], beir_data.PREPARERS["tiny"]


def _zip_without_test() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("tiny/corpus.jsonl", TINY_CORPUS)
        zf.writestr("tiny/queries.jsonl", TINY_QUERIES)
    return buf.getvalue()


def test_gzipped_sources_are_gunzipped_and_dangling_qrels_counted(tmp_path: Path) -> None:
    # q1's relevant d7 is not in the corpus, as 5 of BEIR's ArguAna qrels are
    qrels = b"query-id\tcorpus-id\tscore\r\nq1\td1\t1\r\nq1\td7\t1\r\n"
    files = {"data/corpus.jsonl.gz": gzip.compress(TINY_CORPUS), "data/queries.jsonl.gz": gzip.compress(TINY_QUERIES),
             "data/test.tsv": qrels}
    mirrors, commit = _snapshot(tmp_path, files)
    sources = {rel: beir_data.SourceFile("owner/name", commit, path, _sha(files[path]))
               for rel, path in [("corpus.jsonl", "data/corpus.jsonl.gz"), ("queries.jsonl", "data/queries.jsonl.gz"),
                                 ("qrels/test.tsv", "data/test.tsv")]}
    strict = beir_data.Dataset("tiny", beir_data.Expected(docs=3, test_queries=1, test_qrels=2), sources=sources)
    out = tmp_path / "beir" / "tiny"
    beir_data.prepare_files(strict, out, mirrors)
    assert (out / "corpus.jsonl").read_bytes() == TINY_CORPUS
    with pytest.raises(beir_data.PrepareError, match="1 qrels name documents not in the corpus"):
        beir_data.check(strict, out)
    lenient = beir_data.Dataset("tiny", beir_data.Expected(docs=3, test_queries=1, test_qrels=2, dangling_qrels=1))
    assert beir_data.check(lenient, out)["dangling_qrels"] == 1
    # a truncated gzip is a clear error, not a stack trace
    cut = gzip.compress(TINY_CORPUS)[:20]
    mirrors2, commit2 = _snapshot(tmp_path / "cut", {"data/corpus.jsonl.gz": cut})
    source = beir_data.SourceFile("owner/name", commit2, "data/corpus.jsonl.gz", _sha(cut))
    with pytest.raises(beir_data.PrepareError, match="not a whole gzip file"):
        beir_data.prepare_files(beir_data.Dataset("tiny", strict.expected, sources={"corpus.jsonl": source}),
                                tmp_path / "cut-out", mirrors2)


def test_every_dataset_has_a_preparer_and_published_counts() -> None:
    assert set(beir_data.DATASETS) == set(beir_data.PREPARERS)
    for ds in beir_data.DATASETS.values():
        assert ds.expected.docs > 0 and set(ds.outputs) >= {"corpus.jsonl", "queries.jsonl", "qrels/test.tsv"}


def test_target_table_compares_the_default_hybrid_with_the_best_anchor_plus_two() -> None:
    def res(name: str, bm25: float | None, minilm: float | None, cc05: float, cc03: float) -> dict[str, object]:
        modes = {"cc@0.5": {"ndcg_at_10": cc05}, "cc@0.3": {"ndcg_at_10": cc03}}
        return {"dataset": name, "anchors": {"anserini_bm25_flat": bm25, "mteb_minilm_l6": minilm},
                "poolings": {"mean": {"modes": modes}}}

    report = {"datasets": [res("a", 40.0, 50.0, 53.0, 54.0), res("b", 60.0, 55.0, 61.0, 60.0),
                           res("own", None, None, 90.0, 10.0)]}  # no anchors: left out of the target
    text = "\n".join(target_lines(report))
    assert "| a | 53.00 | 50.00 | 52.00 | +1.00 | yes |" in text
    assert "| b | 61.00 | 60.00 | 62.00 | -1.00 | no |" in text
    assert "| **average (2 sets)** | 57.00 | 55.00 | 57.00 | +0.00 | yes |" in text
    assert "by mode: cc@0.3 57.00, cc@0.5 57.00" in text or "by mode: cc@0.5 57.00, cc@0.3 57.00" in text
    assert "own" not in text


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
