"""Where FAISS runs: OpenMP threads (set per calling thread, only by `set_threads`) and the GPU path (k-means
and brute-force k-NN on the GPU(s) when this faiss sees any)."""

from __future__ import annotations

import os

import faiss
import numpy as np


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


def knn_ip(queries: np.ndarray, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k inner products (scores, row positions), on the first GPU when there is one."""
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if gpu_count():
        return faiss.knn_gpu(_gpu_res(), queries, vectors, k, metric=faiss.METRIC_INNER_PRODUCT)
    return faiss.knn(queries, vectors, k, metric=faiss.METRIC_INNER_PRODUCT)
