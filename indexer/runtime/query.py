"""One request to a searcher: its texts and what to do with them (search, or encode only). The HTTP route builds
it, and it travels as it is through the engine, the scheduler and the micro-batcher to the searcher's batch.

May import: the standard library, numpy, `indexer.runtime`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from indexer.runtime.fusion import Fusion
from indexer.runtime.manifest import SearchMode


@dataclass(frozen=True)
class Query:
    texts: list[str]
    top_k: int | None  # None: encode only
    filter: dict[str, Any] | None = None  # search only the documents whose metadata match (filters.py)
    # this request's search parameters (`ann.SEARCH_PARAMS`: nprobe for IVF, ef_search for HNSW); None: served ones
    search_params: dict[str, int] | None = None
    mode: SearchMode | None = None  # None: the version's default (`Manifest.search_mode`)
    fusion: Fusion | None = None  # hybrid only; None: the default (convex, alpha 0.5)
    # the queries' vectors, brought by the request (checked and normalised, one row per text): nothing is encoded
    # for them; the texts then serve BM25 only (hybrid)
    vectors: np.ndarray | None = None
    # a version built with passages: True returns the passages themselves, False (default) their documents
    passages: bool = False
    # a version built with passages: each passage hit's `snippet` (False: "", and the time it costs saved)
    snippets: bool = True

    @property
    def encode_only(self) -> bool:
        return self.top_k is None
