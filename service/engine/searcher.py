"""A searcher: an ONNX encoder paired with the index version it matches, answering one micro-batch at a time.

The index is anything with the `VectorIndex` shape: an `IndexVersion` in this process (the local backend) or
the shard deployments of one version on Ray Serve (the sharded backend). Encoding, the pairing checks, the
filters and the split of a micro-batch's results back into its requests are the same for both.

A micro-batch shares one ONNX run whatever its requests' filters; its index searches are one per distinct
filter (the unfiltered requests together), since each request must be searched among its own documents only.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np

from indexer.runtime.ann import SEARCH_KNOBS, IndexParamError, check_knobs
from indexer.runtime.encoder import OnnxEncoder
from indexer.runtime.faiss_index import set_threads
from indexer.runtime.filters import FilterError
from indexer.runtime.manifest import Manifest
from indexer.runtime.version import FilterCache, FilterMatch, Hit, IndexVersion
from service.engine.errors import BadFilter, BadSearchParams, Mismatch

log = logging.getLogger(__name__)

__all__ = ["Hit", "Job", "Searcher", "SearchResult", "VectorIndex"]


class Job(NamedTuple):
    texts: list[str]
    top_k: int | None  # None: encode only
    filter: dict[str, Any] | None = None  # search only the documents whose metadata match (filters.py)
    # this request's search parameters (`ann.SEARCH_KNOBS`: nprobe for IVF, ef_search for HNSW); None: served ones
    knobs: dict[str, int] | None = None


class VectorIndex(Protocol):
    """What a searcher needs of an index version, wherever its vectors live (its vectors are an
    `indexer.runtime.ann.AnnIndex` of the manifest's kind)."""

    manifest: Manifest

    @property
    def version(self) -> str: ...

    @property
    def dim(self) -> int: ...

    @property
    def ntotal(self) -> int: ...

    def match(self, flt: object) -> FilterMatch: ...

    def search(self, vectors: np.ndarray, k: int, match: FilterMatch | None = None, *,
               knobs: dict[str, int] | None = None) -> tuple[np.ndarray, np.ndarray]: ...

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
    error: BadFilter | BadSearchParams | None = None  # this request was refused (the others of its batch still run)


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
             nprobe: int | None = None, reuse: OnnxEncoder | None = None,
             search_params: dict[str, int | None] | None = None) -> Searcher:
        """A version folder opened in this process (what the local backend serves)."""
        set_threads(threads)
        return cls.pair(IndexVersion(folder, nprobe=nprobe, search_params=search_params), model_dir, threads=threads,
                        reuse=reuse)

    @property
    def version(self) -> str:
        return self.index.version

    @property
    def manifest(self) -> Manifest:
        return self.index.manifest

    def search(self, texts: list[str], top_k: int, flt: dict[str, Any] | None = None,
               knobs: dict[str, int] | None = None) -> SearchResult:
        return self.run_batch([Job(texts, top_k, flt, knobs)])[0]

    def run_batch(self, jobs: list[Job]) -> list[SearchResult]:
        """Several requests' texts in one ONNX run, and one index search per distinct filter (the micro-batcher's
        unit of work).

        Each job is (texts, top_k[, filter]) or (texts, None) for encode-only; results keep job order. Vectors of
        an encode-only job come back in `SearchResult.vectors`. A job whose filter does not fit the version's
        metadata gets `error` and no work: it is refused before anything is encoded."""
        jobs = [Job(*j) for j in jobs]
        t0 = time.perf_counter()
        # Filters first: the store's query for each distinct filter (the version's cache may answer it).
        matches: dict[str, FilterMatch] = {}
        errors: list[BadFilter | BadSearchParams | None] = []
        kind = self.index.manifest.index.kind
        for job in jobs:
            error: BadFilter | BadSearchParams | None = None
            if job.knobs and job.top_k is not None:
                try:
                    check_knobs(kind, job.knobs)
                except IndexParamError as exc:
                    bad = [k for k in job.knobs if k not in SEARCH_KNOBS[kind]] or list(job.knobs)
                    errors.append(BadSearchParams(str(exc), bad[0]))
                    continue
            if job.filter is not None and job.top_k is not None:
                key = FilterCache.key(job.filter)
                if key not in matches:
                    try:
                        matches[key] = self.index.match(job.filter)
                    except FilterError as exc:
                        error = BadFilter(str(exc))
            errors.append(error)
        live = [j for j, e in zip(jobs, errors, strict=True) if e is None]
        texts = [t for job in live for t in job.texts]
        t1, started = time.perf_counter(), time.time_ns()
        if texts:
            encoded = self.encoder.encode_counted(texts, batch_size=len(texts))
            vecs, truncated, tokens = encoded.vectors, encoded.truncated, encoded.tokens
        else:  # every request of the batch was refused
            vecs, truncated, tokens = np.zeros((0, self.encoder.dim), dtype=np.float32), [], []
        t2, encoded_at = time.perf_counter(), time.time_ns()
        # the rows of each index search: one group per (filter, search parameters); filter None = unfiltered
        groups: dict[tuple[str | None, str | None], list[int]] = {}
        group_k: dict[tuple[str | None, str | None], int] = {}
        group_knobs: dict[tuple[str | None, str | None], dict[str, int] | None] = {}
        row = 0
        for job in live:
            if job.top_k is not None:
                group = (None if job.filter is None else FilterCache.key(job.filter),
                         FilterCache.key(job.knobs) if job.knobs else None)
                groups.setdefault(group, []).extend(range(row, row + len(job.texts)))
                group_k[group] = max(group_k.get(group, 0), job.top_k)
                group_knobs[group] = job.knobs or None
            row += len(job.texts)
        hits: dict[int, list[Hit]] = {}
        # the groups' index searches and store lookups interleave: their sums (the filters' queries count as search)
        search_ns, lookup_ns = int((t1 - t0) * 1e9), 0
        for group, rows in groups.items():
            group_vecs = vecs if len(rows) == len(texts) else vecs[rows]
            g0 = time.time_ns()
            flt_key = group[0]
            scores, ids = self.index.search(group_vecs, group_k[group], None if flt_key is None else matches[flt_key],
                                            knobs=group_knobs[group])
            g1 = time.time_ns()
            hits.update(zip(rows, self.index.hits(scores, ids), strict=True))
            search_ns, lookup_ns = search_ns + g1 - g0, lookup_ns + time.time_ns() - g1
        t3 = time.perf_counter()
        timeline = Timeline(started, encoded_at, encoded_at + search_ns if groups else None,
                            encoded_at + search_ns + lookup_ns if groups else None)
        filter_ms, encode_ms, search_ms = (t1 - t0) * 1000, (t2 - t1) * 1000, (t3 - t2) * 1000
        out, pos = [], 0
        for job, error in zip(jobs, errors, strict=True):
            if error is not None:
                out.append(SearchResult([], [], 0.0, filter_ms, error=error))
                continue
            n = len(job.texts)
            job_hits = [] if job.top_k is None else [hits[r][: job.top_k] for r in range(pos, pos + n)]
            out.append(SearchResult(job_hits, truncated[pos : pos + n], encode_ms, filter_ms + search_ms,
                                    vectors=vecs[pos : pos + n] if job.top_k is None else None,
                                    batch_texts=len(texts), tokens=tokens[pos : pos + n], timeline=timeline))
            pos += n
        return out

    def close(self) -> None:
        self.index.close()
