"""`indexer eval` per `/search` mode (`indexer.eval_modes`) on real components: a tiny BEIR folder built with the
tiny random BERT (real ONNX Runtime, FAISS, SQLite, bm25s), the real CLI. BM25 is checked against a ranking
computed here by hand, hybrid against `indexer.runtime.fusion` applied to the written dense and lexical runs."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from indexer.runs import read_run
from indexer.runtime.fusion import Fusion, fuse
from indexer.runtime.layout import IndexRoot
from indexer.runtime.manifest import Manifest
from indexer.runtime.version import IndexVersion
from tests.conftest import REPO

WORDS = ("how what why can learn python money invest india sky blue sea green dog cat car road guitar horse food "
         "child woman man best way quickly good great").split()
K1, B = 0.9, 0.4
N_DOCS, N_QUERIES = 40, 8


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "indexer.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600)


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def make_tiny_beir(out: Path) -> dict[str, Any]:
    """A seeded BEIR folder: 40 documents of 4-14 words, 8 queries of 2-3 words, 1-3 judged documents each
    (grades 1 and 2), one query with the id of a document (BEIR drops it from that query's results)."""
    rng = np.random.default_rng(7)
    docs = {f"d{i:02d}": " ".join(rng.choice(WORDS, size=int(rng.integers(4, 15)))) for i in range(N_DOCS)}
    queries = {f"q{i}": " ".join(rng.choice(WORDS, size=int(rng.integers(2, 4)), replace=False))
               for i in range(N_QUERIES - 1)}
    queries["d05"] = docs["d05"]  # a query that is also a document
    qrels = {q: {f"d{int(d):02d}": int(rng.integers(1, 3)) for d in rng.choice(N_DOCS, size=int(rng.integers(1, 4)),
                                                                              replace=False)}
             for q in queries}
    qrels["d05"].pop("d05", None)
    qrels["d05"] = qrels["d05"] or {"d06": 1}
    out.mkdir(parents=True)
    write_jsonl(out / "corpus.jsonl", [{"_id": d, "title": "", "text": t} for d, t in docs.items()])
    write_jsonl(out / "queries.jsonl", [{"_id": q, "text": t} for q, t in queries.items()])
    (out / "qrels").mkdir()
    (out / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t{g}\n" for q, judged in qrels.items() for d, g in judged.items()))
    return {"docs": docs, "queries": queries, "qrels": qrels}


def hand_bm25(docs: dict[str, str], query: str) -> dict[str, float]:
    """Lucene's BM25 (k1 0.9, b 0.4), no stemming, no stopwords, tokens of 2+ word characters, lowercased; every
    query token counts (a repeated one twice). Documents with score 0 are not hits."""
    tok = {d: re.findall(r"\b\w\w+\b", t.lower()) for d, t in docs.items()}
    n, avgdl = len(tok), sum(map(len, tok.values())) / len(tok)
    df = Counter(t for terms in tok.values() for t in set(terms))
    out: dict[str, float] = {}
    for d, terms in tok.items():
        tf = Counter(terms)
        norm = K1 * (1 - B + B * len(terms) / avgdl)
        s = sum(math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) * tf[t] / (tf[t] + norm)
                for t in re.findall(r"\b\w\w+\b", query.lower()) if tf[t])
        if s > 0:
            out[d] = s
    return out


def hand_metrics(ranked: list[str], judged: dict[str, int]) -> tuple[float, float]:
    """(MRR@10, nDCG@10) of one ranking, written out."""
    top = ranked[:10]
    rr = next((1.0 / (i + 1) for i, d in enumerate(top) if judged.get(d, 0) > 0), 0.0)
    dcg = sum(judged.get(d, 0) / math.log2(i + 2) for i, d in enumerate(top))
    ideal = sorted((g for g in judged.values() if g > 0), reverse=True)[:10]
    return rr, dcg / sum(g / math.log2(i + 2) for i, g in enumerate(ideal))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, tiny_exported: Path) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("eval-modes")
    beir = tmp / "tiny-beir"
    made = make_tiny_beir(beir)
    root = tmp / "root"
    r = cli("build", "--data", str(beir), "--model", str(tiny_exported), "--root", str(root), "--index", "flat",
            "--lexical-stemmer", "none", "--lexical-stopwords", "none", "--threads", "2")
    assert r.returncode == 0, r.stderr
    run = tmp / "run"
    e = cli("eval", "--root", str(root), "--run-out", str(run), "--json")
    assert e.returncode == 0, e.stderr
    return {"beir": beir, "root": root, "made": made, "build": r, "eval": json.loads(e.stdout), "run": run,
            "stderr": e.stderr, "tmp": tmp}


