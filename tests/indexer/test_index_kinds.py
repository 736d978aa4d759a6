"""`indexer build --index auto|flat|ivf|hnsw` end to end with the real CLI, a real (tiny) ONNX encoder, FAISS and
SQLite: what `auto` picks and why, HNSW's `--target-recall` calibration of ef_search, `indexer build --add` and
`indexer compact` on an HNSW version (which cannot remove vectors in place), `indexer eval` with the kind's own
search parameter, and the clear refusals (IVF options with another kind, --engine ray with flat or hnsw, nprobe
for a version without lists)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from indexer.runtime.ann import AUTO_FLAT_BELOW
from indexer.runtime.encoder import OnnxEncoder
from indexer.runtime.layout import IndexRoot
from indexer.runtime.manifest import Manifest
from indexer.runtime.version import IndexVersion
from indexer.runtime.writelog import Delete, Upsert, open_log
from tests.conftest import REPO

ROWS = 400


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "indexer.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600)


def build(root: Path, model: Path, quora: Path, *args: str) -> Manifest:
    r = cli("build", "--root", str(root), "--model", str(model), "--data", str(quora), "--rows", str(ROWS),
            "--threads", "1", "--keep", "10", *args)
    assert r.returncode == 0, r.stderr
    return Manifest.load(IndexRoot(root).current_dir())


def test_auto_is_flat_for_a_small_corpus_and_ivf_when_ivf_options_are_given(tiny_exported: Path, quora_file: Path,
                                                                            tmp_path: Path) -> None:
    manifest = build(tmp_path / "auto", tiny_exported, quora_file, "--no-eval")
    assert manifest.data.n_docs < AUTO_FLAT_BELOW
    assert manifest.index.kind == "flat" and manifest.index.nlist is None and manifest.index.nprobe is None
    assert manifest.index.factory == "IDMap2,Flat"
    ivf = build(tmp_path / "ivf", tiny_exported, quora_file, "--nprobe", "3", "--no-eval")
    assert ivf.index.kind == "ivf" and ivf.index.nprobe == 3 and ivf.index.params.nprobe == 3  # type: ignore[union-attr]
    # evaluated: a flat version is exact, so its top 10 is exact search's
    ev = build(tmp_path / "flat-eval", tiny_exported, quora_file, "--index", "flat")
    assert ev.eval is not None and ev.eval.ann_recall_at_10 == 1.0 and ev.eval.mrr_at_10 == ev.eval.exact_mrr_at_10
    assert ev.eval.index_kind == "flat" and ev.eval.search_params == {} and ev.eval.nprobe is None


def test_hnsw_calibrates_ef_search_and_serves_it(tiny_exported: Path, quora_file: Path, tmp_path: Path) -> None:
    manifest = build(tmp_path / "root", tiny_exported, quora_file, "--index", "hnsw", "--hnsw-m", "8",
              "--target-recall", "0.99")
    cal = manifest.index.calibration
    assert manifest.index.kind == "hnsw" and cal is not None and cal.knob == "ef_search" and cal.target_recall == 0.99
    assert cal.reached and cal.recall_at_10 >= 0.99
    assert manifest.index.params.ef_search == cal.value and manifest.index.params.m == 8  # type: ignore[union-attr]
    assert manifest.eval is not None and manifest.eval.search_params == {"ef_search": cal.value}
    version = IndexVersion(IndexRoot(tmp_path / "root").current_dir())  # what the API opens
    try:
        assert version.search_defaults() == {"ef_search": cal.value}
    finally:
        version.close()
    # eval takes the kind's own parameter, and refuses IVF's with the reason
    r = cli("eval", "--root", str(tmp_path / "root"), "--json", "--ef-search", "400")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["index_kind"] == "hnsw" and out["search_params"] == {"ef_search": 400} and out["nprobe"] is None
    bad = cli("eval", "--root", str(tmp_path / "root"), "--nprobe", "4")
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    assert "'nprobe' is not a search parameter of this version's hnsw index; it takes ef_search" in bad.stderr


def test_add_and_compact_on_an_hnsw_version(tiny_exported: Path, quora_file: Path, tmp_path: Path) -> None:
    """HNSW cannot remove in place: replacing documents (`--add`) and folding deletes (`compact`) rebuild its
    graph without them; the version holds exactly the documents it should."""
    root = tmp_path / "root"
    base = build(root, tiny_exported, quora_file, "--index", "hnsw", "--no-eval")
    first = IndexVersion(IndexRoot(root).current_dir())
    held = sorted(int(i) for i in first.ann.stored_vectors()[0])
    first.close()
    replaced, new_id = held[0], 9_999_999
    added = tmp_path / "add.tsv"
    added.write_text(f"id\tquestion\n{replaced}\tA replaced question about rivers?\n{new_id}\tA new question?\n")
    r = cli("build", "--root", str(root), "--add", str(added), "--threads", "1", "--keep", "10", "--no-eval")
    assert r.returncode == 0, r.stderr
    v = IndexVersion(IndexRoot(root).current_dir())
    try:
        assert v.kind == "hnsw" and v.ntotal == base.index.ntotal + 1
        assert v.manifest.index.trained_ntotal is None  # no quantizer to drift from: no rebuild due
        enc = OnnxEncoder(tiny_exported)
        ids, vecs = v.ann.stored_vectors()  # the replaced id holds the new text's vector, once
        assert (ids == replaced).sum() == 1
        assert np.allclose(vecs[ids == replaced][0], enc.encode(["A replaced question about rivers?"])[0], atol=1e-5)
        assert v.store.texts([replaced])[replaced] == "A replaced question about rivers?"
    finally:
        v.close()
    log = open_log(root, create=True)
    assert log is not None
    gone = held[1:4]
    log.append([Delete(g) for g in gone] + [Upsert(7_777_777, "written through the API", {},
                                                   enc.encode(["written through the API"])[0],
                                                   enc.meta.onnx_sha256)])
    log.close()
    r = cli("compact", "--root", str(root), "--threads", "1", "--no-eval")
    assert r.returncode == 0, r.stderr
    v = IndexVersion(IndexRoot(root).current_dir())
    try:
        ids = set(int(i) for i in v.ann.stored_vectors()[0])
        assert v.kind == "hnsw" and not ids & set(gone) and {7_777_777, new_id, replaced} <= ids
        assert v.ntotal == base.index.ntotal + 1 - len(gone) + 1
        query = enc.encode(["written through the API"])
        scores, found = v.search(query, 1)
        assert scores[0, 0] >= 0.9999  # the written vector itself is found (a tie may name another id)
        stored_ids, stored = v.ann.stored_vectors()
        assert np.allclose(stored[stored_ids == 7_777_777][0], query[0], atol=1e-5)
    finally:
        v.close()


def test_clear_refusals(tiny_exported: Path, quora_file: Path, tmp_path: Path) -> None:
    r = cli("build", "--root", str(tmp_path / "a"), "--model", str(tiny_exported), "--data", str(quora_file),
            "--rows", "50", "--index", "flat", "--nprobe", "3")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "--nprobe: IVF options, not for --index flat" in r.stderr
    assert not IndexRoot(tmp_path / "a").versions()
    for kind in ("flat", "hnsw"):
        r = cli("build", "--root", str(tmp_path / "b"), "--model", str(tiny_exported), "--data", str(quora_file),
                "--rows", "50", "--engine", "ray", "--index", kind)
        assert r.returncode != 0 and "Traceback" not in r.stderr
        assert "--engine ray builds IVF indexes only" in r.stderr and f"--index {kind}" in r.stderr
    flat = build(tmp_path / "c", tiny_exported, quora_file, "--no-eval")
    assert flat.index.kind == "flat"
    r = cli("eval", "--root", str(tmp_path / "c"), "--nprobe", "2")
    assert r.returncode != 0 and "it takes none (it searches exactly)" in r.stderr


def test_build_help_names_the_kinds() -> None:
    r = cli("build", "--help")
    assert r.returncode == 0 and "--index {auto,flat,ivf,hnsw}" in r.stdout
    assert f"flat below {AUTO_FLAT_BELOW:,}" in " ".join(r.stdout.split())
    np.testing.assert_equal(True, "--ef-search" in r.stdout and "--hnsw-m" in r.stdout)


def test_auto_switches_to_ivf_at_the_measured_crossover(tmp_path: Path) -> None:
    from indexer.build_config import BuildConfig, index_params

    auto = BuildConfig(model_dir=tmp_path, data="x", root=tmp_path, index="auto")
    assert index_params(auto, AUTO_FLAT_BELOW - 1).kind == "flat"
    ivf = index_params(auto, AUTO_FLAT_BELOW)
    assert ivf.kind == "ivf" and ivf.nprobe == 20 and ivf.nlist == AUTO_FLAT_BELOW // 39  # type: ignore[union-attr]
    hnsw = index_params(BuildConfig(model_dir=tmp_path, data="x", root=tmp_path, index="hnsw", ef_search=48), 10)
    assert hnsw.kind == "hnsw" and hnsw.ef_search == 48  # type: ignore[union-attr]
