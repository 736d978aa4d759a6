"""The inference engine, independent of HTTP: an ONNX encoder paired with the index version it matches."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from indexer.runtime.encoder import OnnxEncoder
from indexer.runtime.faiss_index import set_threads
from indexer.runtime.layout import IndexRoot
from indexer.runtime.version import IndexVersion

log = logging.getLogger(__name__)


class EngineError(RuntimeError):
    """Encoder and index cannot be served together (missing, corrupt or mismatched)."""


@dataclass
class SearchResult:
    hits: list[list[tuple[int, str, float]]]
    truncated: list[bool]
    encode_ms: float
    search_ms: float
    vectors: np.ndarray | None = None
    batch_texts: int = 0  # texts in the ONNX run that served this request (micro-batching)


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
    def open(cls, folder: Path, model_dir: Path | None = None, *, threads: int | None = None,
             nprobe: int | None = None, reuse: OnnxEncoder | None = None) -> SearchEngine:
        """Open a version folder with its encoder; `reuse` is kept when it is the very model the index needs."""
        index = IndexVersion(folder, nprobe=nprobe)
        try:
            wanted = Path(model_dir or index.manifest.model.dir)
            if reuse is not None and reuse.model_dir == wanted and \
                    reuse.meta.onnx_sha256 == index.manifest.model.onnx_sha256:
                encoder = reuse
            else:  # check the ONNX bytes against encoder.json: a half-copied model must not be served
                encoder = OnnxEncoder(wanted, threads=threads, verify_sha256=True)
            set_threads(threads)
            engine = cls(encoder, index)
        except BaseException:
            index.close()
            raise
        log.info("opened index %s (%d vectors) with encoder %s", index.version, index.ntotal, encoder.model_dir)
        return engine

    @classmethod
    def load(cls, index_root: Path, model_dir: Path | None = None, *, threads: int | None = None,
             nprobe: int | None = None) -> SearchEngine:
        return cls.open(IndexRoot(index_root).current_dir(), model_dir, threads=threads, nprobe=nprobe)

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

    def run_batch(self, jobs: list[tuple[list[str], int | None]]) -> list[SearchResult]:
        """Several requests' texts in one ONNX run and one FAISS call (the micro-batcher's unit of work).

        Each job is (texts, top_k) or (texts, None) for encode-only; results keep job order. Vectors of an
        encode-only job come back in `SearchResult.vectors`."""
        texts = [t for job_texts, _ in jobs for t in job_texts]
        t0 = time.perf_counter()
        vecs, truncated = self.encoder.encode_with_flags(texts, batch_size=max(len(texts), 1))
        t1 = time.perf_counter()
        k_max = max((k for _, k in jobs if k is not None), default=0)
        per_text_k = [k for job_texts, k in jobs for _ in job_texts]
        search_rows = [r for r, k in enumerate(per_text_k) if k is not None]
        hits: list[list[tuple[int, str, float]]] = []
        if search_rows:
            scores, ids = self.index.search(vecs[search_rows], k_max)
            hits = self.index.hits(scores, ids)
        t2 = time.perf_counter()
        out, pos, hit_pos = [], 0, 0
        for job_texts, k in jobs:
            n = len(job_texts)
            job_hits = None
            if k is not None:
                job_hits = [h[:k] for h in hits[hit_pos : hit_pos + n]]
                hit_pos += n
            out.append(SearchResult(job_hits or [], truncated[pos : pos + n], (t1 - t0) * 1000, (t2 - t1) * 1000,
                                    vectors=vecs[pos : pos + n] if k is None else None, batch_texts=len(texts)))
            pos += n
        return out

    def close(self) -> None:
        self.index.close()
