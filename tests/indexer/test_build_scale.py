"""What keeps a 10M-document build bounded (real Parquet files, real SQLite, real FAISS): Parquet read a batch at a
time and column-wise gives the same store and vectors as the rows read one by one; calibration's probes stop
growing with N and its search gallops instead of bisecting from nlist/2; two-level k-means gives unit centroids
as good as flat k-means's, and adding through its groups finds the nearest list for most vectors."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import indexer.corpus as corpus_mod
import indexer.runtime.faiss.training as faiss_training
from indexer.calibrate import calibrate_index
from indexer.corpus import open_corpus
from indexer.corpus_batches import columnar_batch
from indexer.ingest import ingest
from indexer.probes import CALIBRATION_PAIRS, MIN_PROBES, PROBE_SAMPLE, probe_count
from indexer.runtime.ann import IvfParams
from indexer.runtime.encoder import OnnxEncoder
from indexer.runtime.faiss.exact import exact_search
from indexer.runtime.faiss.ivf import IvfIndex
from indexer.runtime.faiss.kmeans import two_level_centroids
from indexer.runtime.faiss.training import build_ivf
from indexer.runtime.store_writer import CorpusStoreWriter

DIM = 32  # the tiny exported encoder's


def _table(n: int, start: int, rng: np.random.Generator, *, nested: bool = False) -> pa.Table:
    ids = list(range(start, start + n))
    ids[5] = ids[2]  # a repeated id: the later row wins
    texts = [f"  text {i} über ünïcode " for i in ids]
    texts[7] = "   "  # empty after stripping: skipped
    floats = rng.normal(size=n)
    floats[3], floats[4] = np.nan, np.inf  # missing, as the row reader has it
    cols: dict[str, object] = {
        "id": pa.array(ids, pa.int64()), "text": texts,
        "title": [None if i % 3 else f"title {i}" for i in range(n)],
        "bucket": pa.array([i % 7 if i % 5 else None for i in range(n)], pa.int32()),
        "score": floats, "flag": [bool(i % 2) for i in range(n)],
        "lang": [None if i % 4 == 0 else "e\"n\n" for i in range(n)], "nothing": pa.nulls(n),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(rng.normal(size=n * DIM).astype(np.float32)), DIM),
    }
    if nested:  # a list column: this file's batches go row by row
        cols["tags"] = [["a", str(i)] for i in range(n)]
    return pa.table(cols)


def _store(path: Path) -> tuple[dict, dict, list]:
    con = sqlite3.connect(path)
    try:
        docs = dict(con.execute("SELECT id, text FROM docs"))
        ext = {r[0]: r[1:] for r in con.execute("SELECT id, ext_id, metadata FROM doc_ext")}
        meta = sorted(con.execute("SELECT key, value, id FROM doc_meta"))
        return docs, ext, meta
    finally:
        con.close()


def test_parquet_read_column_wise_equals_the_rows_read_one_by_one(tmp_path: Path, tiny_exported: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(corpus_mod, "PARQUET_BATCH_ROWS", 64)  # several batches per file
    rng = np.random.default_rng(0)
    folder = tmp_path / "corpus"
    folder.mkdir()
    pq.write_table(_table(300, 0, rng), folder / "part-0.parquet")
    pq.write_table(_table(100, 1000, rng, nested=True), folder / "part-1.parquet")
    source = open_corpus(folder, title_field="title")
    enc = OnnxEncoder(tiny_exported, threads=1)
    writer = CorpusStoreWriter(tmp_path / "store.sqlite")
    res = ingest(source, writer, enc, progress=False, vectors_path=tmp_path / "vectors.f32")
    schema = writer.finish()

    # the reference: every row read one by one (`make_doc`), the last of a repeated id winning
    expected: dict[int, tuple[str, str, np.ndarray]] = {}
    for doc in source.docs():
        if doc.text:
            v = np.asarray(doc.vector, dtype=np.float32)
            expected[doc.ext_id] = (doc.text, json.dumps(doc.metadata, ensure_ascii=False), v / np.linalg.norm(v))
    docs, ext, meta = _store(tmp_path / "store.sqlite")
    assert res.n_docs == len(expected) == len(docs) and res.skipped_empty == 2 and res.duplicate_ids == 2
    for i, (text, meta_json, vec) in expected.items():
        assert docs[i] == text and ext[i] == (i, meta_json)
        np.testing.assert_allclose(res.vectors[res.ids.row[i]], vec, atol=1e-6)  # type: ignore[index]
    assert {"bucket", "score", "flag", "lang", "title", "tags"} <= set(schema) and "nothing" not in schema
    assert ("bucket", 3, 3) in meta and not any(k == "score" and i == 3 for k, _, i in meta)  # NaN: missing

    batch = next(pq.ParquetFile(folder / "part-0.parquet").iter_batches(batch_size=64))
    assert columnar_batch(batch, source.fields, folder, 0, None) is not None  # scalars: read column-wise
    nested = next(pq.ParquetFile(folder / "part-1.parquet").iter_batches(batch_size=64))
    assert columnar_batch(nested, source.fields, folder, 0, None) is None  # a list column: row by row
    nul = pa.table({"id": [1], "text": ["t"], "lang": ["a\x00b"]}).to_batches()[0]
    assert columnar_batch(nul, source.fields, folder, 0, None) is None  # the row reader refuses it, by name


def test_calibration_probes_are_bounded_as_the_corpus_grows() -> None:
    assert probe_count(100_000) == probe_count(CALIBRATION_PAIRS // PROBE_SAMPLE) == PROBE_SAMPLE
    assert probe_count(10_000_000) == MIN_PROBES  # exact-search work stops growing with N
    assert probe_count(5_000_000) * 5_000_000 <= CALIBRATION_PAIRS
    assert probe_count(10**9) == MIN_PROBES and probe_count(10, 50) == 50


def _clustered(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(200, DIM)).astype(np.float32)
    x = centres[rng.integers(0, 200, n)] + 0.6 * rng.normal(size=(n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_calibration_gallops_and_never_scans_far_past_its_answer() -> None:
    x = _clustered(8_000, 1)
    index, _, _ = build_ivf(x, np.arange(len(x)), 128, 1)
    cal = calibrate_index(IvfIndex(index, IvfParams(nlist=128, nlist_requested=128, nprobe=1)), 0.9, sample=200)
    tried = [m.nprobe for m in cal.measured]
    assert cal.reached and tried[:3] == [1, 2, 4][: len(tried[:3])]
    assert max(tried) <= 2 * cal.nprobe  # a bisection over 1..128 starts at 64


def test_two_level_centroids_are_unit_and_as_good_as_flat_kmeans(monkeypatch: pytest.MonkeyPatch) -> None:
    x = _clustered(48 * 128, 2)
    levels = two_level_centroids(x, 128, seed=3)
    assert levels.centroids.shape == (128, DIM) and sorted(set(levels.group_of)) == list(range(len(levels.groups)))
    np.testing.assert_allclose(np.linalg.norm(levels.centroids, axis=1), 1.0, atol=1e-5)
    nearest = (x @ levels.centroids.T).argmax(axis=1)  # the list scoring every list would give
    assert np.mean(levels.assign(x) == nearest) >= 0.9  # through the groups: the same list for most vectors
    queries = _clustered(200, 4)
    recall = {}
    for name, from_nlist in (("flat", 10**9), ("two-level", 128)):  # the build's own switch, moved down to 128
        monkeypatch.setattr(faiss_training, "TWO_LEVEL_FROM_NLIST", from_nlist)
        index, _, _ = build_ivf(x, np.arange(len(x)), 128, 6)
        _, exact = exact_search(index, queries, 10)
        _, got = index.search(queries, 10)
        recall[name] = np.mean([len(set(g) & set(e)) / 10 for g, e in zip(got, exact, strict=True)])
    assert recall["two-level"] >= recall["flat"] - 0.05, recall
