"""IVF training: the list count for N, the codecs and their sizes, building and training an IVF index, nprobe
(always clamped to the index's nlist: `clamp_nprobe`, `set_nprobe`)."""

from __future__ import annotations

import logging
import math

import faiss
import numpy as np

from indexer.runtime.ann import Quantizer
from indexer.runtime.faiss.devices import train
from indexer.runtime.faiss.kmeans import ADD_CHUNK, TRAIN_POINTS_PER_LIST, training_sample, two_level_centroids
from indexer.runtime.faiss.quantizer import graph_quantizer
from indexer.runtime.mapped import release
from indexer.runtime.progress import Progress

log = logging.getLogger(__name__)

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


# From this many lists on, k-means is two-level (`two_level_centroids`): flat k-means compares each training
# vector with every centroid (at 10M: 1M vectors × 16,384 lists × 10 iterations, about an hour on 2 cores), two
# levels with ~2·sqrt(nlist) of them (a minute or two). Below it flat k-means costs a minute at most.
TWO_LEVEL_FROM_NLIST = 4096


def auto_nlist(n_vectors: int) -> int:
    """The default list count for `n_vectors`: 4·sqrt(N) rounded to a power of two, bounded (see above)."""
    if n_vectors < 2:
        return 1
    return int(min(MAX_AUTO_NLIST, 2 ** round(math.log2(4 * math.sqrt(n_vectors)))))


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
