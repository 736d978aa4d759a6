"""`indexer eval --run-out` and `indexer compare`: TREC runs written from real indexes (all-MiniLM-L6-v2 mean and
the tiny random encoder over the same BEIR corpus from Quora rows), read back, scored by ir_measures, checked
once against `indexer.metrics`, and compared with paired bootstrap CIs."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from indexer.compare import MEASURES, compare_runs, per_query_scores
from indexer.eval_files import read_qrels
from indexer.metrics import per_query
from indexer.runs import RunFormatError, RunKey, read_run, run_paths
from indexer.runtime.layout import IndexRoot
from indexer.runtime.manifest import Manifest
from indexer.runtime.version import IndexVersion
from tests.indexer.test_corpus_build import cli, make_beir

pytest.importorskip("ir_measures")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, minilm_mean: Path, tiny_exported: Path, quora_file: Path
         ) -> dict[str, Any]:
    """One BEIR folder; a version per encoder; `indexer eval --run-out` of each (exact search on every query)."""
    tmp = tmp_path_factory.mktemp("runs")
    beir = tmp / "quora-beir"
    made = make_beir(quora_file, beir)
    out: dict[str, Any] = {"beir": beir, "qrels": beir / "qrels" / "test.tsv", "made": made}
    for name, model in (("minilm", minilm_mean), ("tiny", tiny_exported)):
        root = tmp / f"root-{name}"
        r = cli("build", "--data", str(beir), "--model", str(model), "--root", str(root), "--index", "flat",
                "--threads", "2", "--no-eval")
        assert r.returncode == 0, r.stderr
        run = tmp / f"{name}.run"
        # dense alone: one mode writes FILE and FILE.exact (every mode: tests/indexer/test_eval_modes.py)
        r = cli("eval", "--root", str(root), "--run-out", str(run), "--exact-all", "--modes", "dense", "--json")
        assert r.returncode == 0, r.stderr
        out[name] = {"root": root, "run": run, "eval": json.loads(r.stdout), "stderr": r.stderr}
    return out


def _lines(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()]


def test_run_out_writes_trec_runs_with_external_ids(runs: dict[str, Any]) -> None:
    got = runs["minilm"]
    run, exact = got["run"], Path(f"{got['run']}.exact")
    assert got["eval"]["runs"] == {"dense": str(run), "dense.exact": str(exact)}
    assert f"wrote run {run} (dense, index, " in got["stderr"] and f"wrote run {exact} (dense, exact search, " \
        in got["stderr"]
    version = IndexVersion(IndexRoot(got["root"]).current_dir())
    try:
        graded = version.store.graded_eval_set()
    finally:
        version.close()
    assert graded is not None
    ext_ids = {str(q) for q in runs["made"]["docs"]}
    for path, tag in ((run, "strata.dense"), (exact, "strata.dense.exact")):
        by_query: dict[str, list[tuple[str, int, float]]] = defaultdict(list)
        for fields in _lines(path):
            assert len(fields) == 6 and fields[1] == "Q0" and fields[5] == tag
            by_query[fields[0]].append((fields[2], int(fields[3]), float(fields[4])))
        assert list(by_query) == graded.query_ext_ids  # every evaluated query, in order, by its external id
        for qid, docs in by_query.items():
            assert [rank for _, rank, _ in docs] == list(range(1, len(docs) + 1)) and len(docs) == 100
            scores = [s for _, _, s in docs]
            assert scores == sorted(scores, reverse=True)
            assert {d for d, _, _ in docs} <= ext_ids and qid not in {d for d, _, _ in docs}  # BEIR drops self
    # the flat index is exact: both rankings hold the same documents
    assert [f[:3] for f in _lines(run)] == [f[:3] for f in _lines(exact)]


def test_ir_measures_agree_with_the_hand_written_metrics(runs: dict[str, Any]) -> None:
    """The one cross-check: trec_eval's measures (ir_measures) on the written run equal `indexer.metrics` on the
    same ranking — per query, and on average the figures `indexer eval` reported. (On MiniLM's run: the tiny
    random encoder's near-identical vectors tie scores, which trec_eval orders by document id, FAISS by list.)"""
    for name in ("minilm",):
        got = runs[name]
        qrels = read_qrels(runs["qrels"])
        version = IndexVersion(IndexRoot(got["root"]).current_dir())
        try:
            graded = version.store.graded_eval_set()
            fids = version.store.resolve_ext_ids([d for f in _lines(got["run"]) for d in (f[2],)])
        finally:
            version.close()
        assert graded is not None
        ranked = np.full((len(graded.query_ext_ids), 100), -1, dtype=np.int64)
        position = {q: i for i, q in enumerate(graded.query_ext_ids)}
        for qid, _, doc, rank, *_ in _lines(got["run"]):
            ranked[position[qid], int(rank) - 1] = fids[doc]
        hand = per_query(ranked, graded.qrels)
        library = per_query_scores(read_run(got["run"]), qrels, graded.query_ext_ids)
        for key, _, _ in MEASURES:
            np.testing.assert_allclose(library[key], hand[key], atol=1e-9, err_msg=f"{name} {key}")
            assert library[key].mean() == pytest.approx(got["eval"][key], abs=1e-6)


def test_compare_finds_the_better_run(runs: dict[str, Any], tmp_path: Path) -> None:
    r = cli("compare", str(runs["tiny"]["run"]), str(runs["minilm"]["run"]), "--qrels", str(runs["qrels"]), "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["queries"] == len(runs["made"]["dups"]) and got["missing"] == {"a": 0, "b": 0}
    for key, _, _ in MEASURES:
        m = got["measures"][key]
        assert m["delta"] == pytest.approx(m["b"] - m["a"])
        assert m["b"] > 0.7 and m["delta"] > 0.4, key  # MiniLM vs a random 2-layer BERT
        assert 0 < m["ci95"][0] < m["delta"] < m["ci95"][1] and m["p"] < 0.001
    table = cli("compare", str(runs["tiny"]["run"]), str(runs["minilm"]["run"]), "--qrels", str(runs["qrels"]))
    assert table.returncode == 0 and "nDCG@10" in table.stdout and "95% CI" in table.stdout
    m = got["measures"]["ndcg_at_10"]
    assert f"{m['delta'] * 100:+.2f}" in table.stdout and f"[{m['ci95'][0] * 100:+.2f}," in table.stdout
    # swapping the runs flips the sign and the interval
    flipped = compare_runs(read_run(runs["minilm"]["run"]), read_run(runs["tiny"]["run"]), read_qrels(runs["qrels"]))
    assert flipped.measures["ndcg_at_10"].delta == pytest.approx(-m["delta"])
    assert flipped.measures["ndcg_at_10"].ci95[1] < 0


def test_compare_identical_runs(runs: dict[str, Any]) -> None:
    run = str(runs["minilm"]["run"])
    r = cli("compare", run, run, "--qrels", str(runs["qrels"]), "--json")
    assert r.returncode == 0, r.stderr
    for key, _, _ in MEASURES:
        m = json.loads(r.stdout)["measures"][key]
        assert m["a"] == m["b"] and m["delta"] == 0 and m["ci95"][0] <= 0 <= m["ci95"][1] and m["p"] == 1.0


def test_a_run_missing_queries_scores_them_zero(runs: dict[str, Any], tmp_path: Path) -> None:
    lines = runs["minilm"]["run"].read_text().splitlines()
    dropped = lines[0].split()[0]
    partial = tmp_path / "partial.run"
    partial.write_text("\n".join(line for line in lines if line.split()[0] != dropped) + "\n")
    full, cut = read_run(runs["minilm"]["run"]), read_run(partial)
    c = compare_runs(full, cut, read_qrels(runs["qrels"]))
    assert c.missing == {"a": 0, "b": 1}
    first = c.per_query["a"]["ndcg_at_10"][0]
    assert c.measures["ndcg_at_10"].delta == pytest.approx(-first / c.queries)


@pytest.mark.parametrize(("line", "message"), [
    ("q1 Q0 d1 1 0.5", "expected 6 fields"),
    ("q1 Q0 d1 one 0.5 tag", "rank must be an integer"),
    ("q1 Q0 d1 1 high tag", "score must be a number"),
    ("q1 Q0 d1 1 nan tag", "score must be finite"),
    ("q1 Q0 d0 2 0.4 tag", "document 'd0' is ranked twice for query 'q1' (first on line 1)"),
])
def test_malformed_run_names_file_and_line(runs: dict[str, Any], tmp_path: Path, line: str, message: str) -> None:
    bad = tmp_path / "bad.run"
    bad.write_text(f"q1 Q0 d0 1 0.9 tag\n{line}\n")
    with pytest.raises(RunFormatError, match="expected|must|twice"):
        read_run(bad)
    r = cli("compare", str(bad), str(runs["minilm"]["run"]), "--qrels", str(runs["qrels"]))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"indexer compare: error: {bad}:2: {message}" in r.stderr


def test_malformed_qrels_and_foreign_queries_are_clear_errors(runs: dict[str, Any], tmp_path: Path) -> None:
    run = str(runs["minilm"]["run"])
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\n1\t2\t1\n3\t4\n")
    r = cli("compare", run, run, "--qrels", str(qrels))
    assert r.returncode == 2 and f"{qrels}:3: expected 'query-id<TAB>corpus-id<TAB>score'" in r.stderr
    qrels.write_text("elsewhere\td1\t1\n")
    r = cli("compare", run, run, "--qrels", str(qrels))
    assert r.returncode == 2 and "RUN_A: none of its" in r.stderr and "same query set" in r.stderr
    r = cli("compare", str(tmp_path / "absent.run"), run, "--qrels", str(runs["qrels"]))
    assert r.returncode == 2 and f"{tmp_path / 'absent.run'}: cannot open" in r.stderr
    assert cli("compare", "--help").returncode == 0 and "--run-out" in cli("eval", "--help").stdout


def test_run_paths_take_a_mode_suffix_when_several_modes_ran() -> None:
    base = Path("/r/run")
    one = run_paths(base, [RunKey("dense"), RunKey("dense", exact=True)])
    assert one == {RunKey("dense"): base, RunKey("dense", exact=True): Path("/r/run.exact")}
    several = run_paths(base, [RunKey("dense"), RunKey("hybrid"), RunKey("dense", exact=True)])
    assert several == {RunKey("dense"): Path("/r/run.dense"), RunKey("hybrid"): Path("/r/run.hybrid"),
                       RunKey("dense", exact=True): Path("/r/run.dense.exact")}


def test_quora_protocol_run_comes_with_its_qrels(quora_root: Path, tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "root"  # `eval` stores its figures in the manifest: not in the shared fixture
    shutil.copytree(quora_root, root, symlinks=True)
    run = tmp_path / "quora.run"
    r = cli("eval", "--root", str(root), "--run-out", str(run), "--json")
    assert r.returncode == 0, r.stderr
    figures = json.loads(r.stdout)
    qrels_file = Path(f"{run}.qrels")
    assert qrels_file.is_file() and f"wrote qrels {qrels_file}" in r.stderr
    # every mode the version serves, one run each (FILE.{mode}); each scores as its figures say
    assert set(figures["runs"]) == {"dense", "dense.exact", "lexical", "hybrid", "hybrid.exact"}
    for mode in ("dense", "lexical", "hybrid"):
        mode_run = read_run(Path(f"{run}.{mode}"))
        c = compare_runs(mode_run, mode_run, read_qrels(qrels_file))
        assert c.queries == figures["n_queries"] == Manifest.load(IndexRoot(root).current_dir()).data.n_queries
        # trec_eval (ir_measures) orders equal scores by document id, Strata by FAISS id: BM25 gives identical
        # questions identical scores, so lexical (and hybrid, through it) may differ by those ties alone
        tol = 1e-6 if mode == "dense" else 5e-3
        assert c.measures["mrr_at_10"].a == pytest.approx(figures["modes"][mode]["mrr_at_10"], abs=tol), mode
    assert figures["modes"]["dense"]["mrr_at_10"] == figures["mrr_at_10"]


def test_run_out_with_your_own_queries_matches_the_stored_set(runs: dict[str, Any], tmp_path: Path) -> None:
    """`--queries DIR --run-out` (queries encoded now) writes the same ranking as the build's stored queries."""
    got = runs["minilm"]
    run = tmp_path / "own.run"
    r = cli("eval", "--root", str(got["root"]), "--queries", str(runs["beir"]), "--run-out", str(run), "--exact-all",
            "--modes", "dense")
    assert r.returncode == 0, r.stderr
    assert f"wrote run {run} (dense, index, {len(runs['made']['dups'])} queries, tag strata.dense)" in r.stdout
    assert [f[:4] for f in _lines(run)] == [f[:4] for f in _lines(got["run"])]
