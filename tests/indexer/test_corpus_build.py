"""`indexer build --data` on your own corpus and `indexer eval --queries/--qrels`, end to end: real ONNX encoders,
real FAISS, real SQLite, the real CLI. The BEIR set is generated from Quora rows below 300,000."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from indexer.metrics import mean_metrics
from indexer.quora import HELD_OUT_FROM, read_rows
from indexer.runtime.encoder import OnnxEncoder
from indexer.runtime.layout import IndexRoot
from indexer.runtime.manifest import Manifest
from indexer.runtime.version import IndexVersion
from tests.conftest import REPO

from .test_corpus import ROWS, write_jsonl


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([sys.executable, "-m", "indexer.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env=os.environ | (env or {}))


def snapshot(root: Path) -> tuple[str | None, list[str], list[str]]:
    r = IndexRoot(root)
    return r.current_version(), r.versions(), sorted(p.name for p in root.glob(".building-*"))


def ids_and_vectors(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    from indexer.runtime.version import vectors_by_id

    return vectors_by_id(folder)


def test_jsonl_build_keeps_external_ids_metadata_and_the_last_duplicate(minilm_mean: Path, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "docs.jsonl", ROWS)
    root = tmp_path / "root"
    r = cli("build", "--data", str(data), "--model", str(minilm_mean), "--root", str(root), "--codec", "Flat",
            "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert "jsonl: 6 rows read" in r.stdout and "4 documents, 1 empty texts skipped, 1 duplicate ids" in r.stdout
    assert "metadata: bucket: int, lang: str, score: float, year: int" in r.stdout
    folder = IndexRoot(root).current_dir()
    manifest = Manifest.load(folder)
    d = manifest.data
    assert (d.protocol, d.format, d.rows_read, d.n_docs, d.skipped_empty_texts, d.duplicate_ids) == \
        ("corpus", "jsonl", 6, 4, 1, 1)
    assert d.fields is not None and (d.fields.id, d.fields.text, d.fields.title, d.fields.metadata) == \
        ("id", "text", None, None)
    assert d.metadata_schema == {"bucket": "int", "lang": "str", "score": "float", "year": "int"}
    assert manifest.eval is None and manifest.index.ntotal == 4

    enc = OnnxEncoder(minilm_mean)
    version = IndexVersion(folder)
    try:
        ids, vecs = ids_and_vectors(folder)
        docs = version.store.documents(ids.tolist())
        by_ext = {(type(x.ext_id), x.ext_id): x for x in docs.values()}
        assert set(by_ext) == {(int, 17), (str, "17"), (str, "q-abc"), (int, 4)}
        # 17 holds the vector of its last row's text, not the first's
        last = enc.encode(["What is the best way to learn Python?"])[0]
        first = enc.encode(["How do I learn Python?"])[0]
        row17 = int(np.flatnonzero(ids == 17)[0])
        assert np.abs(vecs[row17] - last).max() < 1e-5 and float(vecs[row17] @ first) < 0.95
        # each document's text finds itself first; hits carry the external id as given, text and metadata
        for x in docs.values():
            _, got = version.search(enc.encode([x.text]), 1)
            hit = version.store.documents(got[0].tolist())[int(got[0][0])]
            assert hit.ext_id == x.ext_id and type(hit.ext_id) is type(x.ext_id) and hit.metadata == x.metadata
        assert by_ext[(str, "q-abc")].metadata == {"bucket": 1, "year": 2009, "lang": "de", "score": 2.0}
        # the filter language runs on the built store
        match = version.store.filter_ids({"and": [{"lang": {"in": ["en", "de"]}}, {"year": {"gte": 2000}}]})
        assert {(type(docs[i].ext_id), docs[i].ext_id) for i in match.tolist()} == {(int, 17), (str, "q-abc")}
    finally:
        version.close()

    info = cli("info", "--root", str(root))
    assert info.returncode == 0 and "4 vectors" in info.stdout and "corpus" in info.stdout


def quora_chunk_rows(n: int, bad_line: int | None = None) -> str:
    lines = [json.dumps({"id": f"doc-{i}", "text": f"question number {i} about topic {i % 37}?", "n": i})
             for i in range(n)]
    if bad_line is not None:
        lines[bad_line - 1] = '{"id": "doc-x", "text": "unterminated'
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def served_root(tmp_path_factory: pytest.TempPathFactory, tiny_exported: Path) -> Path:
    """A root serving a 300-document JSONL version (what the failing builds below must leave alone)."""
    tmp = tmp_path_factory.mktemp("served")
    data = tmp / "docs.jsonl"
    data.write_text(quora_chunk_rows(300), encoding="utf-8")
    root = tmp / "root"
    r = cli("build", "--data", str(data), "--model", str(tiny_exported), "--root", str(root), "--threads", "1")
    assert r.returncode == 0, r.stderr
    return root


def test_a_bad_row_after_chunks_were_stored_publishes_nothing(served_root: Path, tiny_exported: Path,
                                                             tmp_path: Path) -> None:
    data = tmp_path / "late-bad.jsonl"
    data.write_text(quora_chunk_rows(4300, bad_line=4250), encoding="utf-8")  # after a first chunk of 4,096
    before = snapshot(served_root)
    r = cli("build", "--data", str(data), "--model", str(tiny_exported), "--root", str(served_root),
            "--threads", "1")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith(f"indexer build: error: {data}:4250: not a JSON object")
    assert snapshot(served_root) == before


@pytest.mark.parametrize(("name", "content", "args", "expected"), [
    ("c.csv", "id,text\n1,fine\n2,also fine,extra\n", (), "c.csv:3: expected 2 comma-separated fields"),
    ("c.tsv", "key\tbody\n1\tfine\n", (), "c.tsv:1: no id column 'id' (pick one with --id-field)"),
    ("c.jsonl", '{"id": 1, "text": "ok"}\n{"id": true, "text": "no"}\n', (),
     "c.jsonl:2: id field 'id' must be a string or an integer, got bool True"),
    ("c.jsonl", '{"id": 1, "text": "ok"}\n', ("--protocol", "full"), "--protocol applies to the Quora"),
    ("q.tsv", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n0\t1\t2\ta?\tb?\t0\n", ("--id-field", "qid1"),
     "--id-field: not for the Quora question-pairs TSV"),
    ("empty.jsonl", '{"id": 1, "text": ""}\n', (), "empty.jsonl: no documents with text (1 rows read, 1 with an "
                                                    "empty text)"),
])
def test_bad_corpus_is_one_line_exit_2_and_nothing_published(served_root: Path, tiny_exported: Path, tmp_path: Path,
                                                             name: str, content: str, args: tuple[str, ...],
                                                             expected: str) -> None:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    before = snapshot(served_root)
    r = cli("build", "--data", str(path), "--model", str(tiny_exported), "--root", str(served_root), *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    error = r.stderr.strip().splitlines()[-1]
    assert error.startswith("indexer build: error: ") and expected in error, error
    assert snapshot(served_root) == before


def test_build_warns_when_the_corpus_shrinks(served_root: Path, tiny_exported: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    import shutil

    shutil.copytree(served_root, root, symlinks=True)
    small = tmp_path / "small.jsonl"
    small.write_text(quora_chunk_rows(100), encoding="utf-8")
    r = cli("build", "--data", str(small), "--model", str(tiny_exported), "--root", str(root), "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert "the new version holds 100 documents, 33% of the current version" in r.stderr
    assert "'s 300 (more than STRATA_MAX_SHRINK=0.1 fewer)" in r.stderr
    # a looser threshold, or a corpus within 10 %, builds without the warning
    r = cli("build", "--data", str(small), "--model", str(tiny_exported), "--root", str(root), "--threads", "1",
            env={"STRATA_MAX_SHRINK": "0.8"})
    assert r.returncode == 0 and "STRATA_MAX_SHRINK" not in r.stderr, r.stderr
    near = tmp_path / "near.jsonl"
    near.write_text(quora_chunk_rows(95), encoding="utf-8")
    r = cli("build", "--data", str(near), "--model", str(tiny_exported), "--root", str(root), "--threads", "1")
    assert r.returncode == 0 and "STRATA_MAX_SHRINK" not in r.stderr, r.stderr


def test_publish_warns_on_a_shrink_makes_it_current_and_prunes(served_root: Path, tmp_path: Path) -> None:
    """The one publish step of build, the Ray build, add and compact (`indexer.publish.publish`)."""
    import shutil

    from indexer.publish import publish
    from indexer.runtime.layout import IndexRoot
    from indexer.runtime.manifest import Manifest

    shutil.copytree(served_root, tmp_path / "root", symlinks=True)
    root = IndexRoot(tmp_path / "root")
    old = root.current_version()
    assert old is not None and root.versions() == [old]
    manifest = Manifest.load(root.version_dir(old))
    for name, docs in ((old + "-b", 100), (old + "-c", 290)):  # sealed versions in versions/, as staging leaves them
        shutil.copytree(root.version_dir(old), root.version_dir(name))
        smaller = manifest.model_copy(update={"version": name,
                                              "index": manifest.index.model_copy(update={"ntotal": docs})})
        warning = publish(root, smaller, keep=2)
        assert root.current_version() == name
        if docs == 100:  # 300 -> 100: over STRATA_MAX_SHRINK's 10 %
            assert warning is not None and "holds 100 documents" in warning
            assert root.versions() == [old, name]
        else:  # 100 -> 290 grows; the oldest beyond keep=2 is pruned, never the current one
            assert warning is None and root.versions() == [old + "-b", name]


# --- BEIR ------------------------------------------------------------------------------------------------------

BEIR_ROWS = 400


def make_beir(quora_file: Path, out: Path, rows: int = BEIR_ROWS) -> dict[str, Any]:
    """A BEIR folder from the first `rows` Quora rows (all below 300,000): corpus = every question, queries = the
    question1 of duplicate pairs, qrels = their duplicates (grade 1; a few grade 2 and a judged document that
    is not in the corpus, to exercise graded judgments)."""
    out.mkdir(parents=True)
    docs: dict[int, str] = {}
    dups: dict[int, list[int]] = {}
    for r in read_rows(quora_file, rows):
        assert r.id < HELD_OUT_FROM
        for qid, text in ((r.qid1, r.question1), (r.qid2, r.question2)):
            if text:
                docs.setdefault(qid, text)
        if r.is_duplicate and r.question1 and r.question2:
            dups.setdefault(r.qid1, []).append(r.qid2)
    write_jsonl(out / "corpus.jsonl", [{"_id": str(q), "title": "", "text": t, "metadata": {"bucket": q % 4}}
                                       for q, t in docs.items()])
    write_jsonl(out / "queries.jsonl", [{"_id": str(q), "text": docs[q]} for q in dups])
    (out / "qrels").mkdir()
    lines = ["query-id\tcorpus-id\tscore"]
    for i, (q, ds) in enumerate(dups.items()):
        lines += [f"{q}\t{d}\t{2 if i % 5 == 0 else 1}" for d in ds]
    first = next(iter(dups))
    lines.append(f"{first}\tnot-in-the-corpus\t1")
    (out / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n")
    return {"docs": docs, "dups": dups}


@pytest.fixture(scope="module")
def beir_build(tmp_path_factory: pytest.TempPathFactory, minilm_mean: Path, quora_file: Path
               ) -> tuple[Path, Path, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("beir")
    beir = tmp / "quora-beir"
    made = make_beir(quora_file, beir)
    root = tmp / "root"
    r = cli("build", "--data", str(beir), "--model", str(minilm_mean), "--root", str(root), "--codec", "Flat",
            "--threads", "2")
    assert r.returncode == 0, r.stderr
    print("\n" + r.stdout)
    return beir, IndexRoot(root).current_dir(), made


def test_beir_build_evaluates_its_queries(beir_build: tuple[Path, Path, dict[str, Any]]) -> None:
    beir, folder, made = beir_build
    manifest = Manifest.load(folder)
    d, e = manifest.data, manifest.eval
    assert d.format == "beir" and d.n_docs == len(made["docs"]) and d.n_queries == len(made["dups"])
    assert d.eval_source == f"{beir / 'queries.jsonl'} + {beir / 'qrels' / 'test.tsv'}"
    assert d.eval_judged_docs_missing == 1 and d.fields is not None and d.fields.id == "_id"
    assert d.fields.title == "title" and d.metadata_schema == {"bucket": "int", "title": "str"}
    assert e is not None and e.query_set == d.eval_source and e.n_queries == d.n_queries
    # all-MiniLM-L6-v2 saw Quora duplicates in training: near-perfect here, and an IVF close to exact search
    assert 0.8 < e.mrr_at_10 <= 1 and 0.75 < e.ndcg_at_10 <= 1 and e.recall_at_10 <= e.recall_at_100 < 1
    assert abs(e.mrr_at_10 - e.exact_mrr_at_10) < 0.05 and e.exact_recall_at_10 <= e.exact_recall_at_100

    # the exact figures recomputed here with numpy over the index's own vectors
    version = IndexVersion(folder)
    try:
        graded = version.store.graded_eval_set()
        qvecs = version.query_vectors()
        ids, vecs = ids_and_vectors(folder)
    finally:
        version.close()
    assert graded is not None and qvecs is not None
    scores = qvecs @ vecs.T
    ranked = np.full((len(qvecs), 100), -1, dtype=np.int64)
    for i, self_doc in enumerate(graded.self_docs):
        order = ids[np.argsort(-scores[i], kind="stable")]
        order = order[order != self_doc]  # BEIR drops the query's own id from its results
        ranked[i] = order[:100]
    assert all(s >= 0 for s in graded.self_docs)  # every query is also a document here
    want = mean_metrics(ranked, graded.qrels)
    assert want["mrr_at_10"] == pytest.approx(e.exact_mrr_at_10, abs=2e-3)
    assert want["ndcg_at_10"] == pytest.approx(e.exact_ndcg_at_10, abs=2e-3)
    assert want["recall_at_10"] == pytest.approx(e.exact_recall_at_10, abs=2e-3)
    assert want["recall_at_100"] == pytest.approx(e.exact_recall_at_100, abs=2e-3)
    # keeping the query's own document would push each relevant one down a place
    kept = np.stack([ids[np.argsort(-scores[i], kind="stable")][:100] for i in range(len(qvecs))])
    assert mean_metrics(kept, graded.qrels)["mrr_at_10"] < want["mrr_at_10"] - 0.3


def test_eval_with_your_own_queries_on_a_corpus_built_without_them(beir_build: tuple[Path, Path, dict[str, Any]],
                                                                   minilm_mean: Path, tmp_path: Path) -> None:
    beir, folder, made = beir_build
    corpus = tmp_path / "corpus.jsonl"  # the same documents, in the same order, as a plain JSONL corpus
    corpus.write_text((beir / "corpus.jsonl").read_text())
    root = tmp_path / "root"
    r = cli("build", "--data", str(corpus), "--id-field", "_id", "--title-field", "title", "--model",
            str(minilm_mean), "--root", str(root), "--codec", "Flat", "--threads", "2")
    assert r.returncode == 0, r.stderr
    plain = IndexRoot(root).current_dir()
    assert Manifest.load(plain).eval is None
    r = cli("eval", "--root", str(root), "--queries", str(beir), "--json", "--exact-all")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    ref = Manifest.load(folder).eval
    assert ref is not None
    for key in ("mrr_at_10", "ndcg_at_10", "recall_at_10", "recall_at_100", "exact_mrr_at_10", "exact_ndcg_at_10",
                "exact_recall_at_10", "exact_recall_at_100", "n_queries"):
        assert got[key] == pytest.approx(getattr(ref, key), abs=1e-6), key  # same vectors, same judgments
    manifest = Manifest.load(plain)
    assert manifest.eval is None and list(manifest.query_evals) == [got["query_set"]]  # stored apart from the swap
                                                                                       # gate's
    assert manifest.query_evals[got["query_set"]].ndcg_at_10 == got["ndcg_at_10"]
    # a queries file and a qrels file work too; the table names the figures
    r = cli("eval", "--root", str(root), "--queries", str(beir / "queries.jsonl"), "--qrels",
            str(beir / "qrels" / "test.tsv"))
    assert r.returncode == 0, r.stderr
    for label in ("MRR@10", "nDCG@10", "Recall@10", "Recall@100", "exact search nDCG@10",
                  "exact search Recall@100", "queries + qrels"):
        assert label in r.stdout
    # judgments that name no query of the file are a clear error
    bad = tmp_path / "qrels.tsv"
    bad.write_text("nobody\t1\t1\n")
    r = cli("eval", "--root", str(root), "--queries", str(beir / "queries.jsonl"), "--qrels", str(bad))
    assert r.returncode == 2 and "no query of" in r.stderr and "Traceback" not in r.stderr