def _fids(root: Path, ext_ids: list[str]) -> dict[str, int]:
    version = IndexVersion(IndexRoot(root).current_dir())
    try:
        return version.store.resolve_ext_ids(ext_ids)
    finally:
        version.close()


def test_eval_reports_every_served_mode_and_the_manifest_keeps_them(built: dict[str, Any]) -> None:
    got = built["eval"]
    assert list(got["modes"]) == ["dense", "lexical", "hybrid"]
    assert got["mode"] == "dense" and got["ndcg_at_10"] == got["modes"]["dense"]["ndcg_at_10"]
    assert got["modes"]["hybrid"]["fusion"] == {"kind": "convex", "alpha": 0.5}
    lex = got["modes"]["lexical"]
    # BM25 is exact: its exact figures are its own, index vs exact 0
    assert lex["exact_ndcg_at_10"] == lex["ndcg_at_10"] and lex["ndcg_at_10_vs_exact"] == 0.0
    assert lex["index_kind"] is None and lex["nprobe"] is None
    # a flat index is exact search: hybrid's index and exact rankings agree
    assert got["modes"]["hybrid"]["ndcg_at_10_vs_exact"] == 0.0
    manifest = Manifest.load(IndexRoot(built["root"]).current_dir())
    assert set(manifest.eval_modes) == {"dense", "lexical", "hybrid"}  # (the JSON keeps keys sorted)
    assert (manifest.eval is not None and manifest.eval.mode == "dense"
            and manifest.eval_modes["lexical"].ndcg_at_10 == lex["ndcg_at_10"])
    # the build evaluated every mode too, and said so
    assert "by /search mode:" in built["build"].stdout and "index vs exact: none (BM25" in built["build"].stdout


def test_lexical_equals_bm25_ranked_by_hand(built: dict[str, Any]) -> None:
    made, run = built["made"], read_run(Path(f"{built['run']}.lexical"))
    fids = _fids(built["root"], list(made["docs"]))
    rrs, ndcgs = [], []
    for q, text in made["queries"].items():
        hand = {d: s for d, s in hand_bm25(made["docs"], text).items() if d != q}  # BEIR drops the query itself
        expected = sorted(hand, key=lambda d: (-round(hand[d], 4), fids[d]))[:100]
        got = sorted(run.get(q, {}), key=lambda d: -run[q][d])
        assert got == expected, q
        assert all(abs(run[q][d] - hand[d]) < 1e-4 for d in got)
        rr, ndcg = hand_metrics(expected, made["qrels"][q])
        rrs.append(rr)
        ndcgs.append(ndcg)
    lex = built["eval"]["modes"]["lexical"]
    assert lex["mrr_at_10"] == pytest.approx(np.mean(rrs), abs=1e-6)
    assert lex["ndcg_at_10"] == pytest.approx(np.mean(ndcgs), abs=1e-6)
    assert lex["n_queries"] == N_QUERIES


