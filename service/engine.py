"""The inference engine, independent of HTTP: an ONNX encoder paired with the index version it matches."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np

from indexer.layout import IndexRoot
from indexer.onnx_encoder import OnnxEncoder
from indexer.version import IndexVersion

log = logging.getLogger(__name__)


class EngineError(RuntimeError):
    """Encoder and index cannot be served together (missing, corrupt or mismatched)."""


@dataclass
class SearchResult:
    hits: list[list[tuple[int, str, float]]]
    truncated: list[bool]
    encode_ms: float
    search_ms: float


class SearchEngine:
    def __init__(self, encoder: OnnxEncoder, index: IndexVersion) -> None:
        m = index.manifest.model
        if encoder.dim != index.dim:
            raise EngineError(f"encoder {encoder.model_dir} has dim {encoder.dim} but index {index.folder} has "
                              f"dim {index.dim}")
        if encoder.meta.onnx_sha256 != m.onnx_sha256:
            raise EngineError(f"encoder {encoder.model_dir} (sha256 {encoder.meta.onnx_sha256[:12]}…) is not the "
                              f"model index {index.version} was built with ({m.onnx_sha256[:12]}…, {m.dir})")
        self.encoder = encoder
        self.index = index

    @classmethod
    def load(cls, index_root: Path, model_dir: Path | None = None, *, threads: int | None = None,
             nprobe: int | None = None) -> SearchEngine:
        folder = IndexRoot(index_root).current_dir()
        index = IndexVersion(folder, nprobe=nprobe)
        encoder = OnnxEncoder(model_dir or Path(index.manifest.model.dir), threads=threads)
        if threads:
            faiss.omp_set_num_threads(threads)
        log.info("serving index %s (%d vectors) with encoder %s", index.version, index.ntotal, encoder.model_dir)
        return cls(encoder, index)

    @property
    def version(self) -> str:
        return self.index.version

    def encode(self, texts: list[str]) -> tuple[np.ndarray, list[bool]]:
        return self.encoder.encode_with_flags(texts, batch_size=len(texts))

    def search(self, texts: list[str], top_k: int) -> SearchResult:
        t0 = time.perf_counter()
        vecs, truncated = self.encode(texts)
        t1 = time.perf_counter()
        scores, ids = self.index.search(vecs, top_k)
        hits = self.index.hits(scores, ids)
        t2 = time.perf_counter()
        return SearchResult(hits, truncated, (t1 - t0) * 1000, (t2 - t1) * 1000)

    def close(self) -> None:
        self.index.close()
