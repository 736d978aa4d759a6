"""The one module that imports faiss: building, reading, writing, searching and inspecting FAISS indexes.

The kinds behind the index seam (`indexer.runtime.ann.AnnIndex`) are implemented here: `FlatIndex` (exact),
`IvfIndex` (IVF with float32 `Flat` or float16 `SQfp16` codes, which hold the vectors themselves, so exact search
runs on the index's own lists) and `HnswIndex`; `build_index` and `read_ann` are their front door. All use inner
product on L2-normalised vectors.

Every other module (build, add, eval, tune, the Ray build, the service, the int8 gate) goes through the
functions here, so two FAISS settings have one owner each:
- nprobe is always clamped to the index's nlist (`clamp_nprobe`, `set_nprobe`);
- OpenMP's thread count, which is per calling thread, is set only by `set_threads`.

Filtered search (`ListLocator`, `IdFilter`, `filtered_nprobe`, `filtered_search`) restricts a search to a set of
ids *inside* the IVF scan (a FAISS ID selector), never by dropping hits afterwards; see `filtered_search` for
when it searches the matching vectors exactly.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from indexer.runtime.ann import (
    KIND_SPECS,
    AnnIndex,
    FlatParams,
    HnswParams,
    IvfParams,
    KindParams,
    Quantizer,
    check_search_params,
)
from indexer.runtime.mapped import release
from indexer.runtime.progress import Progress

log = logging.getLogger(__name__)

Index = faiss.Index  # for type hints elsewhere, without importing faiss there

INDEX_FILE = "index.faiss"
# FAISS k-means wants at least 39 training points per centroid; below that it warns and clusters badly.
MIN_POINTS_PER_LIST = 39
# Chosen with `indexer tune` on the paper protocol (100k rows, all-MiniLM-L6-v2 mean int8, all 28,772 queries,
# 1 thread; exact MRR@10 73.47): IVF1024 with fp16 codes at nprobe 20 is 73.00 at 0.132 ms/query and 69 MB
# (bench/compare.py, 2026-11-23: 73.02 vs exact 73.46 at 0.124 ms).
# float32 codes need nprobe 24 for the same quality (73.07, 0.203 ms, 136 MB); HNSW32 efSearch 24 is 73.03 at
# 0.127 ms but 158 MB and no inverted lists to shard or grow. The paper's nprobe 5: 71.60, 0.067 ms.
DEFAULT_NLIST = 1024
DEFAULT_NPROBE = 20
CODECS = ("Flat", "SQfp16", "SQ8")
# bytes per dimension of each codec's codes: what `--memory-budget` weighs (`codec_for_budget`)
CODEC_BYTES_PER_DIM = {"Flat": 4.0, "SQfp16": 2.0, "SQ8": 1.0}
ID_BYTES = 8  # each IVF list entry's int64 id
DEFAULT_CODEC = "SQfp16"


# nlist when none is given, by size: about 4·sqrt(N) lists (FAISS's guideline is 4–16·sqrt(N)), rounded to a
# power of two, within [1, MAX_AUTO_NLIST]. At 100k that is 1,024, the list count measured best there (above);
# 4,096 at 1M, 16,384 at 10M: each list then holds ~250–600 vectors and a probe's scan stays short as N grows,
# while nprobe is calibrated per build (`indexer.calibrate`) to hold the recall target.
MAX_AUTO_NLIST = 65_536
# k-means learns the lists from a bounded, seeded sample: TRAIN_POINTS_PER_LIST vectors per list (FAISS wants
# >= 39 and subsamples to 256 by default): the training cost grows with nlist, not with N, and the sample is the
# only copy of vectors training makes.
TRAIN_POINTS_PER_LIST = 64
ADD_CHUNK = 65_536  # vectors added per call (a memory-mapped corpus is read a chunk at a time)
# From this many lists on, k-means is two-level (`two_level_centroids`): flat k-means compares each training
# vector with every centroid (at 10M: 1M vectors × 16,384 lists × 10 iterations, about an hour on 2 cores), two
# levels with ~2·sqrt(nlist) of them (a minute or two). Below it flat k-means costs a minute at most.
TWO_LEVEL_FROM_NLIST = 4096
# From this many lists on (10M documents), a query finds its lists through an HNSW graph over the centroids
# (`graph_quantizer`), not by scoring every centroid: a flat quantizer reads all nlist × dim floats per query (25 MB
# at 16,384 × 384), which no cache holds. In process, one thread, load 11-14 (bench/coarse_quantizer.py,
# bench/results/coarse-quantizer-20261128T043124Z.md): at 10M finding the lists 26 -> 4.7 ms, the k=10 search 33 ->
# 8.3 ms (recall@10 0.972 -> 0.951 at the same nprobe 4, which the calibration raises). Not at 1M (nlist 4,096):
# there the calibration raised nprobe 49 -> 75 for the same 0.97 recall and, served side by side on an idle
# machine (bench/served_ab.py, served-ab-20261128T053316Z.md), dense p50 at one connection was the same (5.61 vs
# 5.44 ms) and throughput at eight 11 % lower (311 vs 350 req/s). The graph is built over the trained centroids
# in their order, so list i stays list i. efSearch is a floor: FAISS searches max(efSearch, nprobe) deep (16 / 32
# lost 4-6 points at 1M).
HNSW_QUANTIZER_FROM_NLIST = 16_384
QUANTIZER_HNSW_M = 32
QUANTIZER_EF_CONSTRUCTION = 40
QUANTIZER_EF_SEARCH = 64


def auto_nlist(n_vectors: int) -> int:
    """The default list count for `n_vectors`: 4·sqrt(N) rounded to a power of two, bounded (see above)."""
    if n_vectors < 2:
        return 1
    return int(min(MAX_AUTO_NLIST, 2 ** round(math.log2(4 * math.sqrt(n_vectors)))))


def training_sample(vectors: np.ndarray, nlist: int, seed: int) -> np.ndarray:
    """At most TRAIN_POINTS_PER_LIST · nlist rows of `vectors`, drawn uniformly without replacement (seeded) and
    read in row order (a memory-mapped array is read once, forward); all of them when there are fewer."""
    cap = TRAIN_POINTS_PER_LIST * nlist
    if len(vectors) <= cap:
        out = np.ascontiguousarray(vectors, dtype=np.float32)
        release(vectors)
        return out
    rows = np.sort(np.random.default_rng(seed).choice(len(vectors), size=cap, replace=False))
    out = np.empty((cap, vectors.shape[1]), dtype=np.float32)
    # A chunk at a time, releasing the map's pages after each: 1M rows drawn from 10M touch every page of the
    # file (15 GB at 384 dims), which would all count in the build's RSS until the kernel needed the memory.
    for start in range(0, cap, ADD_CHUNK):
        out[start : start + ADD_CHUNK] = vectors[rows[start : start + ADD_CHUNK]]
        release(vectors)
    return out


def effective_nlist(n_vectors: int, nlist: int) -> int:
    """`nlist` scaled down so that every list gets ≥ 39 training vectors (warns when it changes)."""
    fitted = max(1, min(nlist, n_vectors // MIN_POINTS_PER_LIST))
    if fitted != nlist:
        log.warning("nlist %d needs >= %d training vectors but the corpus has %d: using nlist %d",
                    nlist, MIN_POINTS_PER_LIST * nlist, n_vectors, fitted)
    return fitted


def ivf_factory(nlist: int, codec: str) -> str:
    return f"IVF{nlist},{codec}"


def index_from_factory(dim: int, factory: str) -> faiss.Index:
    """`faiss.index_factory` (inner product) with Strata's settings for its own codecs: IVF fp16 lists store
    the vectors, not their residuals to the centroid. fp16 needs no residual to be accurate, the scan skips a
    per-list term, and the codes decode back to the vectors for exact search."""
    index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    if factory.startswith("IVF") and factory.endswith(",SQfp16"):
        faiss.extract_index_ivf(index).by_residual = False
    return index


def codec_for_budget(n_vectors: int, dim: int, nlist: int, budget_bytes: int | None) -> tuple[str, str]:
    """(codec, why): the most precise codec whose vectors (codes + ids + the quantizer) fit `budget_bytes` —
    SQfp16 (the default: exact-search MRR@10 within 0.02 of float32), else SQ8 (half of it; scalar
    quantisation to 8 bits per dimension, trained per dimension) — or ValueError when not even SQ8 fits (the
    message says what would). None: the default."""
    if budget_bytes is None:
        return DEFAULT_CODEC, "default"

    def size(b: float) -> str:
        return f"{b / 2**30:.2f} GiB" if b >= 2**30 else f"{b / 2**20:.1f} MiB"

    need = {c: int(n_vectors * (CODEC_BYTES_PER_DIM[c] * dim + ID_BYTES) + nlist * dim * 4)
            for c in ("SQfp16", "SQ8")}
    for codec in ("SQfp16", "SQ8"):
        if need[codec] <= budget_bytes:
            return codec, (f"--memory-budget {size(budget_bytes)}: {codec} needs {size(need[codec])} for "
                           f"{n_vectors} vectors of {dim} dimensions")
    raise ValueError(f"--memory-budget {size(budget_bytes)} is too small for {n_vectors} vectors of {dim} dimensions: "
                     f"SQ8 codes need {size(need['SQ8'])} (SQfp16 {size(need['SQfp16'])})")


def new_ivf(dim: int, nlist: int, codec: str, seed: int) -> faiss.Index:
    """An untrained inner-product IVF index with `codec` codes in its lists."""
    if codec not in CODECS:
        raise ValueError(f"codec {codec!r} is not one of {', '.join(CODECS)}")
    index = index_from_factory(dim, ivf_factory(nlist, codec))
    if codec == "SQ8":  # a build's SQ8 lists hold the vectors too (not residuals): they decode for exact search
        faiss.extract_index_ivf(index).by_residual = False
    faiss.extract_index_ivf(index).cp.seed = seed
    return index


def quantizer_for(nlist: int) -> Quantizer:
    """The coarse quantizer an IVF index of `nlist` lists is built with: "hnsw" from `HNSW_QUANTIZER_FROM_NLIST`
    lists on, else "flat"."""
    return "hnsw" if nlist >= HNSW_QUANTIZER_FROM_NLIST else "flat"


def graph_quantizer(index: faiss.Index) -> None:
    """Replace a trained IVF index's flat coarse quantizer by an HNSW graph over the same centroids, in the same
    order (list i stays list i; `HNSW_QUANTIZER_FROM_NLIST`). The index owns the graph and frees the flat one."""
    ivf = faiss.extract_index_ivf(index)
    flat = ivf.quantizer
    graph = faiss.IndexHNSWFlat(ivf.d, QUANTIZER_HNSW_M, ivf.metric_type)
    graph.hnsw.efConstruction = QUANTIZER_EF_CONSTRUCTION
    graph.hnsw.efSearch = QUANTIZER_EF_SEARCH
    graph.add(flat.reconstruct_n(0, flat.ntotal))
    owned = ivf.own_fields
    ivf.quantizer = graph
    graph.this.disown()  # the index frees it (own_fields), not Python
    ivf.own_fields = True
    if owned:
        flat.this.own(True)  # the old quantizer was the index's to free: Python frees it now
    del flat


def quantizer_kind(index: faiss.Index) -> Quantizer:
    """"hnsw" or "flat": how an IVF index finds a query's lists."""
    return "hnsw" if isinstance(faiss.downcast_index(faiss.extract_index_ivf(index).quantizer), faiss.IndexHNSW) \
        else "flat"


