"""Plain FAISS searches and edits: search, search skipping excluded ids inside the scan (`Exclusion`),
removal by id, setting a search parameter by name, exact search over a few vectors."""

from __future__ import annotations

from collections.abc import Sequence

import faiss
import numpy as np

from indexer.runtime.faiss.training import set_nprobe


def search(index: faiss.Index, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(scores, ids), each (n, k); missing hits have id -1."""
    return index.search(np.ascontiguousarray(vectors, dtype=np.float32), k)


def remove_ids(index: faiss.Index, ids: Sequence[int] | np.ndarray) -> int:
    """Remove the vectors stored under `ids`; returns how many were removed."""
    return int(index.remove_ids(faiss.IDSelectorBatch(np.asarray(ids, dtype=np.int64))))


class Exclusion:
    """Ids an IVF search must skip (documents deleted or replaced since the version was built), as a FAISS ID
    selector applied *inside* the list scan: the search still returns k hits, none of them excluded. Immutable:
    a change makes a new one, so searches running on the old one are unaffected."""

    def __init__(self, ids: np.ndarray) -> None:
        self.ids = np.unique(np.asarray(ids, dtype=np.int64))
        self._batch = faiss.IDSelectorBatch(self.ids)  # copies the ids into its own hash set
        self.selector = faiss.IDSelectorNot(self._batch)  # holds a pointer to _batch: both live as long as self

    def __len__(self) -> int:
        return len(self.ids)


def search_excluding(index: faiss.Index, vectors: np.ndarray, k: int, exclusion: Exclusion | None
                     ) -> tuple[np.ndarray, np.ndarray]:
    """`search`, skipping the ids of `exclusion` inside the IVF scan (same nprobe as an unfiltered search)."""
    if exclusion is None or not len(exclusion):
        return search(index, vectors, k)
    ivf = faiss.extract_index_ivf(index)
    params = faiss.SearchParametersIVF(sel=exclusion.selector, nprobe=int(ivf.nprobe))  # type: ignore[call-arg]
    return ivf.search(np.ascontiguousarray(vectors, dtype=np.float32), k, params=params)


def set_search_param(index: faiss.Index, name: str, value: int) -> None:
    """A search-time parameter by FAISS's name for it (nprobe clamped like everywhere else, efSearch, ...)."""
    if name == "nprobe":
        set_nprobe(index, value)
    else:
        faiss.ParameterSpace().set_index_parameter(index, name, value)


def brute_force_search(vectors: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k inner products of `queries` over `vectors`, as (scores, row positions)."""
    flat = faiss.IndexFlatIP(vectors.shape[1])
    flat.add(np.ascontiguousarray(vectors, dtype=np.float32))
    return flat.search(np.ascontiguousarray(queries, dtype=np.float32), k)
