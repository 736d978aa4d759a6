"""Every ivf/hnsw build calibrates on query-like probes by default (`indexer.probes`): the recorded recall is
recomputed here with numpy over the stored vectors, the probes are checked to be what the manifest says they
are, and the opt-outs (`--no-calibrate`, `--nprobe`, `--ef-search`) keep fixed parameters. Real CLI, real FAISS,
real ONNX encoders (a tiny random BERT), real Quora rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from indexer.calibrate import DEFAULT_TARGET_RECALL, TIE_EPS
from indexer.probes import PROBES_FILE, document_spans
from indexer.quora import read_rows
from indexer.runtime.encoder import OnnxEncoder
from indexer.runtime.layout import IndexRoot
from indexer.runtime.manifest import Manifest
from indexer.runtime.version import IndexVersion
from tests.conftest import indexer_cli as cli

from .test_corpus import write_jsonl
from .test_corpus_build import make_beir

QUORA_ROWS = "6000"  # 5,917 documents (IVF pinned: `--index auto` is exact below 10,000)


def brute_force_recall(version: IndexVersion, probes: np.ndarray, self_ids: np.ndarray, search_params: dict[str, int]
                       ) -> float:
    """ANN recall@10 of the version's index at `search_params` on `probes`: the exact 10th score computed here with
    numpy over the stored vectors (each probe's own id excluded), a returned id counting when it scores at least
    that."""
    ids, vecs = version.ann.stored_vectors()
    scores = probes @ vecs.T
    scores[ids[None, :] == self_ids[:, None]] = -np.inf
    kth = -np.sort(-scores, axis=1)[:, 9]
    vec_of = {int(i): v for i, v in zip(ids, vecs, strict=True)}
    _, got = version.ann.search(probes, 11, search_params=search_params)
    shares = []
    for probe, row, own, threshold in zip(probes, got, self_ids, kth, strict=True):
        returned = [int(i) for i in row if i >= 0 and i != own][:10]
        shares.append(min(10, sum(float(probe @ vec_of[i]) >= threshold - TIE_EPS for i in returned)) / 10)
    return float(np.mean(shares))


def calibration_of(manifest: Manifest) -> Any:  # noqa: ANN401 (NprobeCalibration | KnobCalibration)
    return manifest.index.nprobe_calibration or manifest.index.calibration


def check_recorded_recall(folder: Path, target: float = DEFAULT_TARGET_RECALL) -> tuple[Manifest, list[str]]:
    """The recorded figure, recomputed; one step less misses the target (the fewest that reach it)."""
    manifest = Manifest.load(folder)
    cal = calibration_of(manifest)
    assert cal is not None and cal.reached and cal.target_recall == target and cal.probes is not None
    name = "nprobe" if manifest.index.kind == "ivf" else "ef_search"
    value = cal.nprobe if name == "nprobe" else cal.value
    assert manifest.index.params.model_dump()[name] == value
    assert manifest.eval is None or manifest.eval.search_params[name] == value
    with np.load(folder / PROBES_FILE) as z:
        probes, self_ids, texts = z["vectors"], z["self_ids"], z["texts"].tolist()
    # the vectors searched are the encodings of the texts recorded beside them
    np.testing.assert_allclose(probes, OnnxEncoder(Path(manifest.model.dir)).encode(texts), atol=1e-5)
    assert len(probes) == cal.sample_queries == cal.probes.n_probes
    version = IndexVersion(folder)
    try:
        recall = brute_force_recall(version, probes, self_ids, {name: value})
        assert recall == pytest.approx(cal.recall_at_10, abs=1e-6) and recall >= target
        if value > 1:
            assert brute_force_recall(version, probes, self_ids, {name: value - 1}) < target
    finally:
        version.close()
    return manifest, texts


# --- Quora: the default build -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def quora_default(tmp_path_factory: pytest.TempPathFactory, tiny_exported: Path, quora_file: Path) -> Path:
    root = tmp_path_factory.mktemp("default") / "root"
    r = cli("build", "--root", str(root), "--model", str(tiny_exported), "--data", str(quora_file), "--rows",
            QUORA_ROWS, "--threads", "2", "--keep", "10", "--index", "ivf")
    assert r.returncode == 0, r.stderr
    assert "of the exact top 10 on 1000 held apart queries (paper protocol" in r.stdout, r.stdout
    assert "calibration probes" in r.stderr  # the probes' encoding shows in the progress log
    return root


def test_a_default_build_keeps_097_of_exact_on_held_apart_questions(quora_default: Path, tiny_exported: Path,
                                                                    quora_file: Path) -> None:
    folder = IndexRoot(quora_default).current_dir()
    m, texts = check_recorded_recall(folder)
    cal = m.index.nprobe_calibration
    assert m.index.kind == "ivf" and cal is not None and cal.probes is not None
    assert cal.probes.source == "held_apart_queries" and not cal.probes.sees_eval_queries
    assert m.build_seconds.calibrate_s == cal.seconds > 0
    # the probes are question1s without a duplicate in the rows read, never an evaluated query
    rows = list(read_rows(quora_file, int(QUORA_ROWS)))
    judged = {r.qid1 for r in rows if r.is_duplicate and r.question1 and r.question2}
    unjudged = {r.qid1: r.question1 for r in rows if r.question1 and r.qid1 not in judged}
    assert cal.probes.n_available == len(unjudged) and len(set(texts)) > 990
    assert set(texts) <= set(unjudged.values())
    evaluated = {r.question1 for r in rows if r.qid1 in judged}
    assert len(set(texts) & evaluated) <= 2  # the same question asked twice under two ids, at most


def test_add_calibrates_again_on_the_same_probes(quora_default: Path, tmp_path: Path) -> None:
    root = IndexRoot(quora_default)
    base = Manifest.load(root.current_dir())
    new = tmp_path / "new.tsv"
    new.write_text("id\tquestion\n" + "".join(f"{900_000 + i}\tHow do I learn question {i} about the sea?\n"
                                              for i in range(300)))
    r = cli("build", "--root", str(quora_default), "--add", str(new), "--threads", "2", "--keep", "10")
    assert r.returncode == 0, r.stderr
    folder = root.current_dir()
    m, texts = check_recorded_recall(folder)
    with np.load(IndexRoot(quora_default).version_dir(base.version) / PROBES_FILE) as z:
        assert texts == z["texts"].tolist()
    assert m.index.nprobe_calibration.probes == base.index.nprobe_calibration.probes  # type: ignore[union-attr]


# --- opting out ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "kind", "param", "value"), [
    (("--index", "ivf", "--no-calibrate"), "ivf", "nprobe", 20),
    (("--nprobe", "7"), "ivf", "nprobe", 7),
    (("--index", "hnsw", "--ef-search", "40"), "hnsw", "ef_search", 40),
    (("--index", "hnsw", "--no-calibrate"), "hnsw", "ef_search", 64),
])
def test_opting_out_keeps_fixed_parameters(tiny_exported: Path, quora_file: Path, tmp_path: Path,
                                           args: tuple[str, ...], kind: str, param: str, value: int) -> None:
    r = cli("build", "--root", str(tmp_path / "root"), "--model", str(tiny_exported), "--data", str(quora_file),
            "--rows", "3000", "--threads", "2", *args)
    assert r.returncode == 0, r.stderr
    folder = IndexRoot(tmp_path / "root").current_dir()
    manifest = Manifest.load(folder)
    assert manifest.index.kind == kind and manifest.index.params.model_dump()[param] == value
    assert manifest.index.nprobe_calibration is None and manifest.index.calibration is None
    assert not (folder / PROBES_FILE).exists() and "of the exact top 10 on" not in r.stdout
    assert manifest.eval is not None and manifest.eval.search_params == {param: value}


def test_a_default_hnsw_build_calibrates_ef_search(tiny_exported: Path, quora_file: Path, tmp_path: Path) -> None:
    r = cli("build", "--root", str(tmp_path / "root"), "--model", str(tiny_exported), "--data", str(quora_file),
            "--rows", "3000", "--threads", "2", "--index", "hnsw", "--target-recall", "0.99")
    assert r.returncode == 0, r.stderr
    m, _ = check_recorded_recall(IndexRoot(tmp_path / "root").current_dir(), target=0.99)
    assert m.index.calibration is not None and m.index.calibration.knob == "ef_search"


def test_a_flat_build_has_nothing_to_calibrate(tiny_exported: Path, quora_file: Path, tmp_path: Path) -> None:
    r = cli("build", "--root", str(tmp_path / "root"), "--model", str(tiny_exported), "--data", str(quora_file),
            "--rows", "300", "--threads", "2", "--no-eval")  # auto: flat below 10,000 documents
    assert r.returncode == 0, r.stderr
    manifest = Manifest.load(IndexRoot(tmp_path / "root").current_dir())
    assert (manifest.index.kind == "flat" and manifest.index.calibration is None
            and manifest.index.nprobe_calibration is None)


def test_no_calibrate_with_add_is_refused(quora_default: Path, tmp_path: Path) -> None:
    new = tmp_path / "one.tsv"
    new.write_text("id\tquestion\n990001\tWhy?\n")
    r = cli("build", "--root", str(quora_default), "--add", str(new), "--no-calibrate")
    assert r.returncode == 2 and "--add calibrates again by itself" in r.stderr, r.stderr


# --- BEIR folders and corpora without queries -------------------------------------------------------------------

BEIR_ROWS = 1500  # about 2,900 documents (built with --index ivf: auto would search them exactly)


def beir_with_held_apart(quora_file: Path, out: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """`make_beir`, plus the question1s of non-duplicate pairs in queries.jsonl with no judgments (as BEIR's
    queries.jsonl holds train/dev queries beside the test ones)."""
    made = make_beir(quora_file, out, BEIR_ROWS)
    extra = {f"q{r.qid1}": r.question1 for r in read_rows(quora_file, BEIR_ROWS)
             if r.question1 and r.qid1 not in made["dups"]}
    with (out / "queries.jsonl").open("a") as fh:
        fh.writelines(json.dumps({"_id": q, "text": t}) + "\n" for q, t in extra.items())
    return made, extra


def test_a_beir_folder_calibrates_on_its_unjudged_queries(tiny_exported: Path, quora_file: Path,
                                                          tmp_path: Path) -> None:
    beir = tmp_path / "beir"
    made, extra = beir_with_held_apart(quora_file, beir)
    r = cli("build", "--root", str(tmp_path / "root"), "--model", str(tiny_exported), "--data", str(beir),
            "--threads", "2", "--index", "ivf")
    assert r.returncode == 0, r.stderr
    folder = IndexRoot(tmp_path / "root").current_dir()
    m, texts = check_recorded_recall(folder)
    p = m.index.nprobe_calibration.probes  # type: ignore[union-attr]
    assert p.source == "held_apart_queries" and p.n_available == len(extra) and not p.sees_eval_queries
    assert p.detail == f"queries.jsonl: {len(extra)} of {len(extra) + len(made['dups'])} queries not named by test.tsv"
    assert set(texts) <= set(extra.values()) and len(texts) == min(1000, len(extra))
    assert "note: calibrated on the evaluation queries" not in r.stdout
    # the manifest and `indexer eval` report what the index costs against exact search
    e = m.eval
    assert e is not None and e.exact_n_queries is None
    assert e.ndcg_at_10_vs_exact == pytest.approx(e.ndcg_at_10 - e.exact_ndcg_at_10, abs=2e-6)
    assert "index vs exact search: nDCG@10" in r.stdout
    ev = cli("eval", "--root", str(tmp_path / "root"), "--json")
    assert ev.returncode == 0, ev.stderr
    out = json.loads(ev.stdout)
    assert out["ndcg_at_10_vs_exact"] == pytest.approx(out["ndcg_at_10"] - out["exact_ndcg_at_10"], abs=2e-6)
    table = cli("eval", "--root", str(tmp_path / "root"))
    assert "index vs exact nDCG@10" in table.stdout, table.stdout


def held_out_span_recall(folder: Path, calibrated_on: list[str], seed: int = 1) -> float:
    """ANN recall@10 of a version at its calibrated setting on 1,000 document spans it was not calibrated on
    (other seed; any span among `calibrated_on` dropped)."""
    manifest = Manifest.load(folder)
    cal = calibration_of(manifest)
    version = IndexVersion(folder)
    try:
        ids, _ = version.ann.stored_vectors()
        pick = np.random.default_rng(seed).choice(len(ids), size=min(1000, len(ids)), replace=False)
        by_id = version.store.texts(ids[pick].tolist())
        seen = set(calibrated_on)
        spans = [t for t in document_spans([by_id[int(i)] for i in ids[pick]], seed) if t not in seen]
        probes = OnnxEncoder(Path(manifest.model.dir)).encode(spans)
        return brute_force_recall(version, probes, np.full(len(spans), -1, np.int64), {"nprobe": cal.nprobe})
    finally:
        version.close()


@pytest.mark.parametrize("chunk", ["off", "12"])
def test_a_build_with_only_evaluation_queries_calibrates_on_spans_unless_told(tiny_exported: Path, quora_file: Path,
                                                                              tmp_path: Path, chunk: str) -> None:
    """By default the evaluation queries are never searched by the calibration: a corpus whose queries are all
    judged calibrates on document spans (of its passages, in a version of passages) and keeps the target on spans
    it did not see; `--probes queries` takes the evaluation queries' text, and says so."""
    beir = tmp_path / "beir"
    made = make_beir(quora_file, beir, BEIR_ROWS)
    r = cli("build", "--root", str(tmp_path / "root"), "--model", str(tiny_exported), "--data", str(beir),
            "--threads", "2", "--index", "ivf", "--chunk", chunk)
    assert r.returncode == 0, r.stderr
    folder = IndexRoot(tmp_path / "root").current_dir()
    m, texts = check_recorded_recall(folder)
    p = m.index.nprobe_calibration.probes  # type: ignore[union-attr]
    assert p.source == "document_spans" and not p.sees_eval_queries and "note:" not in r.stdout
    assert m.eval is not None and m.eval.n_queries > 0  # evaluated, on queries the calibration never searched
    assert (m.chunking() is not None and m.chunking().chunk == 12) == (chunk == "12")
    assert held_out_span_recall(folder, texts) >= DEFAULT_TARGET_RECALL - 0.02
    if chunk == "12":
        return
    r = cli("build", "--root", str(tmp_path / "queries"), "--model", str(tiny_exported), "--data", str(beir),
            "--threads", "2", "--probes", "queries", "--index", "ivf")
    assert r.returncode == 0, r.stderr
    m, texts = check_recorded_recall(IndexRoot(tmp_path / "queries").current_dir())
    p = m.index.nprobe_calibration.probes  # type: ignore[union-attr]
    assert p.source == "eval_queries_text" and p.sees_eval_queries and p.n_available == len(made["dups"])
    assert set(texts) <= {made["docs"][q] for q in made["dups"]}
    assert "note: calibrated on the evaluation queries' text" in r.stdout


def test_a_corpus_without_queries_calibrates_on_document_spans(tiny_exported: Path, quora_file: Path,
                                                               tmp_path: Path) -> None:
    questions = {}
    for r in read_rows(quora_file, 3000):
        for qid, text in ((r.qid1, r.question1), (r.qid2, r.question2)):
            if text:
                questions.setdefault(qid, text)
    texts_in_order = list(questions.values())  # passages of 4 questions: documents longer than a query
    docs = {i: " ".join(texts_in_order[i * 4 : i * 4 + 4]) for i in range(len(texts_in_order) // 4)}
    corpus = tmp_path / "corpus.jsonl"
    write_jsonl(corpus, [{"id": q, "text": t} for q, t in docs.items()])
    r = cli("build", "--root", str(tmp_path / "root"), "--model", str(tiny_exported), "--data", str(corpus),
            "--threads", "2", "--index", "ivf", "--chunk", "off")  # whole documents: spans of them are the probes
    assert r.returncode == 0, r.stderr
    assert "document spans" in r.stdout
    m, texts = check_recorded_recall(IndexRoot(tmp_path / "root").current_dir())
    p = m.index.nprobe_calibration.probes  # type: ignore[union-attr]
    assert p.source == "document_spans" and p.n_probes == 1000 and p.n_available == len(docs)
    assert m.eval is None
    # 5-15 consecutive words of a document each (the whole of a shorter one)
    padded = {" ".join(t.split()) for t in docs.values()}
    assert all(5 <= len(t.split()) <= 15 or t in padded for t in texts)
    assert all(any(t in d for d in padded) for t in texts[:100])
    assert sum(t in padded for t in texts) < 0.02 * len(texts)


def test_probes_queries_without_queries_is_a_clear_error(tiny_exported: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    write_jsonl(corpus, [{"id": i, "text": f"how can i learn python number {i} quickly"} for i in range(1200)])
    r = cli("build", "--root", str(tmp_path / "root"), "--model", str(tiny_exported), "--data", str(corpus),
            "--probes", "queries", "--index", "ivf")  # 1,200 documents: auto would search exactly
    assert r.returncode != 0 and "Traceback" not in r.stderr and "--probes queries" in r.stderr, r.stderr
    assert IndexRoot(tmp_path / "root").current_version() is None