def build_ivf(vectors: np.ndarray, ids: np.ndarray, nlist: int, nprobe: int, seed: int = 1234,
              codec: str = DEFAULT_CODEC, quantizer: Quantizer = "flat") -> tuple[faiss.Index, float, float]:
    """Train the coarse quantizer on `vectors` and add them under `ids`; returns (index, train_s, add_s).
    `quantizer`: "flat" or "hnsw" (`graph_quantizer`, after training)."""
    import time

    index = new_ivf(vectors.shape[1], nlist, codec, seed)
    t0 = time.perf_counter()
    sample = training_sample(vectors, nlist, seed)
    two_level = nlist >= TWO_LEVEL_FROM_NLIST
    log.info("IVF%d: %sk-means on %d of %d vectors (<= %d per list)", nlist, "two-level " if two_level else "",
             len(sample), len(vectors), TRAIN_POINTS_PER_LIST)
    levels = two_level_centroids(sample, nlist, seed) if two_level else None
    if levels is not None:  # the quantizer gets its lists here; `train` then trains the codec only
        faiss.extract_index_ivf(index).quantizer.add(levels.centroids)
    log.info("IVF%d: training ran on the %s", nlist, train(index, sample).upper())
    if quantizer == "hnsw":  # (logged with its reason where it is chosen: `build_config.index_params`)
        graph_quantizer(index)
    del sample
    release(vectors)  # the sample's rows, read through the map (`runtime.mapped`)
    t1 = time.perf_counter()
    ids = np.asarray(ids, dtype=np.int64)
    with Progress(len(vectors), "adding vectors", unit="vec", bar=False) as bar:
        for start in range(0, len(vectors), ADD_CHUNK):  # chunks: no whole float32 copy of a mapped corpus
            chunk = np.ascontiguousarray(vectors[start : start + ADD_CHUNK], dtype=np.float32)
            chunk_ids = np.ascontiguousarray(ids[start : start + ADD_CHUNK])
            if levels is None:
                index.add_with_ids(chunk, chunk_ids)
            else:  # lists found through the groups (`TwoLevel.assign`), not by scoring all nlist of them
                lists = levels.assign(chunk)
                faiss.extract_index_ivf(index).add_core(len(chunk), faiss.swig_ptr(chunk), faiss.swig_ptr(chunk_ids),
                                                        faiss.swig_ptr(lists))
            release(vectors)
            bar.update(min(ADD_CHUNK, len(vectors) - start))
    t2 = time.perf_counter()
    set_nprobe(index, nprobe)
    return index, t1 - t0, t2 - t1


@dataclass
class TwoLevel:
    """Two-level k-means's lists (`centroids`, unit rows) and the groups they were split from (`groups`, unit
    rows; `group_of[list]`): what `assign` uses to find a vector's list without scoring every list."""

    centroids: np.ndarray
    groups: np.ndarray
    group_of: np.ndarray

    def assign(self, x: np.ndarray, probe: int = 3) -> np.ndarray:
        """Each row's list (highest inner product) among the lists of its `probe` nearest groups: ~(groups + probe
        · nlist/groups) products per vector instead of nlist (16,384 at 10M: 30x fewer), a matrix product per
        group. A vector on a group's border may land in its second-best list (`bench/scale.py` measures the
        recall that the calibrated nprobe keeps either way)."""
        near = np.argpartition(-(x @ self.groups.T), min(probe, len(self.groups)) - 1, axis=1)[:, :probe]
        best = np.full(len(x), -np.inf, dtype=np.float32)
        out = np.zeros(len(x), dtype=np.int64)
        for g in range(len(self.groups)):
            rows = np.flatnonzero((near == g).any(axis=1))
            lists = np.flatnonzero(self.group_of == g)
            if not len(rows) or not len(lists):
                continue
            scores = x[rows] @ self.centroids[lists].T
            pick = scores.argmax(axis=1)
            top = scores[np.arange(len(rows)), pick]
            better = top > best[rows]
            best[rows[better]], out[rows[better]] = top[better], lists[pick[better]]
        return out


def two_level_centroids(sample: np.ndarray, nlist: int, seed: int, niter: int = 10) -> TwoLevel:
    """`nlist` unit centroids of `sample` by two-level spherical k-means (FAISS's `two_level_clustering`, with
    its sub-cluster sizes kept within what each group holds): sqrt(nlist) groups, then each group split into lists
    in proportion to its share of the sample."""
    n, dim = sample.shape
    groups = max(1, math.isqrt(nlist))
    top = faiss.Kmeans(dim, groups, niter=niter, seed=seed, spherical=True)  # on <= 256 per group
    top.train(sample)
    assign = top.index.search(sample, 1)[1].ravel()
    sizes = np.bincount(assign, minlength=groups)
    share = np.cumsum(sizes) * nlist // n
    lists = np.minimum(np.diff(share, prepend=0), sizes)  # never more lists than vectors in a group
    while (short := nlist - int(lists.sum())) > 0:  # what the cap took goes to the largest groups with room
        room = np.flatnonzero(lists < sizes)
        lists[room[np.argsort(-sizes[room], kind="stable")][:short]] += 1
    order = np.argsort(assign, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    parts = []
    with Progress(groups, "k-means groups", unit="group", bar=False) as bar:
        for g in range(groups):
            k, members = int(lists[g]), sample[order[bounds[g] : bounds[g + 1]]]
            if k == 1:
                parts.append(members.mean(axis=0, keepdims=True))
            elif k > 1:
                km = faiss.Kmeans(dim, k, niter=niter, seed=seed + g, spherical=True, min_points_per_centroid=1,
                                  max_points_per_centroid=TRAIN_POINTS_PER_LIST * 4)
                km.train(np.ascontiguousarray(members))
                parts.append(km.centroids)
            bar.update()

    def unit(a: np.ndarray) -> np.ndarray:
        a = a.astype(np.float32)
        return a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)

    return TwoLevel(unit(np.concatenate(parts)), unit(top.centroids),
                    np.repeat(np.arange(groups), lists).astype(np.int64))


