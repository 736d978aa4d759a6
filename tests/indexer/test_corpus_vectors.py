"""`indexer build --data` with a vector column (real files, real FAISS, the tiny exported encoder): JSONL
`"vector"`, Parquet `list<float32>` and `fixed_size_list`, a renamed field; the rows' vectors are indexed as
brought (normalised), nothing is encoded; a wrong dimension, NaN or infinity, an all-zero vector, a string, or a
mix of rows with and without vectors is refused naming the file and row, exit 2, nothing published."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from indexer.build import BuildConfig, build
from indexer.corpus_rows import CorpusFormatError
from indexer.runtime.layout import IndexRoot
from indexer.runtime.version import IndexVersion
from tests.conftest import indexer_cli

DIM = 32
N = 120


def vectors(n: int = N) -> np.ndarray:
    return np.random.default_rng(1).normal(size=(n, DIM)).astype(np.float32) * 2.5


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def rows(vecs: np.ndarray, field: str = "vector") -> list[dict]:
    return [{"id": i, "text": f"how to learn python {i}", "bucket": i % 3, field: vecs[i].tolist()}
            for i in range(len(vecs))]


def cfg(data: Path, root: Path, model: Path, **kw: object) -> BuildConfig:
    kw = {"index": "flat"} | kw
    return BuildConfig(model_dir=model, data=str(data), root=root, evaluate=False, threads=1, lexical=False,
                       **kw)  # type: ignore[arg-type]


def held(root: Path) -> tuple[np.ndarray, np.ndarray]:
    ir = IndexRoot(root)
    v = IndexVersion(ir.version_dir(ir.current_version() or ""))
    try:
        assert v.manifest.data.vectors == "brought" and v.manifest.build_seconds.encode_docs_s == 0.0
        assert "vector" not in v.manifest.data.metadata_schema  # never metadata
        ids, vecs = v.ann.stored_vectors()
        return ids, vecs
    finally:
        v.close()


def test_jsonl_and_parquet_vectors_are_indexed_as_brought(tmp_path: Path, tiny_exported: Path) -> None:
    vecs = vectors()
    unit = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    flat = pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel()), DIM)
    table = pa.table({"id": list(range(N)), "text": [f"text {i}" for i in range(N)], "emb": flat})
    pq.write_table(table, tmp_path / "fixed.parquet")
    listed = table.set_column(2, "vector", pa.array([v.tolist() for v in vecs], pa.list_(pa.float32())))
    pq.write_table(listed, tmp_path / "list.parquet")
    cases = {"jsonl": (jsonl(tmp_path / "v.jsonl", rows(vecs)), {}),
             "fixed": (tmp_path / "fixed.parquet", {"vector_field": "emb"}),
             "list": (tmp_path / "list.parquet", {})}
    for name, (data, kw) in cases.items():
        root = tmp_path / f"root-{name}"
        build(cfg(data, root, tiny_exported, **kw))
        ids, got = held(root)
        np.testing.assert_allclose(got[np.argsort(ids)], unit, atol=1e-6, err_msg=name)


def test_huge_and_tiny_vectors_are_normalised_not_zeroed_or_refused(tmp_path: Path, tiny_exported: Path) -> None:
    """A vector's norm is taken in float64: [1e19, ...] (its float32 sum of squares overflows) and [2e-38, ...]
    (it underflows) are stored as unit vectors pointing where they point, not as zeros or refused."""
    vecs = vectors()
    unit = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    data = rows(vecs)
    data[3]["vector"] = (vecs[3].astype(np.float64) * 1e19).tolist()
    data[4]["vector"] = [2e-38] * (DIM - 1) + [0.0]
    data[5]["vector"] = (vecs[5].astype(np.float64) * 1e-30).tolist()
    build(cfg(jsonl(tmp_path / "v.jsonl", data), tmp_path / "root", tiny_exported))
    ids, got = held(tmp_path / "root")
    got = got[np.argsort(ids)]
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(got[3], unit[3], atol=1e-6)
    np.testing.assert_allclose(got[4], np.r_[np.full(DIM - 1, 1 / np.sqrt(DIM - 1)), 0.0], atol=1e-6)
    np.testing.assert_allclose(got[5], unit[5], atol=1e-6)


BAD = {  # name: (row index to spoil, its vector, what the message says)
    "dimension": (4, [0.1] * (DIM - 1), "dimension 31"),
    "nan": (5, [0.1] * (DIM - 1) + [float("nan")], "NaN or infinity"),
    "inf": (6, [float("inf")] * DIM, "NaN or infinity"),
    "float32 overflow": (8, [1e39] * DIM, "beyond float32's range"),
    "float32 zeros": (9, [1e-50] * DIM, "all zeros"),
    "zeros": (2, [0.0] * DIM, "all zeros"),
    "string": (3, "0.1,0.2", "a str"),
    "missing": (7, None, "every row brings a vector, or none does"),
    "a boolean item": (1, [0.1] * (DIM - 1) + [True], "holds true, not a number"),  # not 1.0, as HTTP refuses it
    "a numeric string item": (10, ["0.5"] * DIM, 'holds "0.5", not a number'),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_vectors_are_refused_with_file_and_row_nothing_published(case: str, tmp_path: Path,
                                                                     tiny_exported: Path) -> None:
    row, value, says = BAD[case]
    data = rows(vectors())
    if value is None:
        del data[row]["vector"]
    else:
        data[row]["vector"] = value
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in data))  # NaN/Infinity as Python's json writes them
    root = tmp_path / "root"
    with pytest.raises(CorpusFormatError, match=rf"{path}:{row + 1}: .*{says}"):
        build(cfg(path, root, tiny_exported))
    assert IndexRoot(root).current_version() is None
    assert not (root / "versions").exists() or not any((root / "versions").iterdir())


def test_parquet_null_and_ragged_vectors_and_the_cli_exit_code(tmp_path: Path, tiny_exported: Path) -> None:
    vecs = vectors(10).tolist()
    ragged = vecs[:7] + [vecs[7][:16]] + vecs[8:]
    for name, column in (("null", vecs[:7] + [None] + vecs[8:]), ("ragged", ragged)):
        table = pa.table({"id": list(range(10)), "text": [f"t {i}" for i in range(10)],
                          "vector": pa.array(column, pa.list_(pa.float32()))})
        pq.write_table(table, tmp_path / f"{name}.parquet")
        r = indexer_cli("build", "--model", str(tiny_exported), "--data", str(tmp_path / f"{name}.parquet"),
                        "--root", str(tmp_path / "root"), "--no-eval", "--threads", "1")
        assert r.returncode == 2, r.stderr
        assert f"{name}.parquet:8: " in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert IndexRoot(tmp_path / "root").current_version() is None


def test_memory_budget_picks_the_codec_that_fits_and_sq8_serves(tmp_path: Path, tiny_exported: Path) -> None:
    """`--memory-budget` between what SQ8 and SQfp16 need gives SQ8 (recorded with its reason); its lists decode
    to the vectors for exact search; a budget that not even SQ8 fits is refused before any work."""
    n = 2000
    vecs = np.random.default_rng(2).normal(size=(n, DIM)).astype(np.float32)
    data = jsonl(tmp_path / "v.jsonl", rows(vecs))
    sq8, fp16 = n * (DIM + 8), n * (2 * DIM + 8)  # + the quantizer's nlist × dim × 4 bytes
    root = tmp_path / "root"
    build(BuildConfig(model_dir=tiny_exported, data=str(data), root=root, index="auto", evaluate=False, threads=1,
                      lexical=False, memory_budget=(sq8 + fp16) // 2 + 64 * DIM * 4))
    ir = IndexRoot(root)
    v = IndexVersion(ir.version_dir(ir.current_version() or ""))
    try:
        p = v.manifest.index.params
        assert p.kind == "ivf" and p.codec == "SQ8" and "SQ8 needs" in (p.nlist_reason or "")  # type: ignore[union-attr]
        assert v.manifest.index.factory.endswith(",SQ8")
        unit = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
        _, top = v.ann.exact_search(unit[:20], 1)
        assert (top[:, 0] == np.arange(20)).all()  # 8-bit codes still find each vector itself
    finally:
        v.close()
    with pytest.raises(ValueError, match="too small"):
        build(cfg(data, tmp_path / "small", tiny_exported, index="ivf", memory_budget=sq8 // 2))
