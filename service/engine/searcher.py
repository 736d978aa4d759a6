"""A searcher: an ONNX encoder paired with the index version it matches, answering one micro-batch at a time.

The index is anything with the `VectorIndex` shape: an `IndexVersion` in this process (the local backend) or
the shard deployments of one version on Ray Serve (the sharded backend). Encoding, the pairing checks, the
filters and the split of a micro-batch's results back into its requests are the same for both.

A micro-batch shares one ONNX run whatever its requests' filters; its index searches are one per distinct
filter (the unfiltered requests together), since each request must be searched among its own documents only.

Modes (`Job.mode`; None: the version's default): dense searches the vectors; lexical searches the version's BM25
index (`indexer.runtime.lexical`) and encodes nothing; hybrid does both and fuses the two top-100 lists
(`indexer.runtime.fusion`). The lexical searches run on a thread of the searcher's own while the batch encodes.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np

from indexer.runtime.encoder import OnnxEncoder
from indexer.runtime.faiss_index import set_threads
from indexer.runtime.filters import FilterError
from indexer.runtime.fusion import HYBRID_DEPTH, Fusion, fuse
from indexer.runtime.manifest import Manifest, SearchMode
from indexer.runtime.version import FilterCache, FilterMatch, Hit, IndexVersion
from service.engine.errors import BadFilter, Mismatch, ModeUnavailable

log = logging.getLogger(__name__)

__all__ = ["Hit", "Job", "Searcher", "SearchResult", "VectorIndex"]


class Job(NamedTuple):
    texts: list[str]
    top_k: int | None  # None: encode only
    filter: dict[str, Any] | None = None  # search only the documents whose metadata match (filters.py)
    mode: SearchMode | None = None  # None: the version's default (`Manifest.search_mode`)
    fusion: Fusion | None = None  # hybrid only; None: RRF with k 60


@dataclass(frozen=True)
class Stages:
    """Where a request's time went, in ms (each stage of the batch that ran it; 0 for a stage its mode skips)."""

    encode_ms: float = 0.0
    dense_ms: float = 0.0  # the filter's store query and the FAISS search
    lexical_ms: float = 0.0  # its own time: in hybrid it runs beside the encoding, not after it
    fusion_ms: float = 0.0
    lookup_ms: float = 0.0  # the hits' texts and metadata read from the store