def train_empty_ivf(sample: np.ndarray, nlist: int, nprobe: int, seed: int, codec: str = DEFAULT_CODEC,
                    quantizer: Quantizer = "flat") -> faiss.Index:
    """`IVF{nlist},{codec}` (inner product) trained on `sample`, holding no vectors yet: the shared quantizer of
    a sharded build (same seed as the single-machine build: same sample order -> same centroids)."""
    index = new_ivf(sample.shape[1], nlist, codec, seed)
    train(index, sample)
    if quantizer == "hnsw":
        graph_quantizer(index)
    set_nprobe(index, nprobe)
    return index


def centroids(index: faiss.Index) -> np.ndarray:
    """The coarse quantizer's centroids of an IVF index, (nlist, dim)."""
    quantizer = faiss.extract_index_ivf(index).quantizer
    return quantizer.reconstruct_n(0, quantizer.ntotal)


def clamp_nprobe(nprobe: int, nlist: int) -> int:
    """Lists probed per query: at most the lists there are (FAISS would probe past the end otherwise)."""
    return max(1, min(nprobe, nlist))


def nlist_of(index: faiss.Index) -> int:
    return int(faiss.extract_index_ivf(index).nlist)


def set_nprobe(index: faiss.Index, nprobe: int) -> int:
    """Set the IVF index's nprobe, clamped to its nlist; returns what was set."""
    ivf = faiss.extract_index_ivf(index)
    ivf.nprobe = clamp_nprobe(nprobe, ivf.nlist)
    return int(ivf.nprobe)


def set_threads(threads: int | None) -> None:
    """FAISS's OpenMP threads *for the calling thread* (OpenMP keeps the count per thread, so a worker thread
    must call this itself; None: leave it as it is)."""
    if threads:
        faiss.omp_set_num_threads(threads)


def get_threads() -> int:
    """OpenMP threads FAISS uses in the calling thread."""
    return int(faiss.omp_get_max_threads())


# The GPU path (the `gpu` extra: faiss-gpu-cu12, onnxruntime-gpu). When this faiss sees GPUs, IVF k-means and
# brute-force k-NN (exact search: calibration's reference, recall checks) run on them; the index itself stays a CPU
# index (what is written, memory-mapped and served with ID selectors, which FAISS's GPU indexes lack), and
# `gpu_clone` gives a GPU copy for batch search. STRATA_GPU=0 keeps everything on the CPU.
_gpu_resources: list[object] = []  # one StandardGpuResources, made on first use (it reserves GPU memory)


def gpu_count() -> int:
    """GPUs this faiss can use: 0 for the CPU wheel, without GPUs, or with STRATA_GPU=0."""
    if os.environ.get("STRATA_GPU", "1") == "0":
        return 0
    get = getattr(faiss, "get_num_gpus", None)  # absent from some CPU builds
    return int(get()) if get is not None else 0


def _gpu_res() -> object:
    if not _gpu_resources:
        _gpu_resources.append(faiss.StandardGpuResources())
    return _gpu_resources[0]


def train(index: faiss.Index, sample: np.ndarray) -> str:
    """`index.train(sample)`, with an IVF index's k-means assigning points on the GPU(s) when there are any (the
    centroids land in the CPU index's own quantizer); returns where it ran, "gpu" or "cpu"."""
    sample = np.ascontiguousarray(sample, dtype=np.float32)
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is None or not gpu_count():
        index.train(sample)
        return "cpu"
    flat = faiss.IndexFlatIP(ivf.d) if ivf.metric_type == faiss.METRIC_INNER_PRODUCT else faiss.IndexFlatL2(ivf.d)
    train_with(index, sample, faiss.index_cpu_to_all_gpus(flat))
    return "gpu"


def train_with(index: faiss.Index, sample: np.ndarray, assigner: faiss.Index) -> None:
    """Train an IVF index with `assigner` (a flat index of the quantizer's metric, on any device) doing k-means'
    nearest-centroid searches; the centroids land in the index's own quantizer."""
    ivf = faiss.extract_index_ivf(index)
    ivf.clustering_index = assigner  # `assigner` stays referenced here while FAISS holds the raw pointer
    try:
        index.train(np.ascontiguousarray(sample, dtype=np.float32))
    finally:
        ivf.clustering_index = None


def gpu_clone(index: faiss.Index) -> faiss.Index:
    """A copy of `index` on the GPU(s) for batch search (same nprobe); ValueError without a GPU."""
    if not gpu_count():
        raise ValueError("no GPU: this faiss has none (the faiss-cpu wheel, no device, or STRATA_GPU=0)")
    return faiss.index_cpu_to_all_gpus(index)


