"""FAISS index construction and inspection (IVF-Flat, inner product on L2-normalised vectors)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import faiss
import numpy as np

log = logging.getLogger(__name__)

INDEX_FILE = "index.faiss"
# FAISS k-means wants at least 39 training points per centroid; below that it warns and clusters badly.
MIN_POINTS_PER_LIST = 39
# Chosen with `indexer tune` on the paper protocol (100k rows, all-MiniLM-L6-v2 mean int8, 28,772 queries): the
# smallest nprobe of IVF1024 within 0.5 MRR@10 of exact search (73.05 vs 73.44; the paper's nprobe 5: 71.51).
DEFAULT_NLIST = 1024
DEFAULT_NPROBE = 24


def effective_nlist(n_vectors: int, nlist: int) -> int:
    """`nlist` scaled down so that every list gets ≥ 39 training vectors (warns when it changes)."""
    fitted = max(1, min(nlist, n_vectors // MIN_POINTS_PER_LIST))
    if fitted != nlist:
        log.warning("nlist %d needs >= %d training vectors but the corpus has %d: using nlist %d",
                    nlist, MIN_POINTS_PER_LIST * nlist, n_vectors, fitted)
    return fitted


def build_ivf_flat(vectors: np.ndarray, ids: np.ndarray, nlist: int, nprobe: int, seed: int = 1234
                   ) -> tuple[faiss.Index, float, float]:
    """Train the coarse quantizer on `vectors` and add them under `ids`; returns (index, train_s, add_s)."""
    import time

    dim = vectors.shape[1]
    index = faiss.index_factory(dim, f"IVF{nlist},Flat", faiss.METRIC_INNER_PRODUCT)
    ivf = faiss.extract_index_ivf(index)
    ivf.cp.seed = seed
    t0 = time.perf_counter()
    index.train(vectors)
    t1 = time.perf_counter()
    index.add_with_ids(vectors, ids.astype(np.int64))
    t2 = time.perf_counter()
    ivf.nprobe = min(nprobe, nlist)
    return index, t1 - t0, t2 - t1


def set_nprobe(index: faiss.Index, nprobe: int) -> None:
    ivf = faiss.extract_index_ivf(index)
    ivf.nprobe = min(nprobe, ivf.nlist)


def _list_views(index: faiss.Index) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(ids, vectors) of each non-empty inverted list of an IVF-Flat index; the vectors are views into the lists."""
    ivf = faiss.extract_index_ivf(index)
    invlists = ivf.invlists
    dim, code_size = ivf.d, invlists.code_size
    if code_size != dim * 4:
        raise ValueError("needs an IVF-Flat index (float32 codes)")
    for lst in range(ivf.nlist):
        size = invlists.list_size(lst)
        if size:
            ids = faiss.rev_swig_ptr(invlists.get_ids(lst), size).copy()
            codes = faiss.rev_swig_ptr(invlists.get_codes(lst), size * code_size)
            yield ids, codes.view(np.float32).reshape(size, dim)


def stored_vectors(index: faiss.Index) -> tuple[np.ndarray, np.ndarray]:
    """(ids, vectors) held in an IVF-Flat index's inverted lists, for exact search on the same vectors."""
    parts = list(_list_views(index))
    if not parts:
        return np.zeros(0, dtype=np.int64), np.zeros((0, faiss.extract_index_ivf(index).d), dtype=np.float32)
    return np.concatenate([i for i, _ in parts]), np.concatenate([v for _, v in parts])


def exact_search(index: faiss.Index, queries: np.ndarray, k: int, chunk_vectors: int = 65_536
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k inner products over the vectors an IVF-Flat index holds, as (scores, ids).

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
        scores, pos = faiss.knn(queries, vecs, min(k, len(vecs)), metric=faiss.METRIC_INNER_PRODUCT)
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
    try:
        ivf = faiss.extract_index_ivf(index)
    except RuntimeError:  # not an IVF index (flat, HNSW)
        return int(faiss.serialize_index(index).nbytes)
    inv = ivf.invlists
    stored = sum(inv.list_size(i) for i in range(ivf.nlist))
    return stored * (inv.code_size + 8) + int(faiss.serialize_index(ivf.quantizer).nbytes)