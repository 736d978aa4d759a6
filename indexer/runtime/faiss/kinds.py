"""The front door of the kinds: build an index of a manifest's kind, or open one from its file(s). Each kind's class
is its `ann.KindSpec.impl`; an index opened without its manifest finds its kind by what it holds."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from indexer.runtime.ann import KIND_SPECS, SHARDED_KIND, AnnIndex, KindParams
from indexer.runtime.faiss.base import FaissBacked
from indexer.runtime.faiss.files import read_index, read_merged


def build_index(params: KindParams, vectors: np.ndarray, ids: np.ndarray, seed: int = 1234
                ) -> tuple[AnnIndex, float, float]:
    """An index of `params.kind` over `vectors` under `ids`; returns (index, train_s, add_s)."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    return KIND_SPECS[params.kind].implementation().build_from(  # type: ignore[attr-defined]
        params, vectors, ids, seed)


def wrap_index(index: faiss.Index, params: KindParams) -> AnnIndex:
    """An opened FAISS index as the `AnnIndex` of its manifest's kind (checked against what the file holds)."""
    top = faiss.downcast_index(index)
    if top is not index and index.this.own():  # the typed wrapper takes over the C++ object's ownership
        index.this.disown()
        top.this.acquire()
    impl: Any = KIND_SPECS[params.kind].implementation()
    if not impl.holds(top):
        raise ValueError(f"the manifest says {params.kind} but the file holds {type(top).__name__}")
    return impl(top, params.model_copy())  # type: ignore[call-arg]


def open_index(index: faiss.Index, kind: str | None = None) -> FaissBacked:
    """An opened FAISS index as an `AnnIndex` without its manifest (a shard file, an index made by hand): of `kind`,
    or by default of the kind whose class holds it, with the parameters the kind reads off it (`params_of`). The
    caller's `index` stays its own: the wrapper searches a typed view of it and keeps `index` alive."""
    top = faiss.downcast_index(index)
    kinds = [kind] if kind is not None else [name for name, spec in KIND_SPECS.items()
                                             if spec.implementation().holds(top)]  # type: ignore[attr-defined]
    if not kinds:
        raise ValueError(f"a {type(top).__name__} is no index kind of Strata's ({', '.join(KIND_SPECS)})")
    impl: Any = KIND_SPECS[kinds[0]].implementation()
    if not impl.holds(top):
        raise ValueError(f"a {type(top).__name__} is not a {KIND_SPECS[kinds[0]].label} index")
    ann: FaissBacked = impl(top, impl.params_of(top))
    ann.owner = index  # `top` is a view: the C++ index is freed with the caller's handle, so hold that
    return ann


def read_ann(paths: Sequence[str | Path], params: KindParams, *, mmap: bool = False) -> AnnIndex:
    """Read a version's index file (or IVF shard files, merged: in memory, whatever `mmap`) as the `AnnIndex` of
    `params.kind`; `mmap`: see `read_index`."""
    if len(paths) > 1 and not KIND_SPECS[params.kind].shards:
        raise ValueError(f"only {KIND_SPECS[SHARDED_KIND].label} versions are kept as shards; the manifest says "
                         f"{params.kind}")
    return wrap_index(read_index(paths[0], mmap=mmap) if len(paths) == 1 else read_merged(paths), params)
