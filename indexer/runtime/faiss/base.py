"""What every FAISS-backed kind shares: `FaissBacked`, the `AnnIndex` over a wrapped FAISS index (each kind's class
is named by its `ann.KindSpec.impl`)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import faiss
import numpy as np

from indexer.runtime.ann import KIND_SPECS, AnnIndex, KindParams, check_search_params


def params_for(search_params: Mapping[str, int] | None, kind: str) -> dict[str, int]:
    return check_search_params(kind, search_params) if search_params else {}


class FaissBacked(AnnIndex):
    """What every kind reads off the FAISS index it wraps (`self._index`), and what each kind implements to be
    built (`build_from`) and opened (`holds`, then the constructor `(faiss index, params)`)."""

    _index: faiss.Index
    owner: faiss.Index | None = None  # the handle owning the C++ index where `_index` is a typed view of it

    @classmethod
    def build_from(cls, params: Any, vectors: np.ndarray, ids: np.ndarray, seed: int
                   ) -> tuple[AnnIndex, float, float]:
        """An index of this kind over `vectors` under `ids`: (index, train_s, add_s)."""
        t0 = time.perf_counter()
        index = cls.build(vectors, ids, params)  # type: ignore[attr-defined]
        return index, 0.0, time.perf_counter() - t0

    @classmethod
    def holds(cls, top: faiss.Index) -> bool:
        """Whether an opened (downcast) FAISS index is one of this kind."""
        inner = faiss.downcast_index(top.index) if isinstance(top, faiss.IndexIDMap2) else None
        return isinstance(inner, cls.INNER)  # type: ignore[attr-defined]

    @classmethod
    def params_of(cls, top: faiss.Index) -> KindParams:
        """The parameters of an opened (downcast) index of this kind whose manifest is not at hand: what the index
        says, the kind's declared defaults for the rest."""
        return KIND_SPECS[cls.kind].params.model_validate({})

    @property
    def dim(self) -> int:
        return int(self._index.d)

    @property
    def ntotal(self) -> int:
        return int(self._index.ntotal)

    @property
    def faiss(self) -> faiss.Index:
        return self._index
