"""A batch's search stages, after its encoding: the vector searches (one per distinct filter and search parameters),
the lexical searches (run on the searcher's lexical pool while the batch encodes), each job's final ranked lists
(hybrid: its lexical legs completed with the dense candidates and fused), and, on a version of passages, the top_k
documents each job asked for (`indexer.runtime.doc_topk`: deepened, bounded, ranked independently of top_k).

Each function fills in its part of the `Batch`; a failure fails the job that caused it alone (`batch.failed`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from indexer.runtime import doc_topk
from indexer.runtime.bounded_leg import LexicalLeg
from indexer.runtime.fusion import HYBRID_DEPTH, Fusion, fuse
from indexer.runtime.version import FilterCache, FilterMatch, VectorIndex
from service.engine.batch import Batch, Job, LexicalGot, Ranked, failed


def by_documents(job: Job, passages: bool) -> bool:
    """Whether a job on a version of passages (`passages`) is answered by documents (the default) rather than
    by the passages themselves (`"passages": true`)."""
    return passages and not job.passages


def depth(job: Job, passages: bool) -> int:
    """Rows to search first for a job: its top_k, or, answered by documents, enough passages for top_k documents
    most of the time (`doc_topk.first_depth`; `collect_documents` searches deeper when they are not)."""
    top_k = job.top_k or 0
    return doc_topk.first_depth(top_k) if by_documents(job, passages) else top_k


def _leg_depth(job: Job, passages: bool) -> int:
    return max(depth(job, passages), HYBRID_DEPTH)


def dense_group(index: VectorIndex, batch: Batch, members: list[int], match: FilterMatch | None, passages: bool
                ) -> int:
    """One vector search for the jobs `members` (same filter and search parameters), at the depth the deepest
    needs (a hybrid job's at least `HYBRID_DEPTH`), its rows' raw (scores, ids) put in `batch.dense`; returns
    the ns it took."""
    jobs, modes, vecs = batch.jobs, batch.modes, batch.vecs
    rows = [r for j in members for r in batch.rows_of[j]]
    k = max(depth(jobs[j], passages) if modes[j] == "dense" else _leg_depth(jobs[j], passages) for j in members)
    group_vecs = vecs if len(rows) == len(vecs) else vecs[rows]
    params = jobs[members[0]].search_params or None
    g0 = time.time_ns()
    # one row past k, so that its ties are settled by id (`doc_topk.settle`), whole documents as passages
    scores, ids = index.search(group_vecs, k + 1, match, search_params=params)
    found = [doc_topk.settle(_dense_search(index, vecs[r], match, params, settled=False), (s, i), k + 1, k)
             for r, s, i in zip(rows, scores, ids, strict=True)]
    batch.dense.update(zip(rows, found, strict=True))
    return time.time_ns() - g0


def _dense_search(index: VectorIndex, vec: np.ndarray, match: FilterMatch | None, params: dict[str, int] | None,
                  *, settled: bool = True) -> Callable[[int], Ranked]:
    """One query vector's search `d` deep; `settled`: its ties settled (`doc_topk.settle`: one row more searched,
    ties by id), as every dense list is, so that no ranking depends on the depth."""
    def search(d: int) -> Ranked:
        scores, ids = index.search(vec[None, :], d, match, search_params=params)
        return scores[0], ids[0]

    if not settled:
        return search
    return lambda d: doc_topk.settle(search, search(d + 1), d + 1, d)


def search_dense(index: VectorIndex, batch: Batch, passages: bool) -> None:
    """The vector searches of the dense and hybrid jobs: one per (filter, search parameters), into `batch.dense`
    by row; a group whose search raises is searched again job by job, so only the job that fails fails."""
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
            batch.dense_ns += dense_group(index, batch, members, match, passages)
        except Exception:  # noqa: BLE001 (one request of the group may be the cause: each runs alone)
            for j in members:
                try:
                    batch.dense_ns += dense_group(index, batch, [j], match, passages)
                except Exception as exc:  # noqa: BLE001
                    batch.errors[j] = failed("search", batch.jobs[j], exc)


def lexical_answers(index: VectorIndex, batch: Batch, passages: bool, bounded_from: int | None
                    ) -> dict[int, tuple[LexicalGot, float]]:
    """Per lexical job its queries' lexical answers, per hybrid job their legs begun (`bounded_leg`: completed
    once the dense candidates are known), or what their search raised (that job alone fails), and the ms they
    took."""
    out: dict[int, tuple[LexicalGot, float]] = {}
    for j in batch.lexical_jobs:
        job = batch.jobs[j]
        l0 = time.perf_counter()
        got: LexicalGot
        try:
            match = _match(batch, job)
            if batch.modes[j] == "lexical":
                got = index.lexical_search(job.texts, depth(job, passages), match)
            else:
                got = index.lexical_legs(job.texts, _leg_depth(job, passages), match, bounded_from=bounded_from)
        except Exception as exc:  # noqa: BLE001
            got = exc
        out[j] = (got, (time.perf_counter() - l0) * 1000)
    return out


def _match(batch: Batch, job: Job) -> FilterMatch | None:
    return None if job.filter is None else batch.matches[FilterCache.key(job.filter)]


def finals(index: VectorIndex, batch: Batch, j: int, passages: bool) -> None:
    """Job `j`'s final (scores, ids) per query, into `batch.finals`: its dense top_k, its lexical answer, or
    (hybrid) its lexical legs completed with the dense candidates (`complete_legs`) and the two fused. A job
    answered by documents keeps its whole lists (hybrid: its legs, in `batch.legs`) for `collect_documents`."""
    job, mode = batch.jobs[j], batch.modes[j]
    top_k, documents = depth(job, passages), by_documents(job, passages)
    got: LexicalGot = []
    if mode != "dense":
        got, batch.lexical_ms[j] = batch.lexical[j]
        if isinstance(got, Exception):
            batch.errors[j] = failed("lexical search", job, got)
            return
    if mode == "lexical":
        batch.finals[j] = got  # type: ignore[assignment]
        return
    dense, rows = batch.dense, batch.rows_of[j]
    if mode == "dense":
        batch.finals[j] = [dense[r] if documents else (dense[r][0][:top_k], dense[r][1][:top_k]) for r in rows]
        return
    legs: list[LexicalLeg] = got  # type: ignore[assignment]
    c0 = time.perf_counter()
    batch.bounded[j] = sum(leg.bounded for leg in legs)
    # the dense leg as deep as this job's own (the batch's search went as deep as its deepest job), so that its
    # fusion does not depend on the jobs it was batched with; settled by id, its first rows are the same
    vector = [dense[r] if documents else (dense[r][0][:_leg_depth(job, passages)],
                                          dense[r][1][:_leg_depth(job, passages)]) for r in rows]
    candidates = [v[1] for v in vector]
    if documents and batch.bounded[j]:
        # a bounded leg scores the dense candidates it is completed with: completed with the first tier's (as
        # `collect_documents` then fuses it), not with as many as top_k asked for, no ranking depends on top_k
        legs = [replace(leg, scores=leg.scores[:HYBRID_DEPTH], ids=leg.ids[:HYBRID_DEPTH], k=HYBRID_DEPTH)
                for leg in legs]
        candidates = [c[:HYBRID_DEPTH] for c in candidates]
    try:  # a bounded leg needs the dense candidates: it is completed here
        lexical = index.complete_legs(legs, candidates)
    except Exception as exc:  # noqa: BLE001
        batch.errors[j] = failed("lexical search", job, exc)
        return
    batch.lexical_ms[j] += (time.perf_counter() - c0) * 1000
    if documents:
        batch.legs[j] = list(zip(vector, lexical, strict=True))
        return
    f0 = time.perf_counter()
    try:
        batch.finals[j] = [fuse(job.fusion or Fusion(), v, lex, top_k) for v, lex in zip(vector, lexical, strict=True)]
    except Exception as exc:  # noqa: BLE001
        batch.errors[j] = failed("fusion", job, exc)
        return
    batch.fusion_ms[j] = (time.perf_counter() - f0) * 1000


def collect_documents(index: VectorIndex, batch: Batch, j: int, bounded_from: int | None) -> None:
    """A job answered by documents: each query's top_k documents (best passage each) into `batch.finals`, its
    lists searched deeper where a few documents filled them (`doc_topk`), and whether the bound stopped it short
    into `batch.short`; the time goes to the mode's own stage (fusion for hybrid)."""
    job, mode = batch.jobs[j], batch.modes[j]
    top_k, first, match = job.top_k or 0, doc_topk.first_depth(job.top_k or 0), _match(batch, job)
    params = job.search_params or None
    t0 = time.perf_counter()
    ranked: list[doc_topk.DocRanking] = []
    for q, text in enumerate(job.texts):
        if mode == "lexical":
            def lexical(d: int, text: str = text) -> Ranked:
                return index.lexical_search([text], d, match)[0]

            ranked.append(doc_topk.rank_list(lexical, batch.finals[j][q], first, index.doc_rows, top_k))
            continue
        dense = _dense_search(index, batch.vecs[batch.rows_of[j][q]], match, params)
        if mode == "dense":
            got = batch.finals[j][q]
            ranked.append(doc_topk.rank_list(dense, got, len(got[1]), index.doc_rows, top_k))
        else:
            legs_depth = HYBRID_DEPTH if batch.bounded.get(j) else _leg_depth(job, True)  # as `finals` completed them
            ranked.append(doc_topk.rank_fused(_legs(index, dense, text, match, bounded_from), batch.legs[j][q],
                                              legs_depth, _fusing(job), index.doc_rows, top_k))
    batch.finals[j] = [r.ranked() for r in ranked]
    batch.short[j] = [r.short for r in ranked]
    ms = (time.perf_counter() - t0) * 1000
    stage = batch.fusion_ms if mode == "hybrid" else batch.lexical_ms if mode == "lexical" else batch.deepen_ms
    stage[j] = stage.get(j, 0.0) + ms


def _fusing(job: Job) -> Callable[[Ranked, Ranked, int], Ranked]:
    fusion = job.fusion or Fusion()
    return lambda dense, lexical, k: fuse(fusion, dense, lexical, k)


def _legs(index: VectorIndex, dense: Callable[[int], Ranked], text: str, match: FilterMatch | None,
          bounded_from: int | None) -> Callable[[int], tuple[Ranked, Ranked]]:
    """Hybrid's two legs of one query searched `d` deep (a tier deeper than the batch searched)."""
    def legs(d: int) -> tuple[Ranked, Ranked]:
        vector = dense(d)
        begun = index.lexical_legs([text], d, match, bounded_from=bounded_from)
        return vector, index.complete_legs(begun, [vector[1]])[0]

    return legs