def _knn_ip(queries: np.ndarray, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k inner products (scores, row positions), on the first GPU when there is one."""
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if gpu_count():
        return faiss.knn_gpu(_gpu_res(), queries, vectors, k, metric=faiss.METRIC_INNER_PRODUCT)
    return faiss.knn(queries, vectors, k, metric=faiss.METRIC_INNER_PRODUCT)


def read_index(path: str | Path, *, mmap: bool = False) -> faiss.Index:
    """Read an index file; RuntimeError for truncated or foreign files (FAISS's own error).

    `mmap`: the file is memory-mapped, not copied into memory (FAISS's IO_FLAG_MMAP_IFC, FAISS >= 1.11: the
    flat codes of Flat and HNSW storage and the arrays of IVF inverted lists point into the mapping). Pages are
    read through the page cache as searches touch them and are file-backed, so the kernel can drop them; the
    index is then read-only (a build, `add` or `compact` opens without it, to change the index)."""
    return faiss.read_index(str(path), faiss.IO_FLAG_MMAP_IFC if mmap else 0)


def read_merged(paths: Sequence[str | Path]) -> faiss.Index:
    """Read IVF shard files sharing one trained quantizer and merge them into one index in memory (their
    inverted lists are concatenated; ids are global already, so they are not shifted)."""
    merged = faiss.read_index(str(paths[0]))
    for path in paths[1:]:
        faiss.merge_into(merged, faiss.read_index(str(path)), False)
    return merged


def split_ivf(path: str | Path, outs: Sequence[str | Path],
              progress: Callable[[int, int], None] | None = None) -> list[int]:
    """Split the IVF index file at `path` into `len(outs)` shard files sharing its trained quantizer: shard s holds
    the vectors whose id % len(outs) == s (`indexer.shards.shard_of`), in each list in the order they were added,
    so the shards merge back (`read_merged`) into an index that answers as the original. Returns each shard's
    vector count. ValueError for an index that is not a plain IVF one (the only kind kept as shards).

    The source is memory-mapped and the shards written one at a time: beside the page cache this holds one
    shard's codes in memory, not the index's. `progress(done, total)` is called after each shard."""
    source = read_index(path, mmap=True)
    ivf = faiss.downcast_index(source)
    if not isinstance(ivf, faiss.IndexIVF):  # an exact or HNSW index, or IVF under a refine step
        raise ValueError(f"{path} holds a {type(ivf).__name__}, not an IVF index: only IVF indexes are kept as "
                         f"shards (their lists split, the quantizer shared)")
    # The empty template: the same file opened again (mapped: nothing copied), its lists swapped for empty ones.
    template = read_index(path, mmap=True)
    empty = faiss.ArrayInvertedLists(ivf.nlist, ivf.code_size)
    empty.this.disown()  # the index owns (and frees) it
    faiss.extract_index_ivf(template).replace_invlists(empty, True)
    faiss.extract_index_ivf(template).ntotal = 0
    template.ntotal = 0
    blob = serialize(template)
    del template
    counts: list[int] = []
    for shard, out in enumerate(outs):
        part = deserialize(blob)
        part_ivf = faiss.extract_index_ivf(part)
        ivf.copy_subset_to(part_ivf, faiss.InvertedLists.SUBSET_TYPE_ID_MOD, len(outs), shard)
        part.ntotal = part_ivf.ntotal
        write_index(part, out)
        counts.append(int(part.ntotal))
        del part, part_ivf
        if progress is not None:
            progress(shard + 1, len(outs))
    if sum(counts) != source.ntotal:  # copy_subset_to skips nothing; a short sum is a FAISS fault, said here
        raise RuntimeError(f"the shards of {path} hold {sum(counts)} vectors, the index {source.ntotal}")
    return counts


def write_index(index: faiss.Index, path: str | Path) -> None:
    """Write `index` to `path` through a Python file: FAISS's own file writer reports an error of the final
    flush (its `fclose`) only on stderr, which left a short file on a full disk; here every write error raises,
    as an OSError naming the file."""
    try:
        with open(path, "wb") as fh:
            writer = faiss.PyCallbackIOWriter(fh.write)
            try:
                faiss.write_index(index, writer)
            finally:
                del writer
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from exc


def serialize(index: faiss.Index) -> bytes:
    return faiss.serialize_index(index).tobytes()


def deserialize(blob: bytes) -> faiss.Index:
    return faiss.deserialize_index(np.frombuffer(blob, dtype=np.uint8))


def search(index: faiss.Index, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(scores, ids), each (n, k); missing hits have id -1."""
    return index.search(np.ascontiguousarray(vectors, dtype=np.float32), k)


def remove_ids(index: faiss.Index, ids: Sequence[int] | np.ndarray) -> int:
    """Remove the vectors stored under `ids`; returns how many were removed."""
    return int(index.remove_ids(faiss.IDSelectorBatch(np.asarray(ids, dtype=np.int64))))


class Exclusion:
    """Ids an IVF search must skip (documents deleted or replaced since the version was built), as a FAISS ID
    selector applied *inside* the list scan: the search still returns k hits, none of them excluded. Immutable:
    a change makes a new one, so searches running on the old one are unaffected."""

    def __init__(self, ids: np.ndarray) -> None:
        self.ids = np.unique(np.asarray(ids, dtype=np.int64))
        self._batch = faiss.IDSelectorBatch(self.ids)  # copies the ids into its own hash set
        self.selector = faiss.IDSelectorNot(self._batch)  # holds a pointer to _batch: both live as long as self

    def __len__(self) -> int:
        return len(self.ids)


def search_excluding(index: faiss.Index, vectors: np.ndarray, k: int, exclusion: Exclusion | None
                     ) -> tuple[np.ndarray, np.ndarray]:
    """`search`, skipping the ids of `exclusion` inside the IVF scan (same nprobe as an unfiltered search)."""
    if exclusion is None or not len(exclusion):
        return search(index, vectors, k)
    ivf = faiss.extract_index_ivf(index)
    params = faiss.SearchParametersIVF(sel=exclusion.selector, nprobe=int(ivf.nprobe))  # type: ignore[call-arg]
    return ivf.search(np.ascontiguousarray(vectors, dtype=np.float32), k, params=params)


def knn_inner_product(queries: np.ndarray, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k inner products of `queries` over the rows of `vectors` (no index built, no copy), as (scores,
    row positions); k is cut to the rows there are, and no rows gives (n, 0) arrays."""
    k = min(k, len(vectors))
    if k == 0:
        return np.zeros((len(queries), 0), np.float32), np.zeros((len(queries), 0), np.int64)
    return _knn_ip(queries, vectors, k)


def set_search_param(index: faiss.Index, name: str, value: int) -> None:
    """A search-time parameter by FAISS's name for it (nprobe clamped like everywhere else, efSearch, ...)."""
    if name == "nprobe":
        set_nprobe(index, value)
    else:
        faiss.ParameterSpace().set_index_parameter(index, name, value)


def flat_search(vectors: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k inner products of `queries` over `vectors`, as (scores, row positions)."""
    flat = faiss.IndexFlatIP(vectors.shape[1])
    flat.add(np.ascontiguousarray(vectors, dtype=np.float32))
    return flat.search(np.ascontiguousarray(queries, dtype=np.float32), k)


def _code_dtype(ivf: faiss.IndexIVF) -> type[np.floating] | type[np.uint8]:
    """How the codes of `ivf`'s lists read as vectors: float32 (Flat), float16 (SQfp16 without residuals), or
    uint8 codes to decode (SQ8 without residuals)."""
    if isinstance(ivf, faiss.IndexIVFFlat):
        return np.float32
    if isinstance(ivf, faiss.IndexIVFScalarQuantizer) and not ivf.by_residual:
        if ivf.sq.qtype == faiss.ScalarQuantizer.QT_fp16:
            return np.float16
        if ivf.sq.qtype == faiss.ScalarQuantizer.QT_8bit:
            return np.uint8
    raise ValueError(f"exact search needs an IVF index whose lists hold the vectors (IVF-Flat, or IVF-SQfp16 built "
                     f"by Strata), not {type(ivf).__name__}")


def _list_views(index: faiss.Index) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(ids, float32 vectors) of each non-empty inverted list of an IVF index with Flat or fp16 codes; float32
    codes are views into the lists, fp16 codes are decoded one list at a time."""
    ivf = faiss.downcast_index(faiss.extract_index_ivf(index))  # `index` keeps it alive
    dtype = _code_dtype(ivf)
    invlists = ivf.invlists
    dim, code_size = ivf.d, invlists.code_size
    for lst in range(ivf.nlist):
        size = invlists.list_size(lst)
        if size:
            ids = faiss.rev_swig_ptr(invlists.get_ids(lst), size).copy()
            codes = faiss.rev_swig_ptr(invlists.get_codes(lst), size * code_size)
            if dtype is np.uint8:  # SQ8: decoded by the index's own scalar quantizer
                yield ids, ivf.sq.decode(codes.reshape(size, code_size))
            else:
                yield ids, codes.view(dtype).reshape(size, dim).astype(np.float32, copy=False)


def stored_vectors(index: faiss.Index) -> tuple[np.ndarray, np.ndarray]:
    """(ids, vectors) held in an IVF index's inverted lists, for exact search on the same vectors."""
    parts = list(_list_views(index))
    if not parts:
        return np.zeros(0, dtype=np.int64), np.zeros((0, faiss.extract_index_ivf(index).d), dtype=np.float32)
    return np.concatenate([i for i, _ in parts]), np.concatenate([v for _, v in parts])


def sample_stored(index: faiss.Index, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids, vectors) of `n` stored vectors drawn uniformly without replacement (seeded; all of them when the
    index holds fewer), read list by list so that no copy of the whole database is made."""
    total = int(index.ntotal)
    dim = faiss.extract_index_ivf(index).d
    n = min(n, total)
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros((0, dim), dtype=np.float32)
    picks = np.sort(np.random.default_rng(seed).choice(total, size=n, replace=False))
    ids_out = np.empty(n, dtype=np.int64)
    vecs_out = np.empty((n, dim), dtype=np.float32)
    start = done = 0
    for ids, vecs in _list_views(index):
        end = start + len(ids)
        upto = int(np.searchsorted(picks, end))
        if upto > done:
            rows = picks[done:upto] - start
            ids_out[done:upto], vecs_out[done:upto] = ids[rows], vecs[rows]
            done = upto
        start = end
    return ids_out, vecs_out


def exact_search(index: faiss.Index, queries: np.ndarray, k: int, chunk_vectors: int = 65_536
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k inner products over the vectors an IVF index holds (`_list_views`), as (scores, ids).

    The lists are searched a chunk of ~`chunk_vectors` at a time with `faiss.knn` and merged with
    `faiss.ResultHeap`, so no second copy of the database is made (an IndexFlatIP over 537k × 384 floats is
    0.83 GB more, and more still while its buffer grows)."""
    heap = faiss.ResultHeap(len(queries), k, keep_max=True)
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    ids_parts: list[np.ndarray] = []
    vec_parts: list[np.ndarray] = []

    def flush() -> None:
        ids = np.concatenate(ids_parts)
        vecs = vec_parts[0] if len(vec_parts) == 1 else np.concatenate(vec_parts)
        scores, pos = _knn_ip(queries, vecs, min(k, len(vecs)))
        heap.add_result(scores, np.where(pos >= 0, ids[np.clip(pos, 0, None)], -1))
        ids_parts.clear()
        vec_parts.clear()

    held = 0
    for ids, vecs in _list_views(index):
        ids_parts.append(ids)
        vec_parts.append(vecs)
        held += len(ids)
        if held >= chunk_vectors:
            flush()
            held = 0
    if ids_parts:
        flush()
    heap.finalize()
    return heap.D, heap.I


def memory_bytes(index: faiss.Index) -> int:
    """What the index occupies in RAM: codes and ids of the inverted lists plus the coarse quantizer for IVF
    indexes (counted, not serialised: serialising copies the whole index, 0.83 GB at 537k × 384), the
    serialised size for the others."""
    top = faiss.downcast_index(index)
    if not isinstance(top, faiss.IndexIVF) or isinstance(top, faiss.IndexIVFFastScan):
        # flat, HNSW, refine wrappers; fast-scan lists are blocked, not code_size per vector
        return int(faiss.serialize_index(index).nbytes)
    inv = top.invlists
    stored = sum(inv.list_size(i) for i in range(top.nlist))
    return stored * (inv.code_size + 8) + int(faiss.serialize_index(top.quantizer).nbytes)


# --- filtered search --------------------------------------------------------------------------------------------
#
# A metadata filter becomes a set of FAISS ids; the search must return what the same index search restricted to
# those documents returns. FAISS applies an ID selector inside the scan of each probed list, so nothing is lost
# to post-filtering. Two problems remain, and the rule in `filtered_search` answers both:
# - with a selective filter, nprobe lists hold few matches (at 1 % selectivity, 20 of 1,024 lists hold ~20
#   matching vectors of 100k: fewer than a top 10 should choose from). So nprobe grows as the selectivity
#   falls (`filtered_nprobe`): the probed lists then hold about as many *matching* vectors as an unfiltered
#   search scans, and the scan still only computes distances for matches.
# - once that many lists would be probed anyway, the lists that hold a match are probed instead, all of them:
#   every matching vector is scored, so the answer is exact (brute force over the matching documents), and it
#   costs no more than the approximate search would. For a small matching set this is far cheaper than an IVF
#   scan (100 matches of 100k sit in ~100 lists of ~100 vectors each), and it needs no copy of the vectors:
#   the scores come from the lists' own codes, the same numbers an unfiltered search gives those documents.

# The selector is a bitmap over the ids (a bit test per scanned vector, built in well under a millisecond) when
# it is small: at most 128 KiB or 8 bytes per matching id (the size of the id array itself); otherwise FAISS's
# hash set (IDSelectorBatch: a bloom filter and a hash set, ~6 ms to build for 50k ids, ~40 bytes per id).
# Quora qids and dense integer ids take the bitmap; string ids (FAISS ids from 2^62) the hash set.
BITMAP_MIN_BITS = 1 << 20
BITMAP_BITS_PER_ID = 64


@dataclass(frozen=True)
class IdFilter:
    """Matching ids prepared for filtered searches of one index (build once, search many times)."""

    ids: np.ndarray  # sorted int64: the matching ids this index holds
    lists: np.ndarray  # int64: the inverted lists that hold at least one of them
    selector: faiss.IDSelector | None  # None when nothing matches
    _keep: object = None  # what the selector points into (FAISS keeps a pointer, not a copy)
    gathered: Gathered | None = None  # the matches' own codes, when scoring them all is the cheaper search

    @property
    def nbytes(self) -> int:
        """Memory held (ids, lists, the selector's bitmap or ids, the gathered codes)."""
        keep = self._keep.nbytes if isinstance(self._keep, np.ndarray) and self._keep is not self.ids else 0
        return self.ids.nbytes + self.lists.nbytes + keep + (self.gathered.nbytes if self.gathered else 0)


# Cardinality planning (what Qdrant and Vespa do with a filter's estimated size): a filter matching few vectors is
# answered by scoring exactly those vectors, copied once out of their lists ("gathered") into a small index of the
# same codes, held with the filter in the version's cache. A filtered IVF search instead walks every id of each
# probed list through the selector; at 1 % of 1M documents the probed lists are all 4,096 of them (nprobe grows as
# the selectivity falls), a million ids checked and pages touched for ten thousand scored. The choice compares the
# two costs in id checks, one distance over a vector's codes counting DISTANCE_COST of them
# (bench/results/filtered-scale-*.md); gathered codes are bounded by GATHER_MAX_BYTES per filter.
DISTANCE_COST = 8
GATHER_MAX_BYTES = 128 << 20


def exact_pays(n_match: int, nprobe: int, ntotal: int, nlist: int, code_size: int) -> bool:
    """Whether scoring the `n_match` matching vectors themselves costs no more than the filtered IVF search at
    `filtered_nprobe` (ids checked in the probed lists, plus the distances of the matches among them)."""
    if n_match <= 0 or n_match * code_size > GATHER_MAX_BYTES:
        return False
    probe = filtered_nprobe(nprobe, n_match, ntotal, nlist)
    checked = probe * ntotal / nlist
    return n_match * DISTANCE_COST <= checked + n_match * probe / nlist * DISTANCE_COST


@dataclass(frozen=True)
class Gathered:
    """Copies of some vectors' codes, searched exactly with the distances their IVF lists give (same codec)."""

    ids: np.ndarray  # int64, the FAISS id of each row
    index: faiss.Index  # IndexFlatIP or IndexScalarQuantizer over the rows (inner product)

    @property
    def nbytes(self) -> int:
        return self.ids.nbytes + len(self.ids) * int(self.index.code_size)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        n = len(queries)
        scores = np.full((n, k), -np.inf, dtype=np.float32)
        ids = np.full((n, k), -1, dtype=np.int64)
        kk = min(k, len(self.ids))
        s, rows = self.index.search(queries, kk)
        found = rows >= 0
        scores[:, :kk] = np.where(found, s, -np.inf)
        ids[:, :kk] = np.where(found, self.ids[np.clip(rows, 0, None)], -1)
        return scores, ids


def _scorer_for(ivf: faiss.IndexIVF) -> faiss.Index | None:
    """An empty index scoring `ivf`'s list codes as they are (None: codes of residuals, or a codec it cannot)."""
    if ivf.by_residual and not isinstance(ivf, faiss.IndexIVFFlat):
        return None
    if isinstance(ivf, faiss.IndexIVFFlat) and ivf.metric_type == faiss.METRIC_INNER_PRODUCT:
        return faiss.IndexFlatIP(ivf.d)
    if isinstance(ivf, faiss.IndexIVFScalarQuantizer) and ivf.metric_type == faiss.METRIC_INNER_PRODUCT:
        sq = faiss.IndexScalarQuantizer(ivf.d, ivf.sq.qtype, faiss.METRIC_INNER_PRODUCT)
        sq.sq = ivf.sq  # the trained ranges (SQ8) too
        sq.is_trained = True
        return sq
    return None


def id_selector(ids: np.ndarray) -> tuple[faiss.IDSelector, object]:
    """A FAISS selector for sorted non-negative int64 `ids`, and the array it reads (keep it alive)."""
    top = int(ids[-1]) + 1
    if top <= max(BITMAP_MIN_BITS, BITMAP_BITS_PER_ID * len(ids)):
        bits = np.zeros(top, dtype=bool)
        bits[ids] = True
        bitmap = np.packbits(bits, bitorder="little")  # FAISS tests bit (id & 7) of byte id >> 3
        return faiss.IDSelectorBitmap(len(bitmap), faiss.swig_ptr(bitmap)), bitmap  # n: bytes, not bits
    return faiss.IDSelectorBatch(ids), ids


class ListLocator:
    """Where each id of an IVF index sits: its inverted list and place there (16 bytes per vector, read once from
    the lists): what `prepare` needs to know which lists an exact filtered search must probe, and to gather the
    codes of a few matches."""

    def __init__(self, index: faiss.Index) -> None:
        ivf = self._ivf = _ivf_of(index)
        invlists = ivf.invlists
        ids, lists = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int32)]
        self._sizes = np.zeros(ivf.nlist, dtype=np.int64)
        for lst in range(ivf.nlist):
            size = self._sizes[lst] = invlists.list_size(lst)
            if size:
                ids.append(faiss.rev_swig_ptr(invlists.get_ids(lst), size).copy())
                lists.append(np.full(size, lst, dtype=np.int32))
        all_ids, all_lists = np.concatenate(ids), np.concatenate(lists)
        starts = np.concatenate([[0], np.cumsum(self._sizes)[:-1]])
        all_offsets = (np.arange(len(all_ids)) - np.repeat(starts, self._sizes)).astype(np.int32)
        order = np.argsort(all_ids, kind="stable")
        self.ids, self.lists, self.offsets = all_ids[order], all_lists[order], all_offsets[order]
        self._views: list[np.ndarray | None] | None = None
        self._scorer = _scorer_for(ivf)

    def prepare(self, ids: np.ndarray, gather: Callable[[int], bool] = lambda n: False) -> IdFilter:
        """The ids among `ids` (any order, repeats allowed) that this index holds, their lists and a selector;
        their codes gathered too when `gather(number of matches)` says so (and the codec allows it)."""
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) > 1 and not (ids[1:] > ids[:-1]).all():  # the store's ids come sorted: no second sort
            ids = np.unique(ids)
        if len(self.ids) == 0 or len(ids) == 0:
            return IdFilter(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), None)
        pos = np.minimum(np.searchsorted(self.ids, ids), len(self.ids) - 1)
        held = self.ids[pos] == ids
        ids, pos = ids[held], pos[held]
        if len(ids) == 0:
            return IdFilter(ids, np.zeros(0, dtype=np.int64), None)
        selector, keep = id_selector(ids) if ids[0] >= 0 else (faiss.IDSelectorBatch(ids), ids)
        lists = np.flatnonzero(np.bincount(self.lists[pos], minlength=1))  # the lists holding a match, in order
        gathered = self.gather(pos) if self._scorer is not None and gather(len(ids)) else None
        return IdFilter(ids, lists.astype(np.int64), selector, keep, gathered)

    @property
    def can_gather(self) -> bool:
        """Whether this index's codes can be scored outside their lists (not residuals, a codec `Gathered` takes)."""
        return self._scorer is not None

    def gather(self, pos: np.ndarray) -> Gathered:
        """The codes of the vectors at `pos` (positions in `self.ids`), copied list by list into a scorer."""
        invlists, cs = self._ivf.invlists, int(self._ivf.code_size)
        if self._views is None:  # views into the lists' codes: valid while the index is unchanged (a change
            # drops this locator) and, for a memory-mapped index, read from the mapping without a copy
            self._views = [faiss.rev_swig_ptr(invlists.get_codes(lst), int(size) * cs).reshape(int(size), cs)
                           if size else None for lst, size in enumerate(self._sizes.tolist())]
        lists, offsets = self.lists[pos], self.offsets[pos]
        order = np.lexsort((offsets, lists))  # list by list, in place order: each list's codes read forwards
        lists, offsets = lists[order], offsets[order]
        cuts = (np.flatnonzero(np.diff(lists)) + 1).tolist()
        codes = np.empty((len(pos), cs), dtype=np.uint8)
        views = self._views
        for a, b in zip([0, *cuts], [*cuts, len(pos)], strict=True):
            codes[a:b] = views[int(lists[a])][offsets[a:b]]  # type: ignore[index]
        scorer = faiss.clone_index(self._scorer)
        if isinstance(scorer, faiss.IndexFlat):
            scorer.add(codes.view(np.float32))
        else:
            faiss.copy_array_to_vector(codes.ravel(), scorer.codes)
            scorer.ntotal = len(pos)
        return Gathered(self.ids[pos][order], scorer)