def test_hybrid_run_is_the_fusion_of_the_dense_and_lexical_runs(built: dict[str, Any]) -> None:
    base = built["run"]
    assert built["eval"]["runs"] == {k: f"{base}.{k}" for k in
                                     ("dense", "dense.exact", "hybrid", "hybrid.exact", "lexical")}
    dense, lexical, hybrid = (read_run(Path(f"{base}.{m}")) for m in ("dense", "lexical", "hybrid"))
    fids = _fids(built["root"], list(built["made"]["docs"]))
    ext = {f: d for d, f in fids.items()}

    def arrays(ranked: dict[str, float]) -> tuple[np.ndarray, np.ndarray]:
        order = sorted(ranked, key=lambda d: -ranked[d])
        return (np.asarray([ranked[d] for d in order], np.float32), np.asarray([fids[d] for d in order], np.int64))

    for q in built["made"]["queries"]:
        scores, ids = fuse(Fusion(), arrays(dense[q]), arrays(lexical.get(q, {})), 100)
        got = sorted(hybrid[q], key=lambda d: -hybrid[q][d])
        assert got == [ext[int(i)] for i in ids], q
        assert [hybrid[q][d] for d in got] == pytest.approx(scores.tolist(), abs=1e-6)
    # and the hybrid figures are those of that run
    assert len(dense) == len(hybrid) == N_QUERIES


