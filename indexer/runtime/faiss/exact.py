"""Exact search over the vectors an index holds: IVF lists read as vectors (Flat, fp16 and SQ8 codes without
residuals), sampling them, and exact top k in chunks without a second copy of the database.

Many queries at once (calibration's and evaluation's ground truth: thousands of queries over every vector) are
scored with numpy's matrix product (`blas_top_k`), not `faiss.knn`, whose BLAS in the faiss-cpu wheel runs the same
product slower (docs/decisions.md, costs behind implementation choices): that ground truth was most of a 1M
compaction's time. One query (the overlay's search) stays on `faiss.knn`, whose SIMD path is what one query wants."""

from __future__ import annotations

from collections.abc import Iterator

import faiss
import numpy as np

from indexer.runtime.faiss.devices import gpu_count, knn_ip

BLAS_FROM_QUERIES = 20  # from this many queries on, `exact_search` scores them with numpy's BLAS (as faiss.knn does)
BLAS_BLOCK = 8_192  # rows scored per matrix product: 2,000 queries × 8,192 rows is 64 MiB of scores


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
        top = blas_top_k if len(queries) >= BLAS_FROM_QUERIES and not gpu_count() else knn_ip
        scores, pos = top(queries, vecs, min(k, len(vecs)))
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


def blas_top_k(queries: np.ndarray, vectors: np.ndarray, k: int, block: int = BLAS_BLOCK
               ) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k inner products of `queries` over the rows of `vectors` (k <= rows), as `faiss.knn` gives them:
    (scores, row positions), best first. Scored a block of rows at a time by numpy's matrix product; each block
    only passes on what beats a query's current k-th score (a few per block once the first has set it), merged by
    one partition of the current top k and those."""
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    nq = len(queries)
    best_s = np.full((nq, k), -np.inf, dtype=np.float32)
    best_i = np.full((nq, k), -1, dtype=np.int64)
    for start in range(0, len(vectors), block):
        scores = queries @ np.asarray(vectors[start : start + block], dtype=np.float32).T
        if start == 0:  # nothing to beat yet: the whole block competes
            both_s = np.hstack((best_s, scores))
            both_i = np.hstack((best_i, np.broadcast_to(np.arange(scores.shape[1], dtype=np.int64), scores.shape)))
        else:
            beats = scores > best_s.min(axis=1)[:, None]
            hit = np.flatnonzero(beats.any(axis=1))  # a few rows: np.nonzero over the whole block costs more
            if len(hit) == 0:
                continue
            sub, cols = np.nonzero(beats[hit])
            rows = hit[sub]
            counts = np.bincount(rows, minlength=nq)
            offsets = np.cumsum(counts) - counts  # np.nonzero gives them row by row
            slot = np.arange(len(rows)) - offsets[rows]
            cand_s = np.full((nq, int(counts.max())), -np.inf, dtype=np.float32)
            cand_i = np.full(cand_s.shape, -1, dtype=np.int64)
            cand_s[rows, slot] = scores[rows, cols]
            cand_i[rows, slot] = cols + start
            both_s, both_i = np.hstack((best_s, cand_s)), np.hstack((best_i, cand_i))
        keep = np.argpartition(-both_s, k - 1, axis=1)[:, :k]
        best_s, best_i = np.take_along_axis(both_s, keep, axis=1), np.take_along_axis(both_i, keep, axis=1)
    order = np.argsort(-best_s, axis=1, kind="stable")
    return np.take_along_axis(best_s, order, axis=1), np.take_along_axis(best_i, order, axis=1)