def _ivf_of(index: faiss.Index) -> faiss.IndexIVF:
    ivf = faiss.downcast_index(index)
    if not isinstance(ivf, faiss.IndexIVF):
        raise ValueError(f"filtered search needs an IVF index, not {type(ivf).__name__}")
    return ivf


def filtered_nprobe(nprobe: int, n_match: int, ntotal: int, nlist: int) -> int:
    """Lists to probe when only `n_match` of `ntotal` vectors may be returned: nprobe / selectivity, so that the
    probed lists hold about as many matching vectors as an unfiltered search at `nprobe` scans (clamped to
    nlist). At 50 % that is 2 × nprobe; at 10 %, 10 ×."""
    if n_match <= 0 or n_match >= ntotal:
        return clamp_nprobe(nprobe, nlist)
    return clamp_nprobe(math.ceil(nprobe * ntotal / n_match), nlist)


def filtered_search(index: faiss.Index, vectors: np.ndarray, k: int, flt: IdFilter, probe: int
                    ) -> tuple[np.ndarray, np.ndarray, bool]:
    """(scores, ids, exact): the top k of each query among the ids of `flt` only; missing hits have id -1.

    `probe` is the number of lists the approximate search probes (`filtered_nprobe`). When the lists holding a
    match are no more than that, exactly those lists are probed instead (`exact` True): every match is scored,
    so the answer is brute force over the matching vectors. Otherwise the IVF search probes `probe` lists with
    the selector applied inside the scan."""
    ivf = _ivf_of(index)
    queries = np.ascontiguousarray(vectors, dtype=np.float32)
    n = len(queries)
    if flt.selector is None:
        return np.full((n, k), -np.inf, dtype=np.float32), np.full((n, k), -1, dtype=np.int64), True
    if flt.gathered is not None:  # few matches: their codes scored exactly, no list walked (`exact_pays`)
        scores, ids = flt.gathered.search(queries, k)
        return scores, ids, True
    if len(flt.lists) <= probe:
        assign = np.ascontiguousarray(np.broadcast_to(flt.lists, (n, len(flt.lists))))
        # Coarse scores (query · centroid) only enter codes that hold residuals; Strata's lists hold the vectors
        # (Flat, fp16 without residuals), but an index from `indexer tune` (SQ8) may not.
        if ivf.by_residual and not isinstance(ivf, faiss.IndexIVFFlat):
            coarse = queries @ ivf.quantizer.reconstruct_batch(flt.lists).T
            coarse = np.ascontiguousarray(np.broadcast_to(coarse, assign.shape), dtype=np.float32)
        else:
            coarse = np.zeros(assign.shape, dtype=np.float32)
        params = faiss.SearchParametersIVF(sel=flt.selector, nprobe=len(flt.lists))
        scores = np.empty((n, k), dtype=np.float32)
        ids = np.empty((n, k), dtype=np.int64)
        # the C++ call: the Python wrapper of search_preassigned takes no search parameters (no selector)
        ivf.search_preassigned_c(n, faiss.swig_ptr(queries), k, faiss.swig_ptr(assign), faiss.swig_ptr(coarse),
                                 faiss.swig_ptr(scores), faiss.swig_ptr(ids), False, params)
        return scores, ids, True
    params = faiss.SearchParametersIVF(sel=flt.selector, nprobe=clamp_nprobe(probe, ivf.nlist))
    scores, ids = ivf.search(queries, k, params=params)
    return scores, ids, False


