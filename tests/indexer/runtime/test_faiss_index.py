"""The FAISS wrapper: lists that hold the vectors (Flat, and fp16 without residuals), exact search over them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from indexer.runtime.layout import IndexRoot
from indexer.runtime.manifest import Manifest
from indexer.runtime.version import IndexVersion


@pytest.mark.parametrize("codec", ["Flat", "SQfp16"])
def test_exact_search_over_lists_equals_a_flat_index(codec: str) -> None:
    import faiss

    from indexer.runtime.faiss.exact import exact_search, stored_vectors
    from indexer.runtime.faiss.files import memory_bytes
    from indexer.runtime.faiss.training import build_ivf

    rng = np.random.default_rng(0)
    docs = rng.standard_normal((3000, 16)).astype(np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    ids = rng.permutation(10_000)[:3000].astype(np.int64)  # ids that are not positions
    queries = rng.standard_normal((50, 16)).astype(np.float32)
    index, _, _ = build_ivf(docs, ids, nlist=16, nprobe=1, codec=codec)
    # the lists hold the vectors themselves (fp16 codes decode to within fp16 rounding, not residuals)
    held_ids, held = stored_vectors(index)
    order = np.argsort(held_ids)
    want_rows = np.argsort(ids)
    assert np.array_equal(held_ids[order], ids[want_rows])
    tol = 0 if codec == "Flat" else 1e-3
    assert np.abs(held[order] - docs[want_rows]).max() <= tol
    flat = faiss.IndexFlatIP(16)
    flat.add(docs)
    want_d, want_pos = flat.search(queries, 7)
    got_d, got_ids = exact_search(index, queries, 7, chunk_vectors=500)  # several chunks, merged
    if codec == "Flat":
        assert np.array_equal(got_ids, ids[want_pos]) and np.allclose(got_d, want_d, atol=1e-5)
    else:  # fp16 rounding may swap near-ties, never more
        assert np.mean(got_ids == ids[want_pos]) > 0.97 and np.allclose(got_d, want_d, atol=5e-3)
    # with every list probed the index's own search agrees with the exact search on its vectors
    faiss.extract_index_ivf(index).nprobe = 16
    ivf_d, ivf_ids = index.search(queries, 7)
    assert np.array_equal(ivf_ids, got_ids) and np.allclose(ivf_d, got_d, atol=1e-4)
    assert memory_bytes(index) == pytest.approx(faiss.serialize_index(index).nbytes, rel=0.01)


@pytest.mark.parametrize("codec", ["Flat", "SQfp16"])
def test_sample_stored_draws_stored_vectors_by_id_without_repeats(codec: str) -> None:
    from indexer.runtime.faiss.exact import sample_stored, stored_vectors
    from indexer.runtime.faiss.training import build_ivf

    rng = np.random.default_rng(1)
    docs = rng.standard_normal((1500, 8)).astype(np.float32)
    ids = rng.permutation(50_000)[:1500].astype(np.int64)
    index, _, _ = build_ivf(docs, ids, nlist=12, nprobe=1, codec=codec)
    held_ids, held = stored_vectors(index)
    row_of = {int(i): r for r, i in enumerate(held_ids)}
    got_ids, got = sample_stored(index, 300, seed=7)
    assert got_ids.shape == (300,) and got.shape == (300, 8) and len(set(got_ids.tolist())) == 300
    assert np.array_equal(got, held[[row_of[int(i)] for i in got_ids]])  # each vector is the one stored under its id
    again_ids, _ = sample_stored(index, 300, seed=7)
    other_ids, _ = sample_stored(index, 300, seed=8)
    assert np.array_equal(again_ids, got_ids) and not np.array_equal(other_ids, got_ids)
    # the draw spreads over the lists: not the first lists' vectors only
    assert len(set(got_ids.tolist()) & set(held_ids[:300].tolist())) < 150
    all_ids, _ = sample_stored(index, 10_000, seed=0)  # more than it holds: all of them, once
    assert sorted(all_ids.tolist()) == sorted(ids.tolist())


def test_exact_search_refuses_codes_that_do_not_hold_the_vectors() -> None:
    import faiss

    from indexer.runtime.faiss.exact import exact_search

    rng = np.random.default_rng(0)
    docs = rng.standard_normal((2000, 16)).astype(np.float32)
    index = faiss.index_factory(16, "IVF8,SQ8", faiss.METRIC_INNER_PRODUCT)
    index.train(docs)
    index.add(docs)
    with pytest.raises(ValueError, match="IVF-Flat, or IVF-SQfp16"):
        exact_search(index, docs[:3], 5)


def test_default_build_stores_fp16_codes(quora_root: Path) -> None:
    import faiss

    manifest = Manifest.load(IndexRoot(quora_root).current_dir())
    assert manifest.index.factory == f"IVF{manifest.index.nlist},SQfp16"
    version = IndexVersion(IndexRoot(quora_root).current_dir())
    ivf = faiss.downcast_index(faiss.extract_index_ivf(version.index))
    assert isinstance(ivf, faiss.IndexIVFScalarQuantizer) and not ivf.by_residual
    version.close()
    # `indexer tune` builds its candidates the same way; other codecs keep FAISS's defaults
    from indexer.runtime.faiss.training import index_from_factory

    assert not faiss.extract_index_ivf(index_from_factory(16, "IVF4,SQfp16")).by_residual
    assert faiss.extract_index_ivf(index_from_factory(16, "IVF4,SQ8")).by_residual


def test_nlist_grows_with_the_corpus_and_kmeans_trains_on_a_bounded_sample() -> None:
    """4·sqrt(N) lists rounded to a power of two (1,024 at 100k as measured there, 4,096 at 1M, 16,384 at 10M,
    capped), and a seeded sample of at most TRAIN_POINTS_PER_LIST per list, read in row order."""
    from indexer.runtime.faiss.kmeans import TRAIN_POINTS_PER_LIST, training_sample
    from indexer.runtime.faiss.training import MAX_AUTO_NLIST, auto_nlist

    assert [auto_nlist(n) for n in (100_000, 1_000_000, 10_000_000)] == [1024, 4096, 16384]
    assert auto_nlist(10**12) == MAX_AUTO_NLIST and auto_nlist(1) == 1
    vecs = np.arange(40_000 * 4, dtype=np.float32).reshape(40_000, 4)
    sample = training_sample(vecs, 16, seed=3)
    assert len(sample) == 16 * TRAIN_POINTS_PER_LIST and sample.flags.c_contiguous
    assert (np.diff(sample[:, 0]) > 0).all()  # distinct rows, in row order
    np.testing.assert_array_equal(sample, training_sample(vecs, 16, seed=3))
    assert len(training_sample(vecs[:500], 16, seed=3)) == 500  # fewer than the cap: all of them


def _rss_file_kib() -> int:
    return next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
                if line.startswith("RssFile:"))


def test_the_training_sample_leaves_no_page_of_a_mapped_corpus_resident(tmp_path: Path) -> None:
    """A sample drawn from a memory-mapped corpus reads every page of it (1M rows of 10M at 384 dims touch all
    15 GB); it is read a chunk at a time and the map's pages are released after each, so they do not pile up in
    the build's RSS (`runtime.mapped`). The same sample as from memory."""
    from indexer.runtime.faiss.kmeans import ADD_CHUNK, TRAIN_POINTS_PER_LIST, training_sample

    rows, dim, nlist = 400_000, 32, 2 * ADD_CHUNK // TRAIN_POINTS_PER_LIST + 4  # cap: more than two chunks
    data = np.random.default_rng(0).standard_normal((rows, dim), dtype=np.float32)
    data.tofile(tmp_path / "v.f32")
    mapped = np.memmap(tmp_path / "v.f32", dtype=np.float32, mode="r", shape=(rows, dim))
    before = _rss_file_kib()
    sample = training_sample(mapped, nlist, seed=5)
    grown_mib = (_rss_file_kib() - before) / 1024
    assert len(sample) == nlist * TRAIN_POINTS_PER_LIST
    np.testing.assert_array_equal(sample, training_sample(data, nlist, seed=5))
    assert grown_mib < data.nbytes / 2**20 / 8, (grown_mib, data.nbytes / 2**20)  # 48.8 MiB file


