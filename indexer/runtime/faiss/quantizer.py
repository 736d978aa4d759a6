"""How an IVF index finds a query's lists: scoring every centroid (flat) or an HNSW graph over them."""

from __future__ import annotations

import faiss
import numpy as np

from indexer.runtime.ann import Quantizer

# From this many lists on (10M documents), a query finds its lists through an HNSW graph over the centroids
# (`graph_quantizer`), not by scoring every centroid: a flat quantizer reads all nlist × dim floats per query (25 MB
# at 16,384 × 384), which no cache holds. In process, one thread, load 11-14 (docs/decisions.md,
# bench/results/coarse-quantizer-20261128T043124Z.md): at 10M finding the lists 26 -> 4.7 ms, the k=10 search 33 ->
# 8.3 ms (recall@10 0.972 -> 0.951 at the same nprobe 4, which the calibration raises). Not at 1M (nlist 4,096):
# there the calibration raised nprobe 49 -> 75 for the same 0.97 recall and, served side by side on an idle
# machine (docs/decisions.md, served-ab-20261128T053316Z.md), dense p50 at one connection was the same (5.61 vs
# 5.44 ms) and throughput at eight 11 % lower (311 vs 350 req/s). The graph is built over the trained centroids
# in their order, so list i stays list i. efSearch is a floor: FAISS searches max(efSearch, nprobe) deep (16 / 32
# lost 4-6 points at 1M).
HNSW_QUANTIZER_FROM_NLIST = 16_384
QUANTIZER_HNSW_M = 32
QUANTIZER_EF_CONSTRUCTION = 40
QUANTIZER_EF_SEARCH = 64


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


def centroids(index: faiss.Index) -> np.ndarray:
    """The coarse quantizer's centroids of an IVF index, (nlist, dim)."""
    quantizer = faiss.extract_index_ivf(index).quantizer
    return quantizer.reconstruct_n(0, quantizer.ntotal)