# --- the index kinds behind `ann.AnnIndex` ----------------------------------------------------------------------


def _params_for(search_params: Mapping[str, int] | None, kind: str) -> dict[str, int]:
    return check_search_params(kind, search_params) if search_params else {}


# The implementation of each kind of `ann.KIND_SPECS`, by name (`@implements`): how it is built and opened.
IMPLEMENTATIONS: dict[str, type[_FaissBacked]] = {}


def implements(kind: str) -> Callable[[type[_FaissBacked]], type[_FaissBacked]]:
    """Register a class as the implementation of `kind` (declared in `ann.KIND_SPECS`)."""

    def register(cls: type[_FaissBacked]) -> type[_FaissBacked]:
        assert kind in KIND_SPECS and cls.kind == kind, f"{cls.__name__}: declare {kind!r} in ann.KIND_SPECS"
        IMPLEMENTATIONS[kind] = cls
        return cls
    return register


class _FaissBacked(AnnIndex):
    """What every kind reads off the FAISS index it wraps (`self._index`), and what each kind implements to be
    built (`build_from`) and opened (`holds`, then the constructor `(faiss index, params)`)."""

    _index: faiss.Index

    @classmethod
    def build_from(cls, params: Any, vectors: np.ndarray, ids: np.ndarray, seed: int
                   ) -> tuple[AnnIndex, float, float]:
        """An index of this kind over `vectors` under `ids`: (index, train_s, add_s)."""
        t0 = time.perf_counter()
        index = cls.build(vectors, ids, params)  # type: ignore[attr-defined]
        return index, 0.0, time.perf_counter() - t0

    @classmethod
    def holds(cls, top: faiss.Index) -> bool:
        """Whether an opened (downcast) FAISS index is one of this kind."""
        inner = faiss.downcast_index(top.index) if isinstance(top, faiss.IndexIDMap2) else None
        return isinstance(inner, cls.INNER)  # type: ignore[attr-defined]

    @property
    def dim(self) -> int:
        return int(self._index.d)

    @property
    def ntotal(self) -> int:
        return int(self._index.ntotal)

    @property
    def faiss(self) -> faiss.Index:
        return self._index


