"""A searcher: an ONNX encoder paired with the index version it matches, answering one micro-batch at a time.

The index is anything with the `VectorIndex` shape: an `IndexVersion` in this process (the local backend) or
the shard deployments of one version on Ray Serve (the sharded backend). Encoding, the pairing checks, the
filters and the split of a micro-batch's results back into its requests are the same for both.

A micro-batch shares one ONNX run whatever its requests' filters; its index searches are one per distinct
filter and search parameters (the unfiltered requests together), since each request must be searched among its
own documents only.

Modes (`Job.mode`; None: the version's default): dense searches the vectors; lexical searches the version's BM25
index (`indexer.runtime.lexical`) and encodes nothing; hybrid does both and fuses the two top-100 lists
(`indexer.runtime.fusion`). The lexical searches run on a thread of the searcher's own while the batch encodes.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from indexer.runtime.ann import SEARCH_PARAMS, IndexParamError, check_search_params
from indexer.runtime.bounded_leg import BOUNDED_FROM, HYBRID_LEXICAL, HybridLexical, LexicalLeg
from indexer.runtime.encoder import OnnxEncoder
from indexer.runtime.faiss_index import set_threads
from indexer.runtime.filters import FilterError
from indexer.runtime.fusion import HYBRID_DEPTH, Fusion, fuse
from indexer.runtime.manifest import Manifest, SearchMode
from indexer.runtime.passages import Splitter, document_hits, fetch_depth, passage_hits
from indexer.runtime.query import Query
from indexer.runtime.version import FilterCache, FilterMatch, Hit, IndexVersion, VectorIndex
from service.engine.errors import BadFilter, BadSearchParams, BadVector, Mismatch, ModeUnavailable

log = logging.getLogger(__name__)

__all__ = ["Batch", "Hit", "Job", "Query", "Searcher", "SearchResult", "Stages", "VectorIndex"]

Ranked = tuple[np.ndarray, np.ndarray]  # one query's (scores, FAISS ids), best first


Job = Query  # a request in a micro-batch: the route's `Query` as it is


@dataclass(frozen=True)
class Stages:
    """Where a request's time went, in ms (each stage of the batch that ran it; 0 for a stage its mode skips)."""

    encode_ms: float = 0.0
    dense_ms: float = 0.0  # the filter's store query and the vector index's search
    lexical_ms: float = 0.0  # its own time: in hybrid it runs beside the encoding (a bounded leg: completed after)
    fusion_ms: float = 0.0
    lookup_ms: float = 0.0  # the hits' texts and metadata read from the store
    # hybrid: how many of the request's queries took the bounded lexical leg (`indexer.runtime.bounded_leg`: an
    # expensive query on a large collection) rather than the exact one; the rest were exact
    lexical_bounded: int = 0


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
    # this request alone failed: it was refused (BadFilter, BadSearchParams, ModeUnavailable), or its part of the
    # batch raised (the others of its batch are still answered)
    error: Exception | None = None
    mode: SearchMode | None = None  # the mode that ran (None: encode only)
    stages: Stages = field(default_factory=Stages)


@dataclass
class Batch:
    """One micro-batch in the making, by job index: what each stage of `Searcher.run_batch` reads and fills in."""

    jobs: list[Job]
    modes: list[SearchMode | None]  # None: encode only
    errors: list[Exception | None] = field(default_factory=list)  # a job with an error gets no more work
    matches: dict[str, FilterMatch] = field(default_factory=dict)  # by filter key
    searching: list[int] = field(default_factory=list)
    lexical_jobs: list[int] = field(default_factory=list)  # lexical and hybrid
    encoding: list[int] = field(default_factory=list)  # encode-only, dense and hybrid
    vecs: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))
    truncated: list[bool] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    n_texts: int = 0  # texts in the ONNX run
    rows_of: dict[int, range] = field(default_factory=dict)  # each encoded job's rows of `vecs`
    dense: dict[int, Ranked] = field(default_factory=dict)  # by row: raw (scores, ids) of the vector search
    dense_ns: int = 0
    # per lexical job its answers, per hybrid job its legs to complete (or what their search raised), and the ms
    lexical: dict[int, tuple[list[Ranked] | list[LexicalLeg] | Exception, float]] = field(default_factory=dict)
    finals: dict[int, list[Ranked]] = field(default_factory=dict)  # per job, per query: final (scores, ids)
    lexical_ms: dict[int, float] = field(default_factory=dict)
    fusion_ms: dict[int, float] = field(default_factory=dict)
    bounded: dict[int, int] = field(default_factory=dict)  # hybrid: its queries whose lexical leg was bounded
    hits: dict[int, list[list[Hit]]] = field(default_factory=dict)


