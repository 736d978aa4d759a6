"""One micro-batch in the making and what it answers: the `Batch` that `Searcher.run_batch`'s stages read and fill
in, each request's `SearchResult` with its `Stages` (where its time went) and the batch's `Timeline`, and how a
request's failure inside a batch is logged (`failed`: that request alone fails, its neighbours are answered)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from indexer.runtime.bounded_leg import LexicalLeg
from indexer.runtime.manifest import SearchMode
from indexer.runtime.query import Query
from indexer.runtime.version import FilterMatch, Hit

log = logging.getLogger("service.engine.searcher")

Ranked = tuple[np.ndarray, np.ndarray]  # one query's (scores, FAISS ids), best first
Job = Query  # a request in a micro-batch: the route's `Query` as it is
# a lexical job's answers, a hybrid job's legs to complete, or what their search raised
LexicalGot = list[Ranked] | list[LexicalLeg] | Exception


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
    # per text: cut to the model's max_length tokens, or (a version of passages) fewer than top_k documents
    # answered though more may match: the candidate bound (`indexer.runtime.doc_topk.MAX_DEPTH`) stopped it
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
    lexical: dict[int, tuple[LexicalGot, float]] = field(default_factory=dict)
    finals: dict[int, list[Ranked]] = field(default_factory=dict)  # per job, per query: final (scores, ids)
    lexical_ms: dict[int, float] = field(default_factory=dict)
    fusion_ms: dict[int, float] = field(default_factory=dict)
    bounded: dict[int, int] = field(default_factory=dict)  # hybrid: its queries whose lexical leg was bounded
    # a version of passages ranked by documents: per job, per query, the hybrid legs completed (fused by documents
    # in `collect_documents`), and whether the candidate bound stopped it short of top_k documents
    legs: dict[int, list[tuple[Ranked, Ranked]]] = field(default_factory=dict)
    short: dict[int, list[bool]] = field(default_factory=dict)
    deepen_ms: dict[int, float] = field(default_factory=dict)  # dense: its searches deeper (counted as dense)
    hits: dict[int, list[list[Hit]]] = field(default_factory=dict)
    # the write overlay's applied seq when the batch began (`LiveIndex.moment`): documents written after it are
    # left out of its hits (their rows keep their FAISS ids: a search may have scored the earlier text); None: no
    # overlay
    since: int | None = None


def failed(step: str, job: Job, exc: Exception) -> Exception:
    """Log a request's failure inside a batch (with its traceback: a bug or a value nothing refused earlier)."""
    what = "encode" if job.top_k is None else \
        f"{job.mode or 'default-mode'} search (top_k={job.top_k}, filter={'yes' if job.filter else 'no'})"
    log.error("a batch's %s step failed for one %s request of %d texts; its neighbours are answered: %r", step,
              what, len(job.texts), exc, exc_info=exc)
    return exc