@implements("ivf")
class IvfIndex(_FaissBacked):
    """Strata's IVF index (fp16 or float32 codes holding the vectors); nprobe is clamped to nlist everywhere."""

    kind = "ivf"

    @classmethod
    def build_from(cls, params: IvfParams, vectors: np.ndarray, ids: np.ndarray, seed: int
                   ) -> tuple[AnnIndex, float, float]:
        index, train_s, add_s = build_ivf(vectors, ids, params.nlist, params.nprobe, seed, params.codec,
                                          params.quantizer)
        return cls(index, params), train_s, add_s

    @classmethod
    def holds(cls, top: faiss.Index) -> bool:
        return isinstance(top, faiss.IndexIVF)

    def __init__(self, index: faiss.Index, params: IvfParams) -> None:
        self._index = index
        self.params = params
        self._locator: ListLocator | None = None
        self._lock = threading.Lock()
        self.params.nprobe = set_nprobe(index, params.nprobe)

    @property
    def nlist(self) -> int:
        return nlist_of(self._index)

    @property
    def nprobe(self) -> int:
        return int(faiss.extract_index_ivf(self._index).nprobe)

    def knob(self) -> tuple[str, int, int] | None:
        return ("nprobe", 1, self.nlist)

    def set_default(self, name: str, value: int) -> int:
        check_search_params(self.kind, {name: value})
        self.params.nprobe = set_nprobe(self._index, value)
        return self.params.nprobe

    def defaults(self) -> dict[str, int]:
        return {"nprobe": self.nprobe}

    def _probe(self, search_params: Mapping[str, int] | None) -> int:
        given = _params_for(search_params, self.kind)
        return clamp_nprobe(given.get("nprobe", self.nprobe), self.nlist)

    def search(self, queries: np.ndarray, k: int, *, exclude: Exclusion | None = None,
               search_params: Mapping[str, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        if not search_params and (exclude is None or not len(exclude)):
            return search(self._index, queries, k)
        ivf = faiss.extract_index_ivf(self._index)
        sel = exclude.selector if exclude is not None and len(exclude) else None
        params = faiss.SearchParametersIVF(sel=sel, nprobe=self._probe(search_params))  # type: ignore[call-arg]
        return ivf.search(np.ascontiguousarray(queries, dtype=np.float32), k, params=params)

    def locator(self) -> ListLocator:
        with self._lock:  # built on the first filtered search (~20 ms per 100k vectors), then shared
            if self._locator is None:
                self._locator = ListLocator(self._index)
            return self._locator

    def prepare(self, ids: np.ndarray) -> IdFilter:
        return self.locator().prepare(ids)

    def with_codes(self, flt: IdFilter) -> IdFilter:
        """`flt` with its matches' codes gathered when scoring them all costs less than the filtered IVF search at
        the default nprobe (`exact_pays`); else `flt` itself. For a filter used again (the version's cache calls
        it on a hit): gathering costs about one list walk, so a filter seen once is not worth it."""
        ivf = _ivf_of(self._index)
        if flt.gathered is not None or not exact_pays(len(flt.ids), self.nprobe, self.ntotal, ivf.nlist,
                                                      int(ivf.code_size)):
            return flt
        locator = self.locator()
        if not locator.can_gather:
            return flt
        return dataclasses.replace(flt, gathered=locator.gather(np.searchsorted(locator.ids, flt.ids)))

    def filtered_search(self, queries: np.ndarray, k: int, flt: IdFilter, *,
                        search_params: Mapping[str, int] | None = None, ntotal: int | None = None,
                        n_match: int | None = None) -> tuple[np.ndarray, np.ndarray, bool]:
        """`filtered_search` at `filtered_nprobe` of the selectivity `n_match` / `ntotal` (default: this index's
        matches and vectors; a shard passes the whole version's)."""
        n_match = len(flt.ids) if n_match is None else n_match
        probe = filtered_nprobe(self._probe(search_params), n_match, ntotal or self.ntotal, self.nlist)
        return filtered_search(self._index, queries, k, flt, probe)

    def exact_search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return exact_search(self._index, queries, k)

    def stored_vectors(self) -> tuple[np.ndarray, np.ndarray]:
        return stored_vectors(self._index)

    def sample_stored(self, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        return sample_stored(self._index, n, seed)

    def add(self, vectors: np.ndarray, ids: np.ndarray) -> None:
        self._index.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32), np.asarray(ids, dtype=np.int64))
        self._locator = None

    def remove(self, ids: np.ndarray) -> int:
        self._locator = None
        return remove_ids(self._index, ids)

    def memory_bytes(self) -> int:
        return memory_bytes(self._index)

    def save(self, path: Path) -> None:
        write_index(self._index, path)


class _IdMapped(_FaissBacked):
    """Flat and HNSW: a FAISS index in an `IndexIDMap2` (rows in insertion order, ids beside them)."""

    def __init__(self, index: faiss.Index) -> None:
        self._index = index  # IndexIDMap2
        self._rows: tuple[np.ndarray, np.ndarray] | None = None  # (sorted ids, their rows)
        self._lock = threading.Lock()

    def _ids(self) -> np.ndarray:
        return faiss.vector_to_array(faiss.downcast_index(self._index).id_map).astype(np.int64, copy=False)

    def _flat_storage(self) -> faiss.Index:
        inner = faiss.downcast_index(self._index.index)
        return inner if isinstance(inner, faiss.IndexFlat) else faiss.downcast_index(inner.storage)

    def stored_vectors(self) -> tuple[np.ndarray, np.ndarray]:
        storage = self._flat_storage()
        n = int(storage.ntotal)
        vecs = storage.reconstruct_n(0, n) if n else np.zeros((0, self.dim), dtype=np.float32)
        return self._ids().copy(), vecs

    def sample_stored(self, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        ids, vecs = self.stored_vectors()
        n = min(n, len(ids))
        picks = np.sort(np.random.default_rng(seed).choice(len(ids), size=n, replace=False)) if n else \
            np.zeros(0, dtype=np.int64)
        return ids[picks], vecs[picks]

    def exact_search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        ids, vecs = self.stored_vectors()
        scores, rows = knn_inner_product(queries, vecs, k)
        out_ids = np.where(rows >= 0, ids[np.clip(rows, 0, None)], -1) if rows.size else rows
        if scores.shape[1] < k:  # fewer vectors than k: pad like FAISS
            pad = k - scores.shape[1]
            scores = np.pad(scores, ((0, 0), (0, pad)), constant_values=-np.inf)
            out_ids = np.pad(out_ids, ((0, 0), (0, pad)), constant_values=-1)
        return scores, out_ids

    def _row_index(self) -> tuple[np.ndarray, np.ndarray]:
        with self._lock:
            if self._rows is None:
                ids = self._ids()
                order = np.argsort(ids, kind="stable")
                self._rows = (ids[order], order.astype(np.int64))
            return self._rows

    def prepare(self, ids: np.ndarray) -> IdFilter:
        ids = np.unique(np.asarray(ids, dtype=np.int64))
        held_ids, rows = self._row_index()
        if len(held_ids) == 0 or len(ids) == 0:
            return IdFilter(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), None)
        pos = np.minimum(np.searchsorted(held_ids, ids), len(held_ids) - 1)
        held = held_ids[pos] == ids
        ids, pos = ids[held], pos[held]
        if len(ids) == 0:
            return IdFilter(ids, np.zeros(0, dtype=np.int64), None)
        selector, keep = id_selector(ids) if ids[0] >= 0 else (faiss.IDSelectorBatch(ids), ids)
        return IdFilter(ids, np.sort(rows[pos]), selector, keep)  # `lists`: the rows holding a match

    def _exact_among(self, queries: np.ndarray, k: int, flt: IdFilter) -> tuple[np.ndarray, np.ndarray]:
        storage = self._flat_storage()
        vecs = storage.reconstruct_batch(flt.lists) if len(flt.lists) else np.zeros((0, self.dim), np.float32)
        scores, pos = knn_inner_product(queries, vecs, k)
        ids = self._ids()[flt.lists]
        out = np.full((len(queries), k), -1, dtype=np.int64)
        out_scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
        if pos.size:
            out[:, : pos.shape[1]] = np.where(pos >= 0, ids[np.clip(pos, 0, None)], -1)
            out_scores[:, : pos.shape[1]] = scores
        return out_scores, out

    def add(self, vectors: np.ndarray, ids: np.ndarray) -> None:
        self._index.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32), np.asarray(ids, dtype=np.int64))
        self._rows = None

    def memory_bytes(self) -> int:
        return memory_bytes(self._index)

    def save(self, path: Path) -> None:
        write_index(self._index, path)