def _failed(step: str, job: Job, exc: Exception) -> Exception:
    """Log a request's failure inside a batch (with its traceback: a bug or a value nothing refused earlier)."""
    what = "encode" if job.top_k is None else \
        f"{job.mode or 'default-mode'} search (top_k={job.top_k}, filter={'yes' if job.filter else 'no'})"
    log.error("a batch's %s step failed for one %s request of %d texts; its neighbours are answered: %r", step,
              what, len(job.texts), exc, exc_info=exc)
    return exc


class Searcher:
    def __init__(self, encoder: OnnxEncoder, index: VectorIndex, *, hybrid_lexical: HybridLexical = "bounded"
                 ) -> None:
        """`hybrid_lexical`: "bounded" bounds hybrid's lexical leg where the exact one is expensive
        (`bounded_leg.BOUNDED_FROM`), "exact" never does."""
        m = index.manifest.model
        if encoder.dim != index.dim:
            raise Mismatch(f"encoder {encoder.model_dir} has dim {encoder.dim} but index {index.version} has "
                           f"dim {index.dim}")
        if encoder.meta.onnx_sha256 != m.onnx_sha256:
            raise Mismatch(f"encoder {encoder.model_dir} (sha256 {encoder.meta.onnx_sha256[:12]}…) is not the "
                           f"model index {index.version} was built with ({m.onnx_sha256[:12]}…, {m.dir})")
        self.encoder = encoder
        self.index = index
        if hybrid_lexical not in HYBRID_LEXICAL:
            raise ValueError(f"hybrid_lexical must be one of {', '.join(HYBRID_LEXICAL)}, not {hybrid_lexical!r}")
        # the postings above which a hybrid query's lexical leg is bounded (None: never); a bench may lower it
        self.bounded_from: int | None = BOUNDED_FROM if hybrid_lexical == "bounded" else None
        self._pool: ThreadPoolExecutor | None = None  # the lexical searches' thread, started on first use
        self._pool_lock = threading.Lock()
        self._passages = index.manifest.chunking() is not None  # rows are passages: hits become documents
        self._splitter: Splitter | None = None

    @classmethod
    def pair(cls, index: VectorIndex, model_dir: Path | None = None, *, threads: int | None = None,
             reuse: OnnxEncoder | None = None, hybrid_lexical: HybridLexical = "bounded") -> Searcher:
        """Pair an opened index with its encoder (closing the index if that fails); `reuse` is kept when it is
        the very model the index needs, so a swap does not load the same ONNX session twice."""
        try:
            wanted = Path(model_dir or index.manifest.model.dir)
            if reuse is not None and reuse.model_dir == wanted and \
                    reuse.meta.onnx_sha256 == index.manifest.model.onnx_sha256:
                encoder = reuse
            else:  # check the ONNX bytes against encoder.json: a half-copied model must not be served
                encoder = OnnxEncoder(wanted, threads=threads, verify_sha256=True)
            searcher = cls(encoder, index, hybrid_lexical=hybrid_lexical)
        except BaseException:
            index.close()
            raise
        log.info("opened index %s (%d vectors) with encoder %s", index.version, index.ntotal, encoder.model_dir)
        return searcher

    @classmethod
    def open(cls, folder: Path, model_dir: Path | None = None, *, threads: int | None = None,
             nprobe: int | None = None, reuse: OnnxEncoder | None = None,
             search_params: dict[str, int | None] | None = None, hybrid_lexical: HybridLexical = "bounded"
             ) -> Searcher:
        """A version folder opened in this process (what the local backend serves)."""
        set_threads(threads)
        return cls.pair(IndexVersion(folder, nprobe=nprobe, search_params=search_params), model_dir, threads=threads,
                        reuse=reuse, hybrid_lexical=hybrid_lexical)

    @property
    def version(self) -> str:
        return self.index.version

    @property
    def manifest(self) -> Manifest:
        return self.index.manifest

    def splitter(self) -> Splitter | None:
        """How writes to this version split documents: the encoder's tokenizer at the chunk and overlap the build
        used (the manifest's); None: the version indexes whole documents."""
        chunking = self.manifest.chunking()
        if chunking is None or chunking.chunk is None:
            return None
        if self._splitter is None:
            self._splitter = Splitter(self.encoder.tokenizer, chunking.chunk, chunking.overlap)
        return self._splitter

    def search(self, texts: list[str], top_k: int, flt: dict[str, Any] | None = None,
               search_params: dict[str, int] | None = None, mode: SearchMode | None = None,
               fusion: Fusion | None = None) -> SearchResult:
        """One request on its own; raises what `run_batch` would have put in its `error`."""
        result = self.run_batch([Query(texts, top_k, flt, search_params, mode, fusion)])[0]
        if result.error is not None:
            raise result.error
        return result

    def run_batch(self, jobs: list[Job], encoder: OnnxEncoder | None = None) -> list[SearchResult]:
        """Several requests' texts in one ONNX run, and one index search per distinct filter and search parameters
        (the micro-batcher's unit of work): its stages, in order, each a method of its own — `plan` (modes and
        refusals), `encode_batch`, `retrieve` (dense; lexical on the searcher's thread), `fuse_batch`, `look_up`,
        `answers`.

        Each job is a `Query` (top_k None: encode only); results keep job order. Vectors of an encode-only job
        come back in `SearchResult.vectors`. A job whose filter does not fit the version's metadata (`BadFilter`),
        whose search parameters its index kind does not take (`BadSearchParams`), or whose mode the version cannot
        serve (`ModeUnavailable`) gets `error` and no work: it is refused before anything is encoded. Lexical jobs
        are not encoded at all, and their BM25 searches run on the searcher's own thread while the batch encodes;
        hybrid jobs take `HYBRID_DEPTH` candidates from each retriever and fuse them (`indexer.runtime.fusion`);
        the store is read once, for every job's final ids.

        `encoder`: what encodes the batch's texts instead of the searcher's own (the same model: the scheduler's
        view of vectors already computed for a batch shared by several collections, `scheduler`).

        A failure inside the batch fails the request that caused it alone: when the shared ONNX run, a shared
        vector search or the shared store lookup raises, each request of it is run again on its own, and those
        that still fail get the exception as their `error` (the engine raises it: a 500 of their own); a lexical
        search or a fusion that raises fails its own request only. Their neighbours are answered."""
        t0 = time.perf_counter()
        batch = self.plan(jobs)
        # BM25 needs no vector: the lexical searches run on a thread of their own while the encoder runs (ONNX
        # Runtime releases the GIL), so a hybrid search costs about the slower of the two, not their sum
        lexical_future: Future[dict[int, tuple[list[Ranked] | list[LexicalLeg] | Exception, float]]] | None = \
            self._lexical_pool().submit(self._lexical, batch) if batch.lexical_jobs and batch.encoding else None
        t1, started = time.perf_counter(), time.time_ns()
        self.encode_batch(batch, encoder or self.encoder)
        t2, encoded_at = time.perf_counter(), time.time_ns()
        batch.dense_ns = int((t1 - t0) * 1e9)  # the filters' queries count as dense search
        self.retrieve(batch, lexical_future)
        self.fuse_batch(batch)
        t3, searched_at = time.perf_counter(), time.time_ns()
        looked_up = self.look_up(batch)
        t4 = time.perf_counter()
        timeline = Timeline(started, encoded_at, searched_at if looked_up else None,
                            time.time_ns() if looked_up else None)
        return self.answers(batch, filter_ms=(t1 - t0) * 1000, encode_ms=(t2 - t1) * 1000,
                            lookup_ms=(t4 - t3) * 1000, timeline=timeline)

    # -- the stages of a batch, in order ------------------------------------------------------------------------
    def plan(self, jobs: list[Job]) -> Batch:
        """Each job's mode (None: encode only) and its refusal, if any (filters among them: the store's query for
        each distinct filter, which the version's cache may answer); which jobs search, search lexically, and
        are encoded."""
        default = self.default_mode()
        batch = Batch(jobs, [None if job.top_k is None else job.mode or default for job in jobs])
        batch.errors = [self._refusal(job, mode, batch.matches) for job, mode in zip(jobs, batch.modes, strict=True)]
        batch.searching = [j for j, m in enumerate(batch.modes) if m is not None and batch.errors[j] is None]
        batch.lexical_jobs = [j for j in batch.searching if batch.modes[j] != "dense"]
        # the jobs to encode: encode-only, dense and hybrid ones (lexical ones need no encoder)
        batch.encoding = [j for j, e in enumerate(batch.errors) if e is None and batch.modes[j] != "lexical"]
        return batch

    def encode_batch(self, batch: Batch, encoder: OnnxEncoder) -> None:
        """One ONNX run for the texts of every job to encode, and the rows of each in `batch.vecs` (a job whose
        encoding failed has none)."""
        batch.vecs, batch.truncated, batch.tokens, batch.n_texts = self._vectors(batch.jobs, batch.encoding,
                                                                                 batch.errors, encoder)
        row = 0
        for j in batch.encoding:
            if batch.errors[j] is None:
                batch.rows_of[j] = range(row, row + len(batch.jobs[j].texts))
                row += len(batch.jobs[j].texts)

    def retrieve(self, batch: Batch, lexical_future: Future[dict[int, tuple[list[Ranked] | list[LexicalLeg] |
                                                                 Exception, float]]] | None = None) -> None:
        """The vector searches: one per (filter, search parameters) of the dense and hybrid jobs, each row's raw
        (scores, ids) into `batch.dense` (filter None = unfiltered); then the lexical answers, from
        `lexical_future` (the searcher's thread) or run here."""
        groups: dict[tuple[str | None, str | None], list[int]] = {}
        for j in batch.searching:
            job = batch.jobs[j]
            if batch.errors[j] is None and batch.modes[j] != "lexical":
                group = (None if job.filter is None else FilterCache.key(job.filter),
                         FilterCache.key(job.search_params) if job.search_params else None)
                groups.setdefault(group, []).append(j)
        for group, members in groups.items():
            match = None if group[0] is None else batch.matches[group[0]]
            try:
                batch.dense_ns += self._dense_group(batch, members, match)
            except Exception:  # noqa: BLE001 (one request of the group may be the cause: each runs alone)
                for j in members:
                    try:
                        batch.dense_ns += self._dense_group(batch, [j], match)
                    except Exception as exc:  # noqa: BLE001
                        batch.errors[j] = _failed("search", batch.jobs[j], exc)
        batch.lexical = lexical_future.result() if lexical_future is not None else self._lexical(batch)

    def fuse_batch(self, batch: Batch) -> None:
        """Each searching job's final (scores, ids) per query, into `batch.finals`: its dense top_k, its lexical
        answer, or (hybrid) its lexical legs completed with the dense candidates (`complete_legs`) and the two
        fused."""
        for j in batch.searching:
            job, mode = batch.jobs[j], batch.modes[j]
            if batch.errors[j] is not None:
                continue
            top_k = self._depth(job)
            got: list[Ranked] | list[LexicalLeg] | Exception = []
            if mode != "dense":
                got, batch.lexical_ms[j] = batch.lexical[j]
                if isinstance(got, Exception):
                    batch.errors[j] = _failed("lexical search", job, got)
                    continue
            if mode == "lexical":
                batch.finals[j] = got  # type: ignore[assignment]
                continue
            dense, rows = batch.dense, batch.rows_of[j]
            lexical: list[Ranked] = []
            if mode == "hybrid":  # a bounded leg needs the dense candidates: it is completed here
                legs: list[LexicalLeg] = got  # type: ignore[assignment]
                c0 = time.perf_counter()
                try:
                    lexical = self.index.complete_legs(legs, [dense[r][1] for r in rows])
                except Exception as exc:  # noqa: BLE001
                    batch.errors[j] = _failed("lexical search", job, exc)
                    continue
                batch.lexical_ms[j] += (time.perf_counter() - c0) * 1000
                batch.bounded[j] = sum(leg.bounded for leg in legs)
            f0 = time.perf_counter()
            try:
                batch.finals[j] = [(dense[r][0][:top_k], dense[r][1][:top_k]) for r in rows] if mode == "dense" \
                    else [fuse(job.fusion or Fusion(), dense[r], lex, top_k) for r, lex in zip(rows, lexical,
                                                                                               strict=True)]
            except Exception as exc:  # noqa: BLE001
                batch.errors[j] = _failed("fusion", job, exc)
                continue
            if mode == "hybrid":
                batch.fusion_ms[j] = (time.perf_counter() - f0) * 1000

    def look_up(self, batch: Batch) -> bool:
        """One store read for every job's final ids, into `batch.hits`; whether there was anything to look up."""
        which = [j for j in batch.searching if batch.errors[j] is None]
        if not which:
            return False
        try:
            self._lookup(which, batch.finals, batch.hits, batch.jobs)
        except Exception:  # noqa: BLE001 (one request's ids may be the cause: each is looked up alone)
            for j in which:
                try:
                    self._lookup([j], batch.finals, batch.hits, batch.jobs)
                except Exception as exc:  # noqa: BLE001
                    batch.errors[j] = _failed("lookup", batch.jobs[j], exc)
        return True

    @staticmethod
    def answers(batch: Batch, *, filter_ms: float, encode_ms: float, lookup_ms: float,
                timeline: Timeline | None) -> list[SearchResult]:
        """Each job's `SearchResult`, in job order: its error, or its hits, vectors and stage times."""
        dense_ms = batch.dense_ns / 1e6
        out = []
        for j, job in enumerate(batch.jobs):
            error, mode = batch.errors[j], batch.modes[j]
            if error is not None:
                out.append(SearchResult([], [], 0.0, filter_ms, error=error))
                continue
            n = len(job.texts)
            encodes = mode != "lexical" and job.vectors is None  # a brought vector: nothing encoded
            rows = batch.rows_of.get(j, range(0))
            job_dense = dense_ms if mode != "lexical" else 0.0
            lex_ms, fuse_ms = batch.lexical_ms.get(j, 0.0), batch.fusion_ms.get(j, 0.0)
            stages = Stages(encode_ms if encodes else 0.0, job_dense, lex_ms, fuse_ms, lookup_ms,
                            batch.bounded.get(j, 0))
            out.append(SearchResult(batch.hits.get(j, []),
                                    batch.truncated[rows.start : rows.stop] if encodes else [False] * n,
                                    encode_ms if encodes else 0.0, job_dense + lex_ms + fuse_ms + lookup_ms,
                                    vectors=batch.vecs[rows.start : rows.stop] if mode is None else None,
                                    batch_texts=batch.n_texts,
                                    tokens=batch.tokens[rows.start : rows.stop] if encodes else [],
                                    timeline=timeline, mode=mode, stages=stages))
        return out

    def _refusal(self, job: Job, mode: SearchMode | None, matches: dict[str, FilterMatch]) -> Exception | None:
        """Why `job` gets no work (checked before anything is encoded), or None; its filter's matches are put in
        `matches`."""
        if mode is None:  # encode only
            return None
        if job.vectors is not None and job.vectors.shape[1] != self.encoder.dim:  # a swap to another encoder
            return BadVector(f"a vector of dimension {job.vectors.shape[1]}, but the served encoder has dimension "
                             f"{self.encoder.dim}", ["vector"])
        if mode != "dense":
            refused = self._lexical_refusal(mode)
            if refused is not None:
                return refused
        if job.search_params:
            if mode == "lexical":  # a request naming the mode is refused by its schema; this is the version's default
                verb = "tune" if len(job.search_params) > 1 else "tunes"
                return BadSearchParams(f"{' and '.join(job.search_params)} {verb} the vector search; mode 'lexical' "
                                       f"(this "
                                       f"version's default) runs none", next(iter(job.search_params)))
            kind = self.index.manifest.index.kind
            try:
                check_search_params(kind, job.search_params)
            except IndexParamError as exc:
                bad = [k for k in job.search_params if k not in SEARCH_PARAMS[kind]] or list(job.search_params)
                return BadSearchParams(str(exc), bad[0])
        if job.filter is not None:
            try:
                key = FilterCache.key(job.filter)
                if key not in matches:
                    matches[key] = self.index.match(job.filter)
            except FilterError as exc:
                return BadFilter(str(exc))
            except Exception as exc:  # noqa: BLE001 (not the filter's fault as far as we know: a 500, alone)
                return _failed("filter", job, exc)
        return None

    def _vectors(self, jobs: list[Job], wanted: list[int], errors: list[Exception | None], encoder: OnnxEncoder
                 ) -> tuple[np.ndarray, list[bool], list[int], int]:
        """`_encode` of the jobs `wanted` that bring no vectors, with the brought vectors of the others put in
        their place (job order kept; a brought text is neither encoded nor truncated: 0 tokens)."""
        if all(jobs[j].vectors is None for j in wanted):
            return self._encode(jobs, wanted, errors, encoder)
        to_encode = [j for j in wanted if jobs[j].vectors is None]
        vecs, truncated, tokens, n_texts = self._encode(jobs, to_encode, errors, encoder)
        parts: list[np.ndarray] = []
        out_trunc: list[bool] = []
        out_tokens: list[int] = []
        row = 0
        for j in wanted:
            if errors[j] is not None:
                continue
            n = len(jobs[j].texts)
            brought = jobs[j].vectors
            if brought is not None:
                parts.append(np.asarray(brought, dtype=np.float32))
                out_trunc += [False] * n
                out_tokens += [0] * n
            else:
                parts.append(vecs[row : row + n])
                out_trunc += truncated[row : row + n]
                out_tokens += tokens[row : row + n]
                row += n
        dim = self.encoder.dim
        return (np.concatenate(parts) if parts else np.zeros((0, dim), np.float32)), out_trunc, out_tokens, n_texts

    def _encode(self, jobs: list[Job], wanted: list[int], errors: list[Exception | None], encoder: OnnxEncoder
                ) -> tuple[np.ndarray, list[bool], list[int], int]:
        """(vectors, truncated, tokens, texts in the ONNX run) of the jobs `wanted`, in job order: one run for all
        of them, or, when that run raises, one run per job (a job whose run still raises gets its `errors` entry
        and no rows)."""
        texts = [t for j in wanted for t in jobs[j].texts]
        if not texts:  # every request of the batch was refused, or lexical
            return np.zeros((0, self.encoder.dim), dtype=np.float32), [], [], 0
        try:
            e = encoder.encode_counted(texts, batch_size=len(texts))
            return e.vectors, list(e.truncated), list(e.tokens), len(texts)
        except Exception as exc:  # noqa: BLE001
            if len(wanted) == 1:
                errors[wanted[0]] = _failed("encode", jobs[wanted[0]], exc)
                return np.zeros((0, self.encoder.dim), dtype=np.float32), [], [], 0
        parts, truncated, tokens = [], [], []
        for j in wanted:
            try:
                e = encoder.encode_counted(jobs[j].texts, batch_size=len(jobs[j].texts))
            except Exception as exc:  # noqa: BLE001
                errors[j] = _failed("encode", jobs[j], exc)
                continue
            parts.append(e.vectors)
            truncated += list(e.truncated)
            tokens += list(e.tokens)
        vecs = np.concatenate(parts) if parts else np.zeros((0, self.encoder.dim), dtype=np.float32)
        return vecs, truncated, tokens, max((len(jobs[j].texts) for j in wanted), default=0)

    def _dense_group(self, batch: Batch, members: list[int], match: FilterMatch | None) -> int:
        """One vector search for the jobs `members` (same filter and search parameters), at the depth the deepest
        needs (a hybrid job's at least `HYBRID_DEPTH`), its rows' raw (scores, ids) put in `batch.dense`; returns
        the ns it took."""
        jobs, modes, vecs = batch.jobs, batch.modes, batch.vecs
        rows = [r for j in members for r in batch.rows_of[j]]
        k = max(self._depth(jobs[j]) if modes[j] == "dense" else max(self._depth(jobs[j]), HYBRID_DEPTH)
                for j in members)
        group_vecs = vecs if len(rows) == len(vecs) else vecs[rows]
        g0 = time.time_ns()
        scores, ids = self.index.search(group_vecs, k, match, search_params=jobs[members[0]].search_params or None)
        batch.dense.update(zip(rows, zip(scores, ids, strict=True), strict=True))
        return time.time_ns() - g0

    def _lexical(self, batch: Batch) -> dict[int, tuple[list[Ranked] | list[LexicalLeg] | Exception, float]]:
        """Per lexical job its queries' lexical answers, per hybrid job their legs begun (`bounded_leg`: completed
        once the dense candidates are known), or what their search raised (that job alone fails), and the ms they
        took."""
        out: dict[int, tuple[list[Ranked] | list[LexicalLeg] | Exception, float]] = {}
        for j in batch.lexical_jobs:
            job = batch.jobs[j]
            l0 = time.perf_counter()
            got: list[Ranked] | list[LexicalLeg] | Exception
            try:
                match = None if job.filter is None else batch.matches[FilterCache.key(job.filter)]
                top_k = self._depth(job)
                if batch.modes[j] == "lexical":
                    got = self.index.lexical_search(job.texts, top_k, match)
                else:
                    got = self.index.lexical_legs(job.texts, max(top_k, HYBRID_DEPTH), match,
                                                  bounded_from=self.bounded_from)
            except Exception as exc:  # noqa: BLE001
                got = exc
            out[j] = (got, (time.perf_counter() - l0) * 1000)
        return out

    def _lookup(self, which: list[int], finals: dict[int, list[Ranked]], hits: dict[int, list[list[Hit]]],
                jobs: list[Job]) -> None:
        """The hits of the jobs `which` (texts, external ids, metadata) in one store read, into `hits` by job."""
        ranked = [r for j in which for r in finals[j]]
        found: list[list[Hit]] = []
        if ranked:
            width = max(1, max(len(ids) for _, ids in ranked))
            all_scores = np.full((len(ranked), width), -np.inf, dtype=np.float32)
            all_ids = np.full((len(ranked), width), -1, dtype=np.int64)
            for r, (scores, ids) in enumerate(ranked):
                all_scores[r, : len(ids)], all_ids[r, : len(ids)] = scores, ids
            found = self.index.hits(all_scores, all_ids)
        pos = 0
        for j in which:
            n = len(finals[j])
            hits[j] = self._documents(jobs[j], found[pos : pos + n]) if self._passages else \
                found[pos : pos + n]
            pos += n

    def _depth(self, job: Job) -> int:
        """Rows to fetch for a job: its top_k, or, on a version of passages, enough passages for top_k
        documents (a document may hold several of the best passages)."""
        top_k = job.top_k or 0
        return fetch_depth(top_k) if self._passages and not job.passages else top_k

    @staticmethod
    def _documents(job: Job, per_query: list[list[Hit]]) -> list[list[Hit]]:
        """A version of passages: each query's passage hits as its top_k documents (best passage each), or with
        `passages`, the passages themselves — both with offsets and a snippet for the query."""
        top_k = job.top_k or 0
        return [passage_hits(hits[:top_k], q) if job.passages else document_hits(hits, q, top_k)
                for q, hits in zip(job.texts, per_query, strict=True)]

    def _lexical_pool(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lexical")
            return self._pool

    def default_mode(self) -> SearchMode:
        """The mode a request that names none runs: the version's (`Manifest.search_mode`)."""
        return self.manifest.search_mode()

    def _lexical_refusal(self, mode: SearchMode) -> ModeUnavailable | None:
        """Why this version cannot serve `mode` (lexical or hybrid), or None."""
        if self.manifest.lexical is None:
            return ModeUnavailable(f"mode {mode!r} needs a lexical index, and version {self.version} was built "
                                   f"without one (before lexical retrieval, or with --no-lexical): use mode 'dense', "
                                   f"or rebuild it with `indexer build`")
        return None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self.index.close()
