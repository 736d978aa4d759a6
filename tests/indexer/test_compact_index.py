"""`indexer compact --index auto` on real files (a real build with the tiny encoder, a real write log, FAISS): the
index kind follows the size — a flat version written past `--index auto`'s threshold becomes IVF with nlist by
size and its nprobe calibrated, answering like exact search; `--index keep` grows the flat index in place; an IVF
version whose lists drifted past --rebuild-after is trained again."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from indexer.compact import compact
from indexer.runtime.ann import AUTO_FLAT_BELOW
from indexer.runtime.faiss.training import auto_nlist
from indexer.runtime.layout import IndexRoot
from indexer.runtime.version import IndexVersion
from indexer.runtime.writelog import Upsert, open_log

BASE = 60


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory, tiny_exported: Path) -> Path:
    from indexer.build import BuildConfig, build

    work = tmp_path_factory.mktemp("compact-index")
    dim = json.loads((tiny_exported / "encoder.json").read_text())["dim"]
    data = work / "docs.jsonl"
    data.write_text("".join(json.dumps({"id": i, "text": f"doc {i}", "vector": unit(i, dim).tolist()}) + "\n"
                            for i in range(BASE)))
    root = work / "root"
    build(BuildConfig(model_dir=tiny_exported, data=str(data), root=root, index="flat", threads=1, evaluate=False,
                      lexical=False))
    return root


def unit(seed: int, dim: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return v / np.linalg.norm(v)


def log_writes(root: Path, batches: Callable[[int, str], list[list[Any]]]) -> None:
    """`batches(dim, encoder sha)`'s entries appended to the root's write log, a batch per append."""
    version = IndexVersion(IndexRoot(root).current_dir())
    dim, sha = version.dim, version.manifest.model.onnx_sha256
    version.close()
    wlog = open_log(root, create=True)
    assert wlog is not None
    try:
        for batch in batches(dim, sha):
            wlog.append(batch)
    finally:
        wlog.close()


def write(root: Path, ids: range) -> None:
    log_writes(root, lambda dim, sha: [[Upsert(i, f"written {i}", {}, unit(i, dim), sha)
                                        for i in range(start, min(start + 1000, ids.stop))]
                                       for start in range(ids.start, ids.stop, 1000)])


@pytest.fixture()
def root(template: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "root"
    shutil.copytree(template, dst, symlinks=True)
    return dst


def test_a_flat_version_written_past_the_threshold_becomes_ivf_and_answers_like_exact(root: Path) -> None:
    n = AUTO_FLAT_BELOW + 500
    write(root, range(BASE, n))
    kept = compact(root, run_eval=False, keep=10, index_policy="keep")  # by hand, as before: grown in place
    assert kept.manifest is not None and kept.manifest.index.kind == "flat" and kept.resized is None
    write(root, range(n, n + 10))
    r = compact(root, run_eval=False, keep=10, index_policy="auto")
    m = r.manifest
    assert m is not None and r.resized is not None and "ivf" in r.resized
    assert m.index.kind == "ivf" and m.index.ntotal == n + 10
    assert m.index.params.nlist_requested == auto_nlist(n + 10)  # type: ignore[union-attr]
    assert m.index.nprobe_calibration is not None  # its search parameter calibrated on the new lists
    assert m.index.trained_ntotal is None and m.index.added_since_training == 0  # trained on all, as a build
    version = IndexVersion(IndexRoot(root).current_dir())
    try:
        queries = np.stack([unit(i, version.dim) for i in (3, 500, 9_999, n + 5)])
        _, ids = version.ann.search(queries, 1)
        assert ids[:, 0].tolist() == [3, 500, 9_999, n + 5]  # every document, base and written, is found
    finally:
        version.close()
    # nothing new: no version; written again past --rebuild-after's drift: the IVF lists are trained again
    assert compact(root, run_eval=False, index_policy="auto").manifest is None
    write(root, range(n + 10, n + 10 + (n + 10) // 4))
    again = compact(root, run_eval=False, keep=10, index_policy="auto")
    assert again.resized is not None and "added since" in again.resized
    assert again.manifest is not None and again.manifest.index.trained_ntotal is None


def test_a_small_collection_stays_flat_under_auto(root: Path) -> None:
    write(root, range(BASE, BASE + 50))
    r = compact(root, run_eval=False, index_policy="auto")
    assert r.manifest is not None and r.manifest.index.kind == "flat" and r.resized is None


def test_a_rebuild_takes_the_written_vectors_straight_into_the_new_lists(root: Path, monkeypatch: pytest.MonkeyPatch
                                                                          ) -> None:
    """When `--index auto` rebuilds, the written vectors go into the new index only (adding them to the old lists
    first was a search of every centroid per vector, thrown away); a replaced document keeps its new vector and a
    deleted one is gone."""
    from indexer.runtime.faiss.flat import FlatIndex
    from indexer.runtime.writelog import Delete

    n = AUTO_FLAT_BELOW + 200
    write(root, range(BASE, n))
    version = IndexVersion(IndexRoot(root).current_dir())
    dim, sha = version.dim, version.manifest.model.onnx_sha256
    version.close()
    wlog = open_log(root, create=False)
    assert wlog is not None
    try:  # document 3 replaced with another vector, document 4 deleted
        wlog.append([Upsert(3, "replaced", {}, unit(777_777, dim), sha), Delete(4)])
    finally:
        wlog.close()
    added: list[int] = []
    real_add = FlatIndex.add

    def counting_add(self: FlatIndex, vectors: np.ndarray, ids: np.ndarray) -> None:
        added.append(len(ids))
        real_add(self, vectors, ids)

    monkeypatch.setattr(FlatIndex, "add", counting_add)
    r = compact(root, run_eval=False, keep=10, index_policy="auto")
    assert r.resized is not None and r.manifest is not None and r.manifest.index.kind == "ivf"
    assert added == []  # the flat parent's index was never grown
    version = IndexVersion(IndexRoot(root).current_dir())
    try:
        assert version.ann.ntotal == n - 1
        held = version.ann.vectors_of(np.asarray([3, BASE, n - 1], dtype=np.int64))
        np.testing.assert_allclose(held, np.stack([unit(777_777, dim), unit(BASE, dim), unit(n - 1, dim)]),
                                   atol=1e-3)  # float16 codes
        with pytest.raises(KeyError):
            version.ann.vectors_of(np.asarray([4], dtype=np.int64))
    finally:
        version.close()


def test_a_lexical_engine_auto_chose_is_chosen_again_by_size_and_one_named_is_kept(
        tmp_path: Path, tiny_exported: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from indexer.runtime import lexical
    from indexer.runtime.empty_version import create_empty_version

    root = tmp_path / "root"
    create_empty_version(root, tiny_exported)  # a collection made over HTTP: auto chose bm25s for no documents
    first = IndexVersion(IndexRoot(root).current_dir())
    assert first.manifest.lexical is not None and first.manifest.lexical.engine == "bm25s"
    assert first.manifest.search_mode() == "hybrid"
    first.close()
    monkeypatch.setattr(lexical, "AUTO_PISA_FROM", 40)  # as if 40 documents were 1M
    write(root, range(0, 30))
    small = compact(root, run_eval=False, keep=10, index_policy="auto").manifest
    assert small is not None and small.lexical is not None
    assert (small.lexical.engine, small.lexical.n_docs) == ("bm25s", 30) and small.lexical.vocabulary > 0
    write(root, range(30, 50))
    kept = compact(root, run_eval=False, keep=10, index_policy="keep").manifest  # by hand: the engine kept
    assert kept is not None and kept.lexical is not None and (kept.lexical.engine, kept.lexical.n_docs) == ("bm25s", 50)
    write(root, range(50, 55))
    grown = compact(root, run_eval=False, keep=10, index_policy="auto").manifest
    assert grown is not None and grown.lexical is not None
    assert (grown.lexical.engine, grown.lexical.n_docs) == ("pisa", 55), grown.lexical
    version = IndexVersion(IndexRoot(root).current_dir())
    try:  # the new engine answers: "written 52" holds the term "52" alone
        assert version.lexical is not None
        _, fids = version.lexical.search("52", 3)
        assert [version.ext_ids([int(f)])[int(f)] for f in fids] == [52]
    finally:
        version.close()


def test_a_compaction_analyses_only_what_was_written_and_keeps_the_rest_as_its_parent_analysed_it(
        tmp_path: Path, tiny_exported: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The compacted version's analysed terms (`indexer.runtime.analysed`) are, row for row, what analysing its
    store's texts gives — documents replaced, deleted and added since the parent included — and only the written
    ones were analysed; BM25 finds the replaced documents by their new words only."""
    import logging

    from indexer.runtime.analysed import OFFSETS_DTYPE, OFFSETS_FILE, TERMS_DTYPE, TERMS_FILE, VOCAB_FILE
    from indexer.runtime.empty_version import create_empty_version
    from indexer.runtime.lexical import LEXICAL_DIR, ROWS_FILE, Analyzer
    from indexer.runtime.store import Store
    from indexer.runtime.writelog import Delete

    root = tmp_path / "root"
    create_empty_version(root, tiny_exported)
    write(root, range(0, 40))  # "written N"
    assert compact(root, run_eval=False, keep=10, index_policy="auto").manifest is not None
    log_writes(root, lambda dim, sha: [
        [Upsert(i, f"replaced with zebras {i}", {}, unit(i, dim), sha) for i in (3, 17, 29)],
        [Delete(i) for i in (5, 6)],
        [Upsert(i, f"new about walruses {i}", {}, unit(i, dim), sha) for i in (40, 41)]])
    with caplog.at_level(logging.INFO, logger="indexer.runtime.lexical"):
        manifest = compact(root, run_eval=False, keep=10, index_policy="auto").manifest
    assert manifest is not None and manifest.lexical is not None and manifest.lexical.n_docs == 40
    assert ": 40 documents," in caplog.text and "(5 analysed, 35 as the parent analysed them)" in caplog.text
    folder = IndexRoot(root).current_dir()
    lex = folder / LEXICAL_DIR
    rows = np.load(lex / ROWS_FILE)
    terms, offsets = np.fromfile(lex / TERMS_FILE, TERMS_DTYPE), np.fromfile(lex / OFFSETS_FILE, OFFSETS_DTYPE)
    vocab = json.loads((lex / VOCAB_FILE).read_text())["terms"]
    store = Store(folder / "store.sqlite")
    try:
        texts = store.texts(rows.tolist())
    finally:
        store.close()
    analyzer = Analyzer(manifest.lexical.stemmer, manifest.lexical.stopwords)
    assert len(offsets) == len(rows) + 1
    for r, fid in enumerate(rows.tolist()):
        assert [vocab[i] for i in terms[offsets[r] : offsets[r + 1]]] == analyzer.terms(texts[fid]), fid
    version = IndexVersion(folder)
    try:
        assert version.lexical is not None
        _, fids = version.lexical.search("zebras", 5)
        assert sorted(version.ext_ids([int(f) for f in fids]).values()) == [3, 17, 29]
        _, fids = version.lexical.search("written 17", 40)  # its old text is gone: only "17" of the new one
        assert 17 not in {version.ext_ids([int(f)])[int(f)] for f in fids if "written" in texts[int(f)]}
    finally:
        version.close()
