"""The GPU path (the `gpu` extra): IVF k-means and exact k-NN on the GPU when faiss has one, the CUDA execution
provider for encoding when onnxruntime has it. The CPU half runs everywhere; the GPU half skips, saying why, where
there is no GPU (CI, this machine) and is run by `bench/gpu_check.sh` on a GPU machine."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from indexer.runtime.faiss.devices import gpu_clone, gpu_count, train, train_with
from indexer.runtime.faiss.exact import knn_inner_product
from indexer.runtime.faiss.files import Index
from indexer.runtime.faiss.quantizer import centroids
from indexer.runtime.faiss.search import search
from indexer.runtime.faiss.training import build_ivf, new_ivf

NO_GPU = "faiss sees no GPU (the faiss-cpu wheel, no CUDA device, or STRATA_GPU=0): bench/gpu_check.sh runs this"
needs_gpu = pytest.mark.skipif(gpu_count() == 0, reason=NO_GPU)


def _corpus(n: int = 20_000, dim: int = 32, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Clustered unit vectors (what k-means and IVF recall depend on) and 100 queries near them."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((64, dim)).astype(np.float32)
    docs = centres[rng.integers(0, 64, n)] + 0.4 * rng.standard_normal((n, dim)).astype(np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    queries = docs[rng.integers(0, n, 100)] + 0.1 * rng.standard_normal((100, dim)).astype(np.float32)
    return docs, queries.astype(np.float32)


def _recall(index: Index, docs: np.ndarray, queries: np.ndarray) -> float:
    _, got = search(index, queries, 10)
    _, want = knn_inner_product(queries, docs, 10)
    return float(np.mean([len(set(g) & set(w)) / 10 for g, w in zip(got, want, strict=True)]))


def test_strata_gpu_0_keeps_everything_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRATA_GPU", "0")
    assert gpu_count() == 0
    docs, _ = _corpus(2_000)
    index = new_ivf(docs.shape[1], 16, "SQfp16", seed=7)
    assert train(index, docs) == "cpu" and index.is_trained
    with pytest.raises(ValueError, match="no GPU"):
        gpu_clone(index)


def test_train_on_the_cpu_is_faiss_own_training(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a GPU, `train` is `index.train`: the same seed gives the same centroids, bit for bit."""
    monkeypatch.setenv("STRATA_GPU", "0")
    docs, _ = _corpus(5_000)
    a, b = new_ivf(docs.shape[1], 32, "SQfp16", seed=3), new_ivf(docs.shape[1], 32, "SQfp16", seed=3)
    a.train(docs)
    assert train(b, docs) == "cpu"
    assert np.array_equal(centroids(a), centroids(b))


def test_kmeans_through_a_separate_assigner_gives_the_same_centroids() -> None:
    """The mechanism of GPU training (k-means' searches in another flat index, FAISS's clustering_index), run with
    a CPU flat index: the same centroids as the quantizer training itself, and the index is left as it was."""
    import faiss

    docs, _ = _corpus(5_000)
    a, b = new_ivf(docs.shape[1], 32, "SQfp16", seed=3), new_ivf(docs.shape[1], 32, "SQfp16", seed=3)
    a.train(docs)
    train_with(b, docs, faiss.IndexFlatIP(docs.shape[1]))
    assert np.array_equal(centroids(a), centroids(b))
    assert faiss.extract_index_ivf(b).clustering_index is None  # no dangling pointer to the assigner


@needs_gpu
def test_gpu_kmeans_gives_lists_as_good_as_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    docs, queries = _corpus()
    ids = np.arange(len(docs), dtype=np.int64)
    gpu, _, _ = build_ivf(docs, ids, nlist=64, nprobe=4)
    monkeypatch.setenv("STRATA_GPU", "0")
    cpu, _, _ = build_ivf(docs, ids, nlist=64, nprobe=4)
    assert centroids(gpu).shape == centroids(cpu).shape
    r_gpu, r_cpu = _recall(gpu, docs, queries), _recall(cpu, docs, queries)
    assert r_gpu >= r_cpu - 0.03, (r_gpu, r_cpu)


@needs_gpu
def test_gpu_exact_knn_and_clone_search_match_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    docs, queries = _corpus()
    ids = np.arange(len(docs), dtype=np.int64)
    _, on_gpu = knn_inner_product(queries, docs, 10)
    index, _, _ = build_ivf(docs, ids, nlist=64, nprobe=8, codec="Flat")
    _, clone_ids = search(gpu_clone(index), queries, 10)
    monkeypatch.setenv("STRATA_GPU", "0")
    _, on_cpu = knn_inner_product(queries, docs, 10)
    _, cpu_ids = search(index, queries, 10)
    overlap = np.mean([len(set(g) & set(c)) / 10 for g, c in zip(on_gpu, on_cpu, strict=True)])
    assert overlap >= 0.99  # float32 sums in another order may swap exact ties, never more
    overlap = np.mean([len(set(g) & set(c)) / 10 for g, c in zip(clone_ids, cpu_ids, strict=True)])
    assert overlap >= 0.99


def _has_cuda_provider() -> bool:
    import onnxruntime as ort

    return "CUDAExecutionProvider" in ort.get_available_providers()


@pytest.mark.skipif(not _has_cuda_provider(),
                    reason="onnxruntime has no CUDAExecutionProvider (onnxruntime-gpu not installed): "
                           "bench/gpu_check.sh runs this")
def test_encoder_picks_cuda_and_encodes_like_the_cpu(minilm_mean: Path) -> None:
    from indexer.runtime.encoder import OnnxEncoder

    texts = ["How do I learn Python?", "What is the capital of France?", "Best way to cook rice"] * 10
    gpu = OnnxEncoder(minilm_mean, threads=2)  # providers chosen by default: CUDA first when present
    cpu = OnnxEncoder(minilm_mean, threads=2, providers=["CPUExecutionProvider"])
    assert gpu.providers[0] == "CUDAExecutionProvider"
    a, b = gpu.encode(texts, 16), cpu.encode(texts, 16)
    cos = np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    assert cos.min() >= 0.999
