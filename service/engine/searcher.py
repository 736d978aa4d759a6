"""A searcher: an ONNX encoder paired with the index version it matches, answering one micro-batch at a time.

The index is anything with the `VectorIndex` shape: an `IndexVersion` in this process (the local backend) or
the shard deployments of one version on Ray Serve (the sharded backend). Encoding, the pairing checks and the
split of a micro-batch's results back into its requests are the same for both.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from indexer.runtime.encoder import OnnxEncoder
from indexer.runtime.faiss_index import set_threads
from indexer.runtime.manifest import Manifest
from indexer.runtime.version import IndexVersion
from service.engine.errors import Mismatch

log = logging.getLogger(__name__)

Hit = tuple[int, str, float]  # (id, text, score)
Job = tuple[list[str], int | None]  # (texts, top_k); top_k None: encode only


class VectorIndex(Protocol):
    """What a searcher needs of an index version, wherever its vectors live."""

    manifest: Manifest

    @property
    def version(self) -> str: ...

    @property
    def dim(self) -> int: ...

    @property
    def ntotal(self) -> int: ...

    def search(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]: ...

    def hits(self, scores: np.ndarray, ids: np.ndarray) -> list[list[Hit]]: ...

    def close(self) -> None: ...


@dataclass
class SearchResult:
    hits: list[list[Hit]]
    truncated: list[bool]
    encode_ms: float
    search_ms: float
    vectors: np.ndarray | None = None
    batch_texts: int = 0  # texts in the ONNX run that served this request (micro-batching)


class Searcher:
    def __init__(self, encoder: OnnxEncoder, index: VectorIndex) -> None:
        m = index.manifest.model
        if encoder.dim != index.dim:
            raise Mismatch(f"encoder {encoder.model_dir} has dim {encoder.dim} but index {index.version} has "
                           f"dim {index.dim}")
        if encoder.meta.onnx_sha256 != m.onnx_sha256:
            raise Mismatch(f"encoder {encoder.model_dir} (sha256 {encoder.meta.onnx_sha256[:12]}…) is not the "
                           f"model index {index.version} was built with ({m.onnx_sha256[:12]}…, {m.dir})")
        self.encoder = encoder
        self.index = index

    @classmethod
    def pair(cls, index: VectorIndex, model_dir: Path | None = None, *, threads: int | None = None,
             reuse: OnnxEncoder | None = None) -> Searcher:
        """Pair an opened index with its encoder (closing the index if that fails); `reuse` is kept when it is
        the very model the index needs, so a swap does not load the same ONNX session twice."""
        try:
            wanted = Path(model_dir or index.manifest.model.dir)
            if reuse is not None and reuse.model_dir == wanted and \
                    reuse.meta.onnx_sha256 == index.manifest.model.onnx_sha256:
                encoder = reuse
            else:  # check the ONNX bytes against encoder.json: a half-copied model must not be served
                encoder = OnnxEncoder(wanted, threads=threads, verify_sha256=True)
            searcher = cls(encoder, index)
        except BaseException:
            index.close()
            raise
        log.info("opened index %s (%d vectors) with encoder %s", index.version, index.ntotal, encoder.model_dir)
        return searcher

    @classmethod
    def open(cls, folder: Path, model_dir: Path | None = None, *, threads: int | None = None,
             nprobe: int | None = None, reuse: OnnxEncoder | None = None) -> Searcher:
        """A version folder opened in this process (what the local backend serves)."""
        set_threads(threads)
        return cls.pair(IndexVersion(folder, nprobe=nprobe), model_dir, threads=threads, reuse=reuse)

    @property
    def version(self) -> str:
        return self.index.version

    @property
    def manifest(self) -> Manifest:
        return self.index.manifest

    def search(self, texts: list[str], top_k: int) -> SearchResult:
        return self.run_batch([(texts, top_k)])[0]

    def run_batch(self, jobs: list[Job]) -> list[SearchResult]:
        """Several requests' texts in one ONNX run and one index search (the micro-batcher's unit of work).

        Each job is (texts, top_k) or (texts, None) for encode-only; results keep job order. Vectors of an
        encode-only job come back in `SearchResult.vectors`."""
        texts = [t for job_texts, _ in jobs for t in job_texts]
        t0 = time.perf_counter()
        vecs, truncated = self.encoder.encode_with_flags(texts, batch_size=max(len(texts), 1))
        t1 = time.perf_counter()
        k_max = max((k for _, k in jobs if k is not None), default=0)
        per_text_k = [k for job_texts, k in jobs for _ in job_texts]
        search_rows = [r for r, k in enumerate(per_text_k) if k is not None]
        hits: list[list[Hit]] = []
        if search_rows:
            rows = vecs if len(search_rows) == len(texts) else vecs[search_rows]
            scores, ids = self.index.search(rows, k_max)
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