def test_modes_lexical_needs_no_encoder(built: dict[str, Any]) -> None:
    missing = built["tmp"] / "no-such-model"
    r = cli("eval", "--root", str(built["root"]), "--queries", str(built["beir"]), "--model", str(missing),
            "--modes", "lexical", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert list(out["modes"]) == ["lexical"] and out["mode"] == "lexical"
    assert out["ndcg_at_10"] == built["eval"]["modes"]["lexical"]["ndcg_at_10"]
    # the same with a mode that encodes fails on the missing model, naming it
    r = cli("eval", "--root", str(built["root"]), "--queries", str(built["beir"]), "--model", str(missing),
            "--modes", "dense")
    assert r.returncode != 0 and str(missing) in r.stderr and "Traceback" not in r.stderr
    manifest = Manifest.load(IndexRoot(built["root"]).current_dir())
    assert any("lexical" in by_mode for by_mode in manifest.query_eval_modes.values())


def test_bad_modes_are_refused_with_the_reason(built: dict[str, Any], tiny_exported: Path) -> None:
    r = cli("eval", "--root", str(built["root"]), "--modes", "dense,sparse")
    assert r.returncode != 0 and "--modes takes" in r.stderr and "Traceback" not in r.stderr
    root = built["tmp"] / "dense-only"
    b = cli("build", "--data", str(built["beir"]), "--model", str(tiny_exported), "--root", str(root), "--index",
            "flat", "--no-lexical", "--no-eval", "--threads", "2")
    assert b.returncode == 0, b.stderr
    r = cli("eval", "--root", str(root), "--modes", "hybrid")
    assert r.returncode != 0 and "needs a lexical index" in r.stderr and "Traceback" not in r.stderr
    r = cli("eval", "--root", str(root), "--json")  # the default: the modes this version serves
    assert r.returncode == 0, r.stderr
    assert list(json.loads(r.stdout)["modes"]) == ["dense"]


def test_lexical_engine_is_chosen_at_build_recorded_and_served(built: dict[str, Any], tiny_exported: Path) -> None:
    """`indexer build --lexical-engine tantivy`: the manifest names the engine and why, the version opens it and
    `indexer eval --modes lexical` ranks with it like bm25s on the same terms (tantivy fixes k1/b, so here the
    rankings are compared, not the scores); `auto` on a tiny corpus is bm25s; BM25 parameters an engine cannot
    score are refused before any work (exit 2, the reason, no traceback)."""
    root = built["tmp"] / "tantivy"
    b = cli("build", "--data", str(built["beir"]), "--model", str(tiny_exported), "--root", str(root), "--index",
            "flat", "--lexical-engine", "tantivy", "--lexical-stemmer", "none", "--lexical-stopwords", "none",
            "--no-eval", "--threads", "2")
    assert b.returncode == 0, b.stderr
    assert "lexical: tantivy BM25 k1=1.2 b=0.75" in b.stdout
    manifest = Manifest.load(IndexRoot(root).current_dir())
    assert (manifest.lexical is not None
            and (manifest.lexical.engine, manifest.lexical.engine_reason) == ("tantivy", "asked for"))
    version = IndexVersion(IndexRoot(root).current_dir())
    try:
        assert type(version.lexical).__module__ == "indexer.runtime.lexical_tantivy"
        [(scores, ids)] = version.lexical_search([WORDS[0]], 5)
        assert len(ids) and list(scores) == sorted(scores, reverse=True)
    finally:
        version.close()
    e = cli("eval", "--root", str(root), "--modes", "lexical", "--json")
    assert e.returncode == 0, e.stderr
    assert json.loads(e.stdout)["modes"]["lexical"]["ndcg_at_10"] > 0
    auto = Manifest.load(IndexRoot(built["root"]).current_dir()).lexical
    assert auto is not None and auto.engine == "bm25s" and auto.engine_reason is not None \
        and auto.engine_reason.startswith("auto:")
    r = cli("build", "--data", str(built["beir"]), "--model", str(tiny_exported), "--root", str(root), "--index",
            "flat", "--lexical-engine", "tantivy", "--bm25-k1", "2.0", "--no-eval")
    assert r.returncode == 2 and "tantivy engine scores with BM25 k1=1.2, b=0.75 only" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_pisa_version_is_built_compacted_and_served_by_pisa(built: dict[str, Any], tiny_exported: Path) -> None:
    """`indexer build --lexical-engine pisa` writes PISA's index in the staged version, which answers a lexical query
    like the bm25s version of the same corpus (same terms, same k1/b: the same ids in order, the same scores);
    `indexer compact` folds a written document in and rebuilds the index with the same engine, which finds it."""
    from indexer.runtime.encoder import OnnxEncoder
    from indexer.runtime.writelog import Upsert, open_log

    root, query = built["tmp"] / "pisa", f"{WORDS[0]} {WORDS[1]}"
    b = cli("build", "--data", str(built["beir"]), "--model", str(tiny_exported), "--root", str(root), "--index",
            "flat", "--lexical-engine", "pisa", "--no-eval", "--threads", "2")
    assert b.returncode == 0, b.stderr
    answers = []
    for r in (built["root"], root):
        version = IndexVersion(IndexRoot(r).current_dir())
        try:
            answers.append((version.manifest.lexical.engine, *version.lexical_search([query], 10)[0]))  # type: ignore[union-attr]
        finally:
            version.close()
    (engine_a, scores_a, ids_a), (engine_b, scores_b, ids_b) = answers
    assert (engine_a, engine_b) == ("bm25s", "pisa") and len(ids_a) and ids_b.tolist() == ids_a.tolist()
    assert scores_b.tolist() == pytest.approx(scores_a.tolist(), rel=1e-5)
    log = open_log(root, create=True)
    assert log is not None
    enc = OnnxEncoder(tiny_exported)
    log.append([Upsert(7_777_777, "zyzzyva written through the API", {}, enc.encode(["zyzzyva"])[0],
                       enc.meta.onnx_sha256)])
    log.close()
    c = cli("compact", "--root", str(root), "--threads", "1", "--no-eval")
    assert c.returncode == 0, c.stderr
    version = IndexVersion(IndexRoot(root).current_dir())
    try:
        assert version.manifest.lexical is not None and version.manifest.lexical.engine == "pisa"
        assert type(version.lexical).__module__ == "indexer.runtime.lexical_pisa"
        assert version.lexical_search(["zyzzyva"], 10)[0][1].tolist() == [7_777_777]
    finally:
        version.close()