class VectorIndex(Protocol):
    """What a searcher needs of an index version, wherever its vectors live."""

    manifest: Manifest

    @property
    def version(self) -> str: ...

    @property
    def dim(self) -> int: ...

    @property
    def ntotal(self) -> int: ...

    def match(self, flt: object) -> FilterMatch: ...

    def search(self, vectors: np.ndarray, k: int, match: FilterMatch | None = None
               ) -> tuple[np.ndarray, np.ndarray]: ...

    def hits(self, scores: np.ndarray, ids: np.ndarray) -> list[list[Hit]]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Timeline:
    """When a batch's steps ended, in ns since the epoch (what trace spans take); kept for every batch, since
    four clock reads cost nothing next to an ONNX run."""

    started: int
    encoded: int
    searched: int | None = None  # dense, lexical searches and fusion done (None: an encode-only batch)
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
    error: BadFilter | ModeUnavailable | None = None  # this request was refused (the others of its batch still run)
    mode: SearchMode | None = None  # the mode that ran (None: encode only)
    stages: Stages = field(default_factory=Stages)


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
        self._pool: ThreadPoolExecutor | None = None  # the lexical searches' thread, started on first use
        self._pool_lock = threading.Lock()

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

    def search(self, texts: list[str], top_k: int, flt: dict[str, Any] | None = None,
               mode: SearchMode | None = None, fusion: Fusion | None = None) -> SearchResult:
        return self.run_batch([Job(texts, top_k, flt, mode, fusion)])[0]

    def run_batch(self, jobs: list[Job]) -> list[SearchResult]:
        """Several requests' texts in one ONNX run, and one index search per distinct filter (the micro-batcher's
        unit of work).

        Each job is (texts, top_k[, filter[, mode[, fusion]]]) or (texts, None) for encode-only; results keep job
        order. Vectors of an encode-only job come back in `SearchResult.vectors`. A job whose filter does not fit
        the version's metadata, or whose mode the version cannot serve, gets `error` and no work: it is refused
        before anything is encoded. Lexical jobs are not encoded at all; hybrid jobs take `HYBRID_DEPTH`
        candidates from each retriever and fuse them (`indexer.runtime.fusion`) before any document is read."""
        jobs = [Job(*j) for j in jobs]
        t0 = time.perf_counter()
        # Filters first: the store's query for each distinct filter (the version's cache may answer it).
        matches: dict[str, FilterMatch] = {}
        errors: list[BadFilter | ModeUnavailable | None] = []
        modes: list[SearchMode] = []
        for job in jobs:
            error: BadFilter | ModeUnavailable | None = None
            mode = job.mode or self.default_mode()
            if job.top_k is not None and mode != "dense":
                error = self._lexical_refusal(mode)
            if error is None and job.filter is not None and job.top_k is not None:
                key = FilterCache.key(job.filter)
                if key not in matches:
                    try:
                        matches[key] = self.index.match(job.filter)
                    except FilterError as exc:
                        error = BadFilter(str(exc))
            errors.append(error)
            modes.append(mode)
        live = [(j, m) for j, m, e in zip(jobs, modes, errors, strict=True) if e is None]
        # the texts to encode: encode-only, dense and hybrid jobs (lexical ones need no encoder)
        texts = [t for job, mode in live if job.top_k is None or mode != "lexical" for t in job.texts]
        # BM25 needs no vector: the lexical searches run on a thread of their own while the encoder runs (ONNX
        # Runtime releases the GIL), so a hybrid search costs about the slower of the two, not their sum
        lexical_jobs = [(n, job, mode) for n, (job, mode) in enumerate(live) if job.top_k is not None and
                        mode != "dense"]
        lexical_future = self._lexical_pool().submit(self._lexical, lexical_jobs, matches) \
            if lexical_jobs and texts else None
        t1, started = time.perf_counter(), time.time_ns()
        if texts:
            encoded = self.encoder.encode_counted(texts, batch_size=len(texts))
            vecs, truncated, tokens = encoded.vectors, encoded.truncated, encoded.tokens
        else:  # every request of the batch was refused, or lexical
            vecs, truncated, tokens = np.zeros((0, self.encoder.dim), dtype=np.float32), [], []
        t2, encoded_at = time.perf_counter(), time.time_ns()
        # the rows of each index search: group None = unfiltered, else the filter's key
        groups: dict[str | None, list[int]] = {}
        group_k: dict[str | None, int] = {}
        row = 0
        for job, mode in live:
            if job.top_k is None or mode != "lexical":
                if job.top_k is not None:
                    group = None if job.filter is None else FilterCache.key(job.filter)
                    groups.setdefault(group, []).extend(range(row, row + len(job.texts)))
                    depth = job.top_k if mode == "dense" else max(job.top_k, HYBRID_DEPTH)
                    group_k[group] = max(group_k.get(group, 0), depth)
                row += len(job.texts)
        dense: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        # the groups' index searches (the filters' queries count as dense search)
        search_ns = int((t1 - t0) * 1e9)
        for group, rows in groups.items():
            group_vecs = vecs if len(rows) == len(texts) else vecs[rows]
            g0 = time.time_ns()
            scores, ids = self.index.search(group_vecs, group_k[group], None if group is None else matches[group])
            search_ns += time.time_ns() - g0
            dense.update(zip(rows, zip(scores, ids, strict=True), strict=True))
        # lexical answers (from the thread, or run here when nothing was encoded), fusion; then one store lookup
        # for every job's final ids
        lexical_out = lexical_future.result() if lexical_future is not None else self._lexical(lexical_jobs, matches)
        finals: list[tuple[np.ndarray, np.ndarray]] = []
        stage_ms: list[tuple[float, float]] = []  # per live job: (lexical, fusion)
        row = 0
        for n_live, (job, mode) in enumerate(live):
            if job.top_k is None:
                row += len(job.texts)
                stage_ms.append((0.0, 0.0))
                continue
            fuse_ms = 0.0
            lexical, lex_ms = lexical_out.get(n_live, ([], 0.0))
            f0 = time.perf_counter()
            for n in range(len(job.texts)):
                if mode == "lexical":
                    finals.append(lexical[n])
                    continue
                d = dense[row + n]
                finals.append((d[0][: job.top_k], d[1][: job.top_k]) if mode == "dense" else
                              fuse(job.fusion or Fusion(), d, lexical[n], job.top_k))
            if mode == "hybrid":
                fuse_ms = (time.perf_counter() - f0) * 1000
            if mode != "lexical":
                row += len(job.texts)
            stage_ms.append((lex_ms, fuse_ms))
        t3, searched_at = time.perf_counter(), time.time_ns()
        hits: list[list[Hit]] = []
        if finals:
            width = max(1, max(len(ids) for _, ids in finals))
            all_scores = np.full((len(finals), width), -np.inf, dtype=np.float32)
            all_ids = np.full((len(finals), width), -1, dtype=np.int64)
            for r, (sc, ids) in enumerate(finals):
                all_scores[r, : len(ids)], all_ids[r, : len(ids)] = sc, ids
            hits = self.index.hits(all_scores, all_ids)
        t4 = time.perf_counter()
        timeline = Timeline(started, encoded_at, searched_at if finals else None,
                            time.time_ns() if finals else None)
        filter_ms, encode_ms = (t1 - t0) * 1000, (t2 - t1) * 1000
        dense_ms = search_ns / 1e6
        lookup_ms = (t4 - t3) * 1000
        out, pos, hit_pos = [], 0, 0
        live_n = 0
        for job, mode, error in zip(jobs, modes, errors, strict=True):
            if error is not None:
                out.append(SearchResult([], [], 0.0, filter_ms, error=error))
                continue
            n = len(job.texts)
            lex_ms, fuse_ms = stage_ms[live_n]
            live_n += 1
            job_hits = [] if job.top_k is None else hits[hit_pos : hit_pos + n]
            hit_pos += 0 if job.top_k is None else n
            encodes = job.top_k is None or mode != "lexical"
            job_dense = dense_ms if mode != "lexical" else 0.0
            stages = Stages(encode_ms if encodes else 0.0, job_dense, lex_ms, fuse_ms, lookup_ms)
            out.append(SearchResult(job_hits, truncated[pos : pos + n] if encodes else [False] * n,
                                    encode_ms if encodes else 0.0,
                                    job_dense + lex_ms + fuse_ms + lookup_ms,
                                    vectors=vecs[pos : pos + n] if job.top_k is None else None,
                                    batch_texts=len(texts), tokens=tokens[pos : pos + n] if encodes else [],
                                    timeline=timeline, mode=mode if job.top_k is not None else None, stages=stages))
            pos += n if encodes else 0
        return out

    def _lexical(self, jobs: list[tuple[int, Job, SearchMode]], matches: dict[str, FilterMatch]
                 ) -> dict[int, tuple[list[tuple[np.ndarray, np.ndarray]], float]]:
        """Per live job (by position): its queries' lexical answers, and the ms they took."""
        out = {}
        for n, job, mode in jobs:
            assert job.top_k is not None
            l0 = time.perf_counter()
            match = None if job.filter is None else matches[FilterCache.key(job.filter)]
            depth = job.top_k if mode == "lexical" else max(job.top_k, HYBRID_DEPTH)
            out[n] = (self.index.lexical_search(job.texts, depth, match), (time.perf_counter() - l0) * 1000)
        return out

    def _lexical_pool(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lexical")
            return self._pool

    def default_mode(self) -> SearchMode:
        """The mode a request that names none runs: the version's (`Manifest.search_mode`), or dense where this
        backend serves no lexical index (the sharded one), so that a request without a mode never fails for it."""
        mode = self.manifest.search_mode()
        return mode if mode == "dense" or hasattr(self.index, "lexical_search") else "dense"

    def _lexical_refusal(self, mode: SearchMode) -> ModeUnavailable | None:
        """Why this version cannot serve `mode` (lexical or hybrid), or None."""
        if not hasattr(self.index, "lexical_search"):
            return ModeUnavailable(f"mode {mode!r} needs the lexical index, which the sharded (Ray) backend does not "
                                   f"serve: use mode 'dense', or serve the version with the local backend")
        if self.manifest.lexical is None:
            return ModeUnavailable(f"mode {mode!r} needs a lexical index, and version {self.version} was built "
                                   f"without one (before lexical retrieval, or with --no-lexical): use mode 'dense', "
                                   f"or rebuild it with `indexer build`")
        return None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self.index.close()
