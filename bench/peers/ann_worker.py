"""Another ANN library on Strata's stored vectors: builds the index (every core), then answers the evaluation
queries one at a time on one thread, as `indexer tune` times FAISS. Runs in the encoders venv; the
coordinator (`bench/peers/retrieval.py`) turns the positions into MRR@10 with Strata's own metric code.

    python ann_worker.py LIB IN.npz OUT_DIR DEPTH EF[,EF…]      # LIB: hnswlib | usearch
IN.npz: docs (n, d) float32 L2-normalised, queries (q, d). Writes OUT_DIR/LIB-ef{EF}.npy (q, DEPTH) positions
into docs (-1 = none) and prints one JSON line per setting: {"lib", "param", "ms_per_query", "build_s", "mb"}.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

M = 32  # graph degree: FAISS's HNSW32, the HNSW that `indexer tune` sweeps
EF_CONSTRUCTION = 100


def hnswlib_index(docs: np.ndarray):  # noqa: ANN201
    import hnswlib

    index = hnswlib.Index(space="ip", dim=docs.shape[1])
    index.init_index(max_elements=len(docs), M=M, ef_construction=EF_CONSTRUCTION)
    index.add_items(docs, np.arange(len(docs)), num_threads=os.cpu_count() or 1)
    index.set_num_threads(1)

    def search(q: np.ndarray, depth: int, ef: int) -> np.ndarray:
        index.set_ef(max(ef, depth))
        labels, _ = index.knn_query(q, k=depth, num_threads=1)
        return labels[0].astype(np.int64)

    # hnswlib's own size: vectors + links (its saved file's size, without writing it)
    mb = len(docs) * (docs.shape[1] * 4 + M * 2 * 4 + 16) / 1e6
    return search, mb


def usearch_index(docs: np.ndarray):  # noqa: ANN201
    from usearch.index import Index

    index = Index(ndim=docs.shape[1], metric="ip", dtype="f32", connectivity=M // 2,
                  expansion_add=EF_CONSTRUCTION)
    index.add(np.arange(len(docs)), docs, threads=os.cpu_count() or 1)

    def search(q: np.ndarray, depth: int, ef: int) -> np.ndarray:
        index.expansion_search = max(ef, depth)
        m = index.search(q[0], depth, threads=1)
        out = np.full(depth, -1, dtype=np.int64)
        out[: len(m.keys)] = m.keys
        return out

    return search, index.memory_usage / 1e6


BUILDERS = {"hnswlib": hnswlib_index, "usearch": usearch_index}


def main() -> int:
    lib, data, out, depth, efs = sys.argv[1], np.load(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    docs = np.ascontiguousarray(data["docs"], dtype=np.float32)
    queries = np.ascontiguousarray(data["queries"], dtype=np.float32)
    t0 = time.perf_counter()
    search, mb = BUILDERS[lib](docs)
    build_s = time.perf_counter() - t0
    out.mkdir(parents=True, exist_ok=True)
    for ef in (int(e) for e in efs.split(",")):
        pos = np.empty((len(queries), depth), dtype=np.int64)
        search(queries[:1], depth, ef)  # warm-up
        t0 = time.perf_counter()
        for i in range(len(queries)):
            pos[i] = search(queries[i : i + 1], depth, ef)
        ms = (time.perf_counter() - t0) * 1000 / len(queries)
        path = out / f"{lib}-ef{ef}.npy"
        np.save(path, pos)
        print(json.dumps({"lib": lib, "param": f"ef={ef}", "positions": str(path), "ms_per_query": round(ms, 4),
                          "build_s": round(build_s, 1), "mb": round(mb, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