@implements("flat")
class FlatIndex(_IdMapped):
    """Exact search (`IndexFlatIP` in an `IndexIDMap2`): every answer, filtered or not, is exact."""

    kind = "flat"
    INNER = faiss.IndexFlat

    def __init__(self, index: faiss.Index, params: FlatParams | None = None) -> None:
        super().__init__(index)
        self.params = params or FlatParams()

    @classmethod
    def build(cls, vectors: np.ndarray, ids: np.ndarray, params: FlatParams | None = None) -> FlatIndex:
        index = faiss.IndexIDMap2(faiss.IndexFlatIP(vectors.shape[1]))
        out = cls(index, params)
        out.add(vectors, ids)
        return out

    def search(self, queries: np.ndarray, k: int, *, exclude: Exclusion | None = None,
               search_params: Mapping[str, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        _params_for(search_params, self.kind)
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if exclude is None or not len(exclude):
            return self._index.search(queries, k)
        return self._index.search(queries, k, params=faiss.SearchParameters(sel=exclude.selector))

    def filtered_search(self, queries: np.ndarray, k: int, flt: IdFilter, *,
                        search_params: Mapping[str, int] | None = None, ntotal: int | None = None
                        ) -> tuple[np.ndarray, np.ndarray, bool]:
        _params_for(search_params, self.kind)
        if flt.selector is None:
            n = len(queries)
            return np.full((n, k), -np.inf, dtype=np.float32), np.full((n, k), -1, dtype=np.int64), True
        scores, ids = self._exact_among(queries, k, flt)
        return scores, ids, True

    def remove(self, ids: np.ndarray) -> int:
        self._rows = None
        return remove_ids(self._index, ids)


# HNSW filtered search: a graph walk restricted to few matches wanders far before it finds k of them (and may
# not find them), so below this share of matching vectors the matches are scored exactly instead — Qdrant's
# `full_scan_threshold` rule. Above it, efSearch grows as 1 / selectivity (like IVF's nprobe), capped.
HNSW_EXACT_FILTER_SHARE = 0.1
HNSW_MAX_EF = 4096


@implements("hnsw")
class HnswIndex(_IdMapped):
    """FAISS's HNSW graph with flat float32 storage (`IndexHNSWFlat` in an `IndexIDMap2`).

    HNSW cannot remove a vector in place (FAISS's `remove_ids` is not implemented for it): `remove` rebuilds the
    graph from the vectors that stay (what `indexer add` replacing documents and `indexer compact` folding deletes
    cost); the API's deletes never reach it: they are tombstones of the write overlay, skipped inside the search."""

    kind = "hnsw"
    INNER = faiss.IndexHNSW

    def __init__(self, index: faiss.Index, params: HnswParams) -> None:
        super().__init__(index)
        self.params = params
        self._hnsw().hnsw.efSearch = params.ef_search

    def _hnsw(self) -> faiss.IndexHNSW:
        return faiss.downcast_index(self._index.index)

    @classmethod
    def empty(cls, dim: int, params: HnswParams) -> HnswIndex:
        inner = faiss.IndexHNSWFlat(dim, params.m, faiss.METRIC_INNER_PRODUCT)
        inner.hnsw.efConstruction = params.ef_construction
        return cls(faiss.IndexIDMap2(inner), params)

    @classmethod
    def build(cls, vectors: np.ndarray, ids: np.ndarray, params: HnswParams) -> HnswIndex:
        out = cls.empty(vectors.shape[1], params)
        out.add(vectors, ids)
        return out

    def knob(self) -> tuple[str, int, int] | None:
        return ("ef_search", 1, min(HNSW_MAX_EF, max(16, self.ntotal)))  # past ntotal candidates change nothing

    def set_default(self, name: str, value: int) -> int:
        check_search_params(self.kind, {name: value})
        self.params.ef_search = self._hnsw().hnsw.efSearch = int(value)
        return int(value)

    def defaults(self) -> dict[str, int]:
        return {"ef_search": self.params.ef_search}

    def _ef(self, search_params: Mapping[str, int] | None, k: int) -> int:
        return max(k, _params_for(search_params, self.kind).get("ef_search", self.params.ef_search))  # FAISS: ef >= k

    def search(self, queries: np.ndarray, k: int, *, exclude: Exclusion | None = None,
               search_params: Mapping[str, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        sel = exclude.selector if exclude is not None and len(exclude) else None
        params = faiss.SearchParametersHNSW(efSearch=self._ef(search_params, k), sel=sel)  # type: ignore[call-arg]
        return self._index.search(np.ascontiguousarray(queries, dtype=np.float32), k, params=params)

    def filtered_search(self, queries: np.ndarray, k: int, flt: IdFilter, *,
                        search_params: Mapping[str, int] | None = None, ntotal: int | None = None
                        ) -> tuple[np.ndarray, np.ndarray, bool]:
        n = len(queries)
        if flt.selector is None:
            return np.full((n, k), -np.inf, dtype=np.float32), np.full((n, k), -1, dtype=np.int64), True
        share = len(flt.ids) / max(1, ntotal or self.ntotal)
        if share <= HNSW_EXACT_FILTER_SHARE:
            scores, ids = self._exact_among(queries, k, flt)
            return scores, ids, True
        ef = min(HNSW_MAX_EF, max(self._ef(search_params, k), math.ceil(self._ef(search_params, k) / share)))
        params = faiss.SearchParametersHNSW(efSearch=ef, sel=flt.selector)  # type: ignore[call-arg]
        scores, ids = self._index.search(np.ascontiguousarray(queries, dtype=np.float32), k, params=params)
        return scores, ids, False

    def remove(self, ids: np.ndarray) -> int:
        held, vecs = self.stored_vectors()
        gone = np.isin(held, np.asarray(ids, dtype=np.int64))
        removed = int(gone.sum())
        if removed:
            log.info("HNSW cannot remove in place: rebuilding the graph of %d vectors without %d", len(held) - removed,
                     removed)
            fresh = HnswIndex.empty(self.dim, self.params)
            fresh.add(vecs[~gone], held[~gone])
            self._index, self._rows = fresh._index, None
            self._hnsw().hnsw.efSearch = self.params.ef_search
        return removed


def build_index(params: KindParams, vectors: np.ndarray, ids: np.ndarray, seed: int = 1234
                ) -> tuple[AnnIndex, float, float]:
    """An index of `params.kind` over `vectors` under `ids`; returns (index, train_s, add_s)."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    return IMPLEMENTATIONS[params.kind].build_from(params, vectors, ids, seed)


def wrap_index(index: faiss.Index, params: KindParams) -> AnnIndex:
    """An opened FAISS index as the `AnnIndex` of its manifest's kind (checked against what the file holds)."""
    top = faiss.downcast_index(index)
    if top is not index and index.this.own():  # the typed wrapper takes over the C++ object's ownership
        index.this.disown()
        top.this.acquire()
    impl = IMPLEMENTATIONS[params.kind]
    if not impl.holds(top):
        raise ValueError(f"the manifest says {params.kind} but the file holds {type(top).__name__}")
    return impl(top, params.model_copy())  # type: ignore[call-arg]


def read_ann(paths: Sequence[str | Path], params: KindParams, *, mmap: bool = False) -> AnnIndex:
    """Read a version's index file (or IVF shard files, merged: in memory, whatever `mmap`) as the `AnnIndex` of
    `params.kind`; `mmap`: see `read_index`."""
    if len(paths) > 1 and not isinstance(params, IvfParams):
        raise ValueError(f"only IVF versions are kept as shards; the manifest says {params.kind}")
    return wrap_index(read_index(paths[0], mmap=mmap) if len(paths) == 1 else read_merged(paths), params)