def test_an_hnsw_quantizer_keeps_the_lists_and_searches_as_the_flat_one_does(tmp_path: Path) -> None:
    """`graph_quantizer`: the same centroids in the same order (list i stays list i), the vectors in the lists the
    flat quantizer puts them in, the same hits at the same nprobe, through a write and a memory-mapped read, and
    filtered search (whose exact path reads the centroids back) unchanged."""
    import faiss

    from indexer.runtime.faiss.files import read_index, write_index
    from indexer.runtime.faiss.filtered import ListLocator, filtered_search
    from indexer.runtime.faiss.quantizer import QUANTIZER_EF_SEARCH, centroids, quantizer_kind
    from indexer.runtime.faiss.training import build_ivf
    from tests.indexer.runtime.test_filtered_search import NLIST, K, N, assert_same_hits, brute_force, corpus

    docs, queries = corpus()
    ids = (5 + 2 * np.random.default_rng(3).permutation(N)).astype(np.int64)
    flat, _, _ = build_ivf(docs, ids, NLIST, 6, seed=9)
    graph, _, _ = build_ivf(docs, ids, NLIST, 6, seed=9, quantizer="hnsw")
    assert quantizer_kind(flat) == "flat" and quantizer_kind(graph) == "hnsw"
    assert np.array_equal(centroids(flat), centroids(graph))
    inv_f, inv_g = faiss.extract_index_ivf(flat).invlists, faiss.extract_index_ivf(graph).invlists
    same = sum(len(set(faiss.rev_swig_ptr(inv_f.get_ids(i), inv_f.list_size(i)).tolist())
                   & set(faiss.rev_swig_ptr(inv_g.get_ids(i), inv_g.list_size(i)).tolist())) for i in range(NLIST))
    assert same >= 0.99 * N  # in the list the flat quantizer picks (approximate: a border case may differ)
    want = flat.search(queries, K)
    assert_same_hits(graph.search(queries, K), want)

    path = tmp_path / "index.faiss"
    write_index(graph, path)
    for mmap in (False, True):
        back = read_index(path, mmap=mmap)
        assert quantizer_kind(back) == "hnsw"
        assert faiss.downcast_index(faiss.extract_index_ivf(back).quantizer).hnsw.efSearch == QUANTIZER_EF_SEARCH
        assert_same_hits(back.search(queries, K), want)
    matching = np.sort(np.random.default_rng(4).choice(ids, N // 100, replace=False))
    for index in (graph, read_index(path, mmap=True)):
        scores, got, _ = filtered_search(index, queries, K, ListLocator(index).prepare(matching), NLIST)
        assert_same_hits((scores, got), brute_force(index, queries, matching))


def test_builds_take_the_graph_from_its_nlist_on_and_the_manifest_says_so(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from indexer.build_config import BuildConfig, index_params
    from indexer.runtime.faiss import quantizer
    from indexer.runtime.faiss.ivf import IvfIndex
    from indexer.runtime.manifest import IndexInfo

    cfg = BuildConfig(model_dir=tmp_path, data="x", root=tmp_path, index="ivf")
    assert index_params(cfg, 10_000_000).quantizer == "hnsw"  # type: ignore[union-attr]  (nlist 16,384)
    assert index_params(cfg, 1_000_000).quantizer == "flat"  # type: ignore[union-attr]  (nlist 4,096)
    monkeypatch.setattr(quantizer, "HNSW_QUANTIZER_FROM_NLIST", 64)
    params = index_params(BuildConfig(model_dir=tmp_path, data="x", root=tmp_path, index="ivf", nlist=64), 20_000)
    assert params.quantizer == "hnsw" and "HNSW graph" in (params.nlist_reason or "")  # type: ignore[union-attr]
    info = IndexInfo.for_params(params, 20_000)
    assert info.factory == "IVF64_HNSW32,SQfp16"
    from tests.indexer.runtime.test_filtered_search import corpus

    docs, _ = corpus()
    built, _, _ = IvfIndex.build_from(params, docs, np.arange(len(docs), dtype=np.int64), seed=1)
    assert quantizer.quantizer_kind(built.faiss) == "hnsw"
    # a manifest written before the field (no "quantizer") reads as what those versions were: flat
    written = info.model_dump(mode="json")
    del written["params"]["quantizer"]
    assert IndexInfo.model_validate(written).params.quantizer == "flat"  # type: ignore[union-attr]


def test_the_wheels_openblas_runs_the_kernels_the_cpu_flags_allow(tmp_path: Path) -> None:
    """`faiss.blas`: the kernel family follows the CPU's flags (AVX-512 → SkylakeX, AVX2+FMA → Haswell, else
    OpenBLAS's own detection); a value already in the environment wins; and in a fresh interpreter that imports
    Strata's FAISS package, the wheel's own OpenBLAS reports the chosen core (read from the library itself)."""
    import json
    import os
    import subprocess
    import sys

    from indexer.runtime.faiss.blas import coretype_for, cpu_flags

    assert coretype_for({"sse3", "avx", "avx2", "fma", "avx512f", "avx512cd", "avx512bw", "avx512dq",
                         "avx512vl"}) == "SkylakeX"
    assert coretype_for({"sse3", "avx", "avx2", "fma", "avx512f"}) == "Haswell"  # foundation alone: not SkylakeX's
    assert coretype_for({"sse3", "avx"}) is None
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse3 avx2 fma\n")
    assert cpu_flags(info) == {"fpu", "sse3", "avx2", "fma"} and cpu_flags(tmp_path / "none") == frozenset()

    probe = """
import ctypes, glob, json, os, sys
import indexer.runtime.faiss.exact  # Strata's FAISS package: sets the kernel, then imports faiss
import faiss
libs = glob.glob(os.path.join(os.path.dirname(faiss.__file__), "..", "faiss_cpu.libs", "libopenblas*.so*"))
core = None
if libs:
    lib = ctypes.CDLL(libs[0])
    lib.openblas_get_corename.restype = ctypes.c_char_p
    core = lib.openblas_get_corename().decode()
print(json.dumps({"env": os.environ.get("OPENBLAS_CORETYPE"), "core": core}))
"""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    out = json.loads(subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                                    check=True).stdout)
    want = coretype_for(cpu_flags()) if sys.platform == "linux" and os.uname().machine == "x86_64" else None
    assert out["env"] == want
    if want is not None and out["core"] is not None:
        assert out["core"].lower() == want.lower()
    given = json.loads(subprocess.run([sys.executable, "-c", probe], env=env | {"OPENBLAS_CORETYPE": "Haswell"},
                                      capture_output=True, text=True, check=True).stdout)
    assert given["env"] == "Haswell"  # the user's choice wins
    if given["core"] is not None:
        assert given["core"].lower() == "haswell"


def test_an_ivf_answer_probes_deeper_until_it_holds_top_k_or_all_there_is() -> None:
    """FAISS pads an IVF answer with -1 when the probed lists hold fewer than k vectors: 13 lists of ~46 vectors at
    nprobe 1 answer top_k 100 with fewer. The index probes again (nprobe doubled, up to nlist) for those
    queries, so an answer is short only when the index is; excluded ids stay out; full answers are untouched."""
    from indexer.runtime.ann import IvfParams
    from indexer.runtime.faiss.kinds import build_index
    from indexer.runtime.faiss.search import Exclusion

    rng = np.random.default_rng(5)
    docs = rng.standard_normal((600, 16)).astype(np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    ids = np.arange(1000, 1600, dtype=np.int64)
    index, _, _ = build_index(IvfParams(nlist=13, nlist_requested=13, nprobe=1), docs, ids)
    queries = rng.standard_normal((20, 16)).astype(np.float32)
    raw = index.faiss  # FAISS alone: short
    assert (raw.search(queries, 100)[1] < 0).any()
    _, got = index.search(queries, 100)
    assert (got >= 0).all() and all(len(set(row)) == 100 for row in got.tolist())
    _, everything = index.search(queries, 700)  # more than the index holds: all of it, then -1
    assert ((everything >= 0).sum(axis=1) == 600).all()
    gone = Exclusion(ids[:560])
    _, kept = index.search(queries, 100, exclude=gone)  # 40 live: all of them
    assert ((kept >= 0).sum(axis=1) == 40).all() and not np.isin(kept, ids[:560]).any()
    _, top10 = index.search(queries, 10)  # full at nprobe 1: as FAISS answered
    assert np.array_equal(top10, raw.search(queries, 10)[1])
