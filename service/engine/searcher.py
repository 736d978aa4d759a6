"""A searcher: an ONNX encoder paired with the index version it matches, answering one micro-batch at a time.

The index is anything with the `VectorIndex` shape: an `IndexVersion` in this process (the local backend) or
the shard deployments of one version on Ray Serve (the sharded backend). Encoding, the pairing checks and the
split of a micro-batch's results back into its requests are the same for both.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class Timeline:
    """When a batch's steps ended, in ns since the epoch (what trace spans take); kept for every batch, since
    four clock reads cost nothing next to an ONNX run."""

    started: int
    encoded: int
    searched: int | None = None  # FAISS search done (None: an encode-only batch)
    looked_up: int | None = None  # the hits' texts read from the store


@dataclass
class SearchResult:
    hits: list[list[Hit]]
    truncated: list[bool]
    encode_ms: float
    search_ms: float
    vectors: np.ndarray | None = None
    batch_texts: int = 0  # texts in the ONNX run that served this request (micro-batching)
    tokens: list[int] = field(default_factory=list)  # per text: tokens the model ran (special tokens included)
    timeline: Timeline | None = None  # the batch's, shared by its requests


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
        started, t0 = time.time_ns(), time.perf_counter()
        encoded = self.encoder.encode_counted(texts, batch_size=max(len(texts), 1))
        vecs, truncated = encoded.vectors, encoded.truncated
        t1, encoded_at = time.perf_counter(), time.time_ns()
        searched_at = looked_up_at = None
        k_max = max((k for _, k in jobs if k is not None), default=0)
        per_text_k = [k for job_texts, k in jobs for _ in job_texts]
        search_rows = [r for r, k in enumerate(per_text_k) if k is not None]
        hits: list[list[Hit]] = []
        if search_rows:
            rows = vecs if len(search_rows) == len(texts) else vecs[search_rows]
            scores, ids = self.index.search(rows, k_max)
            searched_at = time.time_ns()
            hits = self.index.hits(scores, ids)
            looked_up_at = time.time_ns()
        t2 = time.perf_counter()
        timeline = Timeline(started, encoded_at, searched_at, looked_up_at)
        out, pos, hit_pos = [], 0, 0
        for job_texts, k in jobs:
            n = len(job_texts)
            job_hits = None
            if k is not None:
                job_hits = [h[:k] for h in hits[hit_pos : hit_pos + n]]
                hit_pos += n
            out.append(SearchResult(job_hits or [], truncated[pos : pos + n], (t1 - t0) * 1000, (t2 - t1) * 1000,
                                    vectors=vecs[pos : pos + n] if k is None else None, batch_texts=len(texts),
                                    tokens=encoded.tokens[pos : pos + n], timeline=timeline))
            pos += n
        return out

    def close(self) -> None:
        self.index.close()
