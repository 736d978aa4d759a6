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
    # this request alone failed: its filter was refused (BadFilter), or its part of the batch raised (the others
    # of its batch are still answered)
    error: Exception | None = None


def _failed(step: str, job: Job, exc: Exception) -> Exception:
    """Log a request's failure inside a batch (with its traceback: a bug or a value nothing refused earlier)."""
    what = "encode" if job.top_k is None else f"search (top_k={job.top_k}, filter={'yes' if job.filter else 'no'})"
    log.error("a batch's %s step failed for one %s request of %d texts; its neighbours are answered: %r", step,
              what, len(job.texts), exc, exc_info=exc)
    return exc


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
        """One request on its own; raises what `run_batch` would have put in its `error`."""
        result = self.run_batch([Job(texts, top_k, flt, knobs)])[0]
        if result.error is not None:
            raise result.error
        return result

    def run_batch(self, jobs: list[Job]) -> list[SearchResult]:
        """Several requests' texts in one ONNX run, and one index search per distinct filter (the micro-batcher's
        unit of work).

        Each job is (texts, top_k[, filter]) or (texts, None) for encode-only; results keep job order. Vectors of
        an encode-only job come back in `SearchResult.vectors`. A job whose filter does not fit the version's
        metadata gets `error` (a `BadFilter`) and no work: it is refused before anything is encoded.

        A failure inside the batch fails the request that caused it alone: when the shared ONNX run or a shared
        index search raises, each request of it is run again on its own, and those that still fail get the
        exception as their `error` (the engine raises it: a 500 of their own); their neighbours are answered."""
        jobs = [Job(*j) for j in jobs]
        t0 = time.perf_counter()
        # Filters first: the store's query for each distinct filter (the version's cache may answer it).
        matches: dict[str, FilterMatch] = {}
        errors: list[Exception | None] = []
        kind = self.index.manifest.index.kind
        for job in jobs:
            error: Exception | None = None
            if job.knobs and job.top_k is not None:
                try:
                    check_knobs(kind, job.knobs)
                except IndexParamError as exc:
                    bad = [k for k in job.knobs if k not in SEARCH_KNOBS[kind]] or list(job.knobs)
                    errors.append(BadSearchParams(str(exc), bad[0]))
                    continue
            if job.filter is not None and job.top_k is not None:
                try:
                    key = FilterCache.key(job.filter)
                    if key not in matches:
                        matches[key] = self.index.match(job.filter)
                except FilterError as exc:
                    error = BadFilter(str(exc))
                except Exception as exc:  # noqa: BLE001 (not the filter's fault as far as we know: a 500, alone)
                    error = _failed("filter", job, exc)
            errors.append(error)
        t1, started = time.perf_counter(), time.time_ns()
        vecs, truncated, tokens, n_texts = self._encode(jobs, errors)
        t2, encoded_at = time.perf_counter(), time.time_ns()
        # the rows of each job in `vecs` (live jobs only), and the jobs of each index search: one group per
        # (filter, search parameters); filter None = unfiltered
        rows_of: dict[int, range] = {}
        groups: dict[tuple[str | None, str | None], list[int]] = {}
        row = 0
        for j, job in enumerate(jobs):
            if errors[j] is not None:
                continue
            rows_of[j] = range(row, row + len(job.texts))
            row += len(job.texts)
            if job.top_k is not None:
                group = (None if job.filter is None else FilterCache.key(job.filter),
                         FilterCache.key(job.knobs) if job.knobs else None)
                groups.setdefault(group, []).append(j)
        hits: dict[int, list[Hit]] = {}
        # the groups' index searches and store lookups interleave: their sums (the filters' queries count as search)
        search_ns, lookup_ns = int((t1 - t0) * 1e9), 0
        for group, members in groups.items():
            match = None if group[0] is None else matches[group[0]]
            try:
                g_search, g_lookup = self._search_group(jobs, members, rows_of, vecs, match, hits)
            except Exception:  # noqa: BLE001 (one request of the group may be the cause: each runs alone)
                g_search = g_lookup = 0
                for j in members:
                    try:
                        a, b = self._search_group(jobs, [j], rows_of, vecs, match, hits)
                        g_search, g_lookup = g_search + a, g_lookup + b
                    except Exception as exc:  # noqa: BLE001
                        errors[j] = _failed("search", jobs[j], exc)
            search_ns, lookup_ns = search_ns + g_search, lookup_ns + g_lookup
        t3 = time.perf_counter()
        timeline = Timeline(started, encoded_at, encoded_at + search_ns if groups else None,
                            encoded_at + search_ns + lookup_ns if groups else None)
        filter_ms, encode_ms, search_ms = (t1 - t0) * 1000, (t2 - t1) * 1000, (t3 - t2) * 1000
        out = []
        for j, job in enumerate(jobs):
            error = errors[j]
            if error is not None:
                out.append(SearchResult([], [], 0.0, filter_ms, error=error))
                continue
            rows = rows_of[j]
            job_hits = [] if job.top_k is None else [hits[r][: job.top_k] for r in rows]
            out.append(SearchResult(job_hits, truncated[rows.start : rows.stop], encode_ms, filter_ms + search_ms,
                                    vectors=vecs[rows.start : rows.stop] if job.top_k is None else None,
                                    batch_texts=n_texts, tokens=tokens[rows.start : rows.stop], timeline=timeline))
        return out

    def _encode(self, jobs: list[Job], errors: list[Exception | None]
                ) -> tuple[np.ndarray, list[bool], list[int], int]:
        """(vectors, truncated, tokens, texts in the ONNX run) of the jobs without an error, in job order: one
        run for all of them, or, when that run raises, one run per job (a job whose run still raises gets its
        `errors` entry and no rows)."""
        live = [j for j, e in enumerate(errors) if e is None]
        texts = [t for j in live for t in jobs[j].texts]
        if not texts:  # every request of the batch was refused
            return np.zeros((0, self.encoder.dim), dtype=np.float32), [], [], 0
        try:
            e = self.encoder.encode_counted(texts, batch_size=len(texts))
            return e.vectors, list(e.truncated), list(e.tokens), len(texts)
        except Exception as exc:  # noqa: BLE001
            if len(live) == 1:
                errors[live[0]] = _failed("encode", jobs[live[0]], exc)
                return np.zeros((0, self.encoder.dim), dtype=np.float32), [], [], 0
        parts, truncated, tokens = [], [], []
        for j in live:
            try:
                e = self.encoder.encode_counted(jobs[j].texts, batch_size=len(jobs[j].texts))
            except Exception as exc:  # noqa: BLE001
                errors[j] = _failed("encode", jobs[j], exc)
                continue
            parts.append(e.vectors)
            truncated += list(e.truncated)
            tokens += list(e.tokens)
        vecs = np.concatenate(parts) if parts else np.zeros((0, self.encoder.dim), dtype=np.float32)
        return vecs, truncated, tokens, max((len(jobs[j].texts) for j in live), default=0)

    def _search_group(self, jobs: list[Job], members: list[int], rows_of: dict[int, range], vecs: np.ndarray,
                      match: FilterMatch | None, hits: dict[int, list[Hit]]) -> tuple[int, int]:
        """One index search for the jobs `members` (same filter and search parameters) and their hits' lookup, into
        `hits` by row;
        returns the ns each took."""
        rows = [r for j in members for r in rows_of[j]]
        k = max(jobs[j].top_k or 0 for j in members)
        group_vecs = vecs if len(rows) == len(vecs) else vecs[rows]
        g0 = time.time_ns()
        scores, ids = self.index.search(group_vecs, k, match, knobs=jobs[members[0]].knobs or None)
        g1 = time.time_ns()
        found = self.index.hits(scores, ids)
        hits.update(zip(rows, found, strict=True))
        return g1 - g0, time.time_ns() - g1

    def close(self) -> None:
        self.index.close()
