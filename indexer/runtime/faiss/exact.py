"""Exact search over the vectors an index holds: IVF lists read as vectors (Flat, fp16 and SQ8 codes without
residuals), sampling them, and exact top k in chunks without a second copy of the database."""

from __future__ import annotations

from collections.abc import Iterator

import faiss
import numpy as np

from indexer.runtime.faiss.devices import knn_ip


def knn_inner_product(queries: np.ndarray, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k inner products of `queries` over the rows of `vectors` (no index built, no copy), as (scores,
    row positions); k is cut to the rows there are, and no rows gives (n, 0) arrays."""
    k = min(k, len(vectors))
    if k == 0:
        return np.zeros((len(queries), 0), np.float32), np.zeros((len(queries), 0), np.int64)
    return knn_ip(queries, vectors, k)


def code_dtype(ivf: faiss.IndexIVF) -> type[np.floating] | type[np.uint8]:
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
    dtype = code_dtype(ivf)
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
        scores, pos = knn_ip(queries, vecs, min(k, len(vecs)))
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
