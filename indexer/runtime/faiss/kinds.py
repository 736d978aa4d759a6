"""The front door of the kinds: build an index of a manifest's kind, or open one from its file(s). Importing it
registers every kind's implementation (`flat`, `ivf`, `hnsw`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import faiss
import numpy as np

from indexer.runtime.ann import AnnIndex, IvfParams, KindParams
from indexer.runtime.faiss import flat, hnsw, ivf  # noqa: F401  (each registers its kind)
from indexer.runtime.faiss.base import IMPLEMENTATIONS
from indexer.runtime.faiss.files import read_index, read_merged


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
