"""A searcher: an ONNX encoder paired with the index version it matches, answering one micro-batch at a time.

The index is anything with the `VectorIndex` shape: an `IndexVersion` in this process (the local backend) or
the shard deployments of one version on Ray Serve (the sharded backend). Encoding, the pairing checks, the
filters and the split of a micro-batch's results back into its requests are the same for both.

A micro-batch shares one ONNX run whatever its requests' filters; its index searches are one per distinct
filter and search parameters (the unfiltered requests together), since each request must be searched among its
own documents only.

Modes (`Job.mode`; None: the version's default): dense searches the vectors; lexical searches the version's BM25
index (`indexer.runtime.lexical`) and encodes nothing; hybrid does both and fuses the two top-100 lists
(`indexer.runtime.fusion`). The lexical searches run on the searcher's lexical pool while the batch encodes.

The batch's stages are methods here over modules of their own: `batch` (what they fill in), `refusals`,
`encoding`, `retrieval` (the searches, fusion and a version of passages' documents), `lexical_pool`.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np

from indexer.runtime.bounded_leg import BOUNDED_FROM, HYBRID_LEXICAL, HybridLexical
from indexer.runtime.encoder import OnnxEncoder
from indexer.runtime.faiss.devices import set_threads
from indexer.runtime.fusion import Fusion
from indexer.runtime.live_index import LiveIndex
from indexer.runtime.manifest import Manifest, SearchMode
from indexer.runtime.passages import Splitter, with_snippets
from indexer.runtime.query import Query
from indexer.runtime.version import Hit, IndexVersion, VectorIndex
from service.engine import retrieval
from service.engine.batch import Batch, Job, LexicalGot, Ranked, SearchResult, Stages, Timeline, failed
from service.engine.encoding import encode_jobs
from service.engine.errors import Mismatch
from service.engine.lexical_pool import LexicalPool
from service.engine.refusals import refusal
from service.engine.settings import cores

log = logging.getLogger(__name__)

__all__ = ["Batch", "Hit", "Job", "Query", "Searcher", "SearchResult", "Stages", "Timeline", "VectorIndex"]


class Searcher:
    def __init__(self, encoder: OnnxEncoder, index: VectorIndex, *, hybrid_lexical: HybridLexical = "bounded",
                 lexical_workers: int | None = None) -> None:
        """`hybrid_lexical`: "bounded" bounds hybrid's lexical leg where the exact one is expensive
        (`bounded_leg.BOUNDED_FROM`), "exact" never does. `lexical_workers`: the threads that run batches' lexical
        searches beside their encoding (None: one per core, as the inference workers' default)."""
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
        self._lexical_pool = LexicalPool(lexical_workers or cores())  # the lexical searches' threads
        self._passages = index.manifest.chunking() is not None  # rows are passages: hits become documents
        if self._passages:  # the rows' documents, found once here rather than by a first search
            index.doc_rows(np.zeros(0, np.int64))
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
        refusals), `encode_batch`, `retrieve` (dense; lexical on the searcher's lexical pool), `fuse_batch`, `look_up`,
        `answers`.

        Each job is a `Query` (top_k None: encode only); results keep job order. Vectors of an encode-only job
        come back in `SearchResult.vectors`. A job whose filter does not fit the version's metadata (`BadFilter`),
        whose search parameters its index kind does not take (`BadSearchParams`), or whose mode the version cannot
        serve (`ModeUnavailable`) gets `error` and no work: it is refused before anything is encoded. Lexical jobs
        are not encoded at all, and their BM25 searches run on the searcher's lexical pool while the batch encodes;
        hybrid jobs take `HYBRID_DEPTH` candidates from each retriever and fuse them (`indexer.runtime.fusion`);
        on a version of passages a job gets top_k documents, searched deeper where a few documents fill the
        candidates (`indexer.runtime.doc_topk`); the store is read once, for every job's final ids.

        `encoder`: what encodes the batch's texts instead of the searcher's own (the same model: the scheduler's
        view of vectors already computed for a batch shared by several collections, `scheduler`).

        A failure inside the batch fails the request that caused it alone: when the shared ONNX run, a shared
        vector search or the shared store lookup raises, each request of it is run again on its own, and those
        that still fail get the exception as their `error` (the engine raises it: a 500 of their own); a lexical
        search or a fusion that raises fails its own request only. Their neighbours are answered."""
        t0 = time.perf_counter()
        since = self.index.moment() if isinstance(self.index, LiveIndex) else None  # before any search reads rows
        batch = self.plan(jobs)
        batch.since = since
        # BM25 needs no vector: the lexical searches run on the lexical pool while the encoder runs
        lexical_future = self._lexical_pool.submit(lambda: self._lexical(batch)) \
            if batch.lexical_jobs and batch.encoding else None
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
        batch.errors = [refusal(self.index, self.encoder.dim, job, mode, batch.matches)
                        for job, mode in zip(jobs, batch.modes, strict=True)]
        batch.searching = [j for j, m in enumerate(batch.modes) if m is not None and batch.errors[j] is None]
        batch.lexical_jobs = [j for j in batch.searching if batch.modes[j] != "dense"]
        # the jobs to encode: encode-only, dense and hybrid ones (lexical ones need no encoder)
        batch.encoding = [j for j, e in enumerate(batch.errors) if e is None and batch.modes[j] != "lexical"]
        return batch

    def encode_batch(self, batch: Batch, encoder: OnnxEncoder) -> None:
        """One ONNX run for the texts of every job to encode, and the rows of each in `batch.vecs` (a job whose
        encoding failed has none)."""
        batch.vecs, batch.truncated, batch.tokens, batch.n_texts = encode_jobs(batch.jobs, batch.encoding,
                                                                               batch.errors, encoder, self.encoder.dim)
        row = 0
        for j in batch.encoding:
            if batch.errors[j] is None:
                batch.rows_of[j] = range(row, row + len(batch.jobs[j].texts))
                row += len(batch.jobs[j].texts)

    def retrieve(self, batch: Batch, lexical_future: Future[dict[int, tuple[LexicalGot, float]]] | None = None
                 ) -> None:
        """The vector searches: one per (filter, search parameters) of the dense and hybrid jobs, each row's raw
        (scores, ids) into `batch.dense` (filter None = unfiltered); then the lexical answers, from
        `lexical_future` (the lexical pool) or run here."""
        retrieval.search_dense(self.index, batch, self._passages)
        batch.lexical = lexical_future.result() if lexical_future is not None else self._lexical(batch)

    def fuse_batch(self, batch: Batch) -> None:
        """Each searching job's final (scores, ids) per query, into `batch.finals`: its dense top_k, its lexical
        answer, or (hybrid) its lexical legs completed with the dense candidates (`complete_legs`) and the two
        fused; on a version of passages, each job's top_k documents (`retrieval.collect_documents`)."""
        for j in batch.searching:
            if batch.errors[j] is None:
                retrieval.finals(self.index, batch, j, self._passages)
            if batch.errors[j] is None and retrieval.by_documents(batch.jobs[j], self._passages):
                try:
                    retrieval.collect_documents(self.index, batch, j, self.bounded_from)
                except Exception as exc:  # noqa: BLE001
                    batch.errors[j] = failed("search", batch.jobs[j], exc)

    def look_up(self, batch: Batch) -> bool:
        """One store read for every job's final ids, into `batch.hits`; whether there was anything to look up."""
        which = [j for j in batch.searching if batch.errors[j] is None]
        if not which:
            return False
        try:
            self._lookup(which, batch)
        except Exception:  # noqa: BLE001 (one request's ids may be the cause: each is looked up alone)
            for j in which:
                try:
                    self._lookup([j], batch)
                except Exception as exc:  # noqa: BLE001
                    batch.errors[j] = failed("lookup", batch.jobs[j], exc)
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
            job_dense = dense_ms + batch.deepen_ms.get(j, 0.0) if mode != "lexical" else 0.0
            lex_ms, fuse_ms = batch.lexical_ms.get(j, 0.0), batch.fusion_ms.get(j, 0.0)
            stages = Stages(encode_ms if encodes else 0.0, job_dense, lex_ms, fuse_ms, lookup_ms,
                            batch.bounded.get(j, 0))
            cut = batch.truncated[rows.start : rows.stop] if encodes else [False] * n
            short = batch.short.get(j, [False] * n)
            out.append(SearchResult(batch.hits.get(j, []), [c or s for c, s in zip(cut, short, strict=True)],
                                    encode_ms if encodes else 0.0, job_dense + lex_ms + fuse_ms + lookup_ms,
                                    vectors=batch.vecs[rows.start : rows.stop] if mode is None else None,
                                    batch_texts=batch.n_texts,
                                    tokens=batch.tokens[rows.start : rows.stop] if encodes else [],
                                    timeline=timeline, mode=mode, stages=stages))
        return out

    def _lexical(self, batch: Batch) -> dict[int, tuple[LexicalGot, float]]:
        return retrieval.lexical_answers(self.index, batch, self._passages, self.bounded_from)

    def _lookup(self, which: list[int], batch: Batch) -> None:
        """The hits of the jobs `which` (texts, external ids, metadata) in one store read, into `batch.hits`."""
        ranked: list[Ranked] = [r for j in which for r in batch.finals[j]]
        found: list[list[Hit]] = []
        if ranked:
            width = max(1, max(len(ids) for _, ids in ranked))
            all_scores = np.full((len(ranked), width), -np.inf, dtype=np.float32)
            all_ids = np.full((len(ranked), width), -1, dtype=np.int64)
            for r, (scores, ids) in enumerate(ranked):
                all_scores[r, : len(ids)], all_ids[r, : len(ids)] = scores, ids
            found = self.index.hits(all_scores, all_ids, passages=self._passages, since=batch.since)  # built once
        pos = 0
        for j in which:
            n, job = len(batch.finals[j]), batch.jobs[j]
            per_query = found[pos : pos + n]
            if self._passages:  # each hit its document's already (`hits(..., passages=True)`) and, ranked by
                # documents, one a document (its list collapsed by `doc_topk`): what is left is the snippets, if asked
                top_k = job.top_k or 0
                per_query = [with_snippets(hits[:top_k], q) if job.snippets else hits[:top_k]
                             for q, hits in zip(job.texts, per_query, strict=True)]
            batch.hits[j] = per_query
            pos += n

    def default_mode(self) -> SearchMode:
        """The mode a request that names none runs: the version's (`Manifest.search_mode`)."""
        return self.manifest.search_mode()

    def close(self) -> None:
        self._lexical_pool.shutdown()
        self.index.close()
