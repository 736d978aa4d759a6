"""Retrieval quality and speed of an index version on its stored evaluation queries (the paper's Table 3 row:
MRR@10, average retrieval time, index memory; plus Recall@10 and exact-search MRR@10 on the same vectors)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from indexer.doc_ranks import DocumentRanks
from indexer.metrics import mean_metrics
from indexer.runs import RunKey
from indexer.runtime.faiss.devices import get_threads, set_threads
from indexer.runtime.manifest import EvalFigures
from indexer.runtime.store import GradedEvalSet
from indexer.runtime.version import IndexVersion

if TYPE_CHECKING:
    from indexer.evalset import EvalSetStats
    from indexer.runs import RunCollector
    from indexer.runtime.encoder import OnnxEncoder

log = logging.getLogger(__name__)

# Query × document inner products the exact-search reference may cost: 1e10 is about a minute on 2 cores. The
# paper protocol (28,772 × 87,249 = 2.5e9) stays whole; the full one (86,168 × 537,662 = 4.6e10, five minutes
# of a 20-minute build) is measured on a seeded sample of 18,599 queries.
EXACT_PAIRS_BUDGET = 10**10


class EvalError(RuntimeError):
    """The version has no usable evaluation set."""


def per_query_ranks(ranked: np.ndarray, gold: Sequence[set[int]], k: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """Per query: its reciprocal rank (1 / rank of the first gold document in the top k, 0 if none) and its
    Recall@k (share of its gold found in the top k)."""
    rr = np.zeros(len(gold))
    rec = np.zeros(len(gold))
    for q, (row, g) in enumerate(zip(ranked[:, :k], gold, strict=True)):
        hits = [i for i, doc in enumerate(row.tolist()) if doc in g]
        rr[q] = 1.0 / (hits[0] + 1) if hits else 0.0
        rec[q] = len(hits) / len(g)
    return rr, rec


def rank_metrics(ranked: np.ndarray, gold: Sequence[set[int]], k: int = 10) -> tuple[float, float]:
    """MRR@k and Recall@k (share of each query's gold found in its top k), averaged over queries."""
    rr, rec = per_query_ranks(ranked, gold, k)
    return (float(rr.mean()), float(rec.mean())) if len(gold) else (0.0, 0.0)


def drop_self(ids: np.ndarray, query_ids: np.ndarray, k: int) -> np.ndarray:
    """Remove each query's own id from its results (protocol `full`: queries are documents too)."""
    return drop_self_scored(ids, np.zeros(ids.shape, dtype=np.float32), query_ids, k)[0]


def drop_self_scored(ids: np.ndarray, scores: np.ndarray, query_ids: np.ndarray, k: int
                     ) -> tuple[np.ndarray, np.ndarray]:
    """`drop_self`, keeping each remaining id's score beside it (-inf beside the -1 padding)."""
    out = np.full((ids.shape[0], k), -1, dtype=np.int64)
    out_scores = np.full((ids.shape[0], k), -np.inf, dtype=np.float32)
    for r, (row, row_scores, q) in enumerate(zip(ids, scores, query_ids, strict=True)):
        keep = row != q
        kept = row[keep][:k]
        out[r, : len(kept)] = kept
        out_scores[r, : len(kept)] = row_scores[keep][:k]
    return out, out_scores


def ann_overlap(approx: np.ndarray, exact: np.ndarray) -> float:
    """ANN recall: the share of each exact top-k (its valid ids, -1 padding excluded) that the approximate top-k
    also holds, averaged over the queries that have any exact hit (1.0 when none has)."""
    shares = [len(set(a[a >= 0]) & set(b[b >= 0])) / int((b >= 0).sum())
              for a, b in zip(approx, exact, strict=True) if (b >= 0).any()]
    return float(np.mean(shares)) if shares else 1.0


def exact_sample(n_queries: int, n_docs: int, budget: int | None, seed: int = 0) -> np.ndarray | None:
    """Sorted positions of the queries to search exactly, or None for all of them (within `budget`)."""
    if budget is None or n_queries * n_docs <= budget:
        return None
    size = max(1, min(n_queries, budget // max(n_docs, 1)))
    return np.sort(np.random.default_rng(seed).choice(n_queries, size=size, replace=False))


def eval_search_params(version: IndexVersion, nprobe: int | None = None,
                 search_params: dict[str, int | None] | None = None) -> dict[str, int]:
    """The search parameters an evaluation uses: the version's defaults, overridden by those given (`--nprobe`,
    `--ef-search`), which must be ones its kind takes (`IndexParamError` otherwise). nprobe is clamped to nlist:
    what is reported is what was searched."""
    given = version.check_search_params({"nprobe": nprobe, **(search_params or {})})
    resolved = {**version.search_defaults(), **given}
    if "nprobe" in resolved and version.nlist:
        resolved["nprobe"] = max(1, min(resolved["nprobe"], version.nlist))
    return resolved


def evaluate(version: IndexVersion, *, nprobe: int | None = None, batch_size: int = 1,
             threads: int | None = None, k: int = 10, exact_budget: int | None = EXACT_PAIRS_BUDGET,
             search_params: dict[str, int | None] | None = None, runs: RunCollector | None = None) -> EvalFigures:
    """MRR@10 and Recall@10 of the index at its search parameters (the version's, or `nprobe`/`search_params`)
    over every evaluation query, single-query timing, and the exact-search reference on the index's own vectors
    (all queries, or a seeded sample past `exact_budget` query × document pairs; None: always all). `runs`
    receives the rankings scored (and, for the Quora protocol, the judgments as qrels)."""
    graded = version.store.graded_eval_set()
    if graded is not None:  # a corpus build's queries and qrels
        qvecs = version.query_vectors()
        if qvecs is None or len(qvecs) != len(graded.query_texts):
            raise EvalError(f"{version.folder}: query vectors do not match its {len(graded.query_texts)} queries")
        return evaluate_graded(version, qvecs, graded, nprobe=nprobe, batch_size=batch_size, threads=threads,
                               exact_budget=exact_budget, query_set=version.manifest.data.eval_source,
                               search_params=search_params, runs=runs)
    qids, gold, qvecs = _quora_queries(version)
    query_ids = np.asarray(qids, dtype=np.int64)
    exclude_self = version.manifest.data.protocol in ("full", "heldout")
    depth = k + 1 if exclude_self else k
    resolved = eval_search_params(version, nprobe, search_params)
    set_threads(threads)
    used_threads = get_threads()
    scores, ids, elapsed = _timed_search(version, qvecs, depth, batch_size, resolved)
    sample, pick = _exact_pick(version, len(qvecs), exact_budget)
    exact_scores, exact = version.ann.exact_search(qvecs[pick], depth)
    if exclude_self:
        ids, scores = drop_self_scored(ids, scores, query_ids, k)
        exact, exact_scores = drop_self_scored(exact, exact_scores, query_ids[pick], k)
    if runs is not None:
        runs.query_ids = [str(q) for q in qids]
        runs.qrels = {str(q): {str(d): 1 for d in g} for q, g in zip(qids, gold, strict=True)}
        runs.add(RunKey("dense"), ids, scores)
        runs.add(RunKey("dense", exact=True), exact, exact_scores, pick)

    mrr, recall = rank_metrics(ids, gold, k)
    sample_gold = [gold[i] for i in pick]
    exact_mrr, _ = rank_metrics(exact, sample_gold, k)
    sample_mrr = mrr if sample is None else rank_metrics(ids[pick], sample_gold, k)[0]
    figures = EvalFigures(
        mrr_at_10=round(mrr, 6), recall_at_10=round(recall, 6), exact_mrr_at_10=round(exact_mrr, 6),
        ann_recall_at_10=round(float(ann_overlap(ids[pick], exact)), 6),
        exact_n_queries=None if sample is None else len(sample),
        mrr_at_10_on_exact_sample=None if sample is None else round(sample_mrr, 6), n_queries=len(qids),
        **_run_fields(version, resolved, elapsed, len(qvecs), batch_size, used_threads),
    )
    log.info("eval: MRR@10 %.4f (exact %.4f), Recall@10 %.4f, %.4f ms/query (batch %d, %d threads, %s %s)",
             figures.mrr_at_10, figures.exact_mrr_at_10, figures.recall_at_10, figures.avg_retrieval_ms,
             batch_size, used_threads, version.kind, resolved)
    return figures


def _quora_queries(version: IndexVersion) -> tuple[list[int], list[set[int]], np.ndarray]:
    """(query ids, their relevant documents, their vectors) of a Quora-protocol version; EvalError without them."""
    qids, _, gold = version.store.eval_set()
    qvecs = version.query_vectors()
    if not qids or qvecs is None:
        raise EvalError(f"{version.folder} has no evaluation queries (it was built without an eval set)")
    if len(qvecs) != len(qids):
        raise EvalError(f"{version.folder}: {len(qvecs)} query vectors for {len(qids)} queries")
    return qids, gold, qvecs


def _timed_search(version: IndexVersion, qvecs: np.ndarray, depth: int, batch_size: int,
                  resolved: dict[str, int]) -> tuple[np.ndarray, np.ndarray, float]:
    """(scores, ids, seconds) of the index's search of `qvecs`, `batch_size` queries per call: the timing."""
    t0 = time.perf_counter()
    parts = [version.ann.search(qvecs[start : start + batch_size], depth, search_params=resolved)
             for start in range(0, len(qvecs), batch_size)]
    elapsed = time.perf_counter() - t0
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), elapsed


def _exact_pick(version: IndexVersion, n_queries: int, exact_budget: int | None
                ) -> tuple[np.ndarray | None, np.ndarray]:
    """(the seeded sample of queries exact search runs on, None for all; the positions it runs on)."""
    sample = exact_sample(n_queries, version.ntotal, exact_budget)
    if sample is not None:
        log.info("exact search on a seeded sample of %d of %d queries (%d × %d pairs exceed the budget of %.0e)",
                 len(sample), n_queries, n_queries, version.ntotal, exact_budget)
    return sample, np.arange(n_queries) if sample is None else sample


def _run_fields(version: IndexVersion, resolved: dict[str, int], elapsed: float, n_queries: int, batch_size: int,
                threads: int) -> dict[str, Any]:
    """The `EvalFigures` fields of how the evaluation ran: timing, threads, the index and its search parameters."""
    return {"avg_retrieval_ms": round(elapsed * 1000 / n_queries, 5), "batch_size": batch_size, "threads": threads,
            "nprobe": resolved.get("nprobe"), "index_kind": version.kind, "search_params": resolved,
            "memory_gb": round(version.ann.memory_bytes() / 1e9, 4), "n_docs": version.ntotal,
            "measured_at": datetime.now(timezone.utc)}


@dataclass
class QueryRanks:
    """Per evaluation query of a Quora-protocol version (in stored query order): reciprocal ranks at k of the
    index at its nprobe and of exact search over the same vectors, for paired comparisons of two encoders."""
    query_ids: np.ndarray
    ivf_rr: np.ndarray
    exact_rr: np.ndarray


def query_ranks(version: IndexVersion, *, nprobe: int | None = None, k: int = 10,
                search_params: dict[str, int | None] | None = None) -> QueryRanks:
    """`evaluate`'s rankings (same self-exclusion, nprobe and exact reference), kept per query, every query
    searched exactly (no sampling)."""
    qids, _, gold = version.store.eval_set()
    qvecs = version.query_vectors()
    if not qids or qvecs is None or len(qvecs) != len(qids):
        raise EvalError(f"{version.folder} has no usable Quora evaluation queries")
    query_ids = np.asarray(qids, dtype=np.int64)
    exclude_self = version.manifest.data.protocol in ("full", "heldout")
    depth = k + 1 if exclude_self else k
    _, ids = version.ann.search(qvecs, depth, search_params=eval_search_params(version, nprobe, search_params))
    _, exact = version.ann.exact_search(qvecs, depth)
    if exclude_self:
        ids, exact = drop_self(ids, query_ids, k), drop_self(exact, query_ids, k)
    return QueryRanks(query_ids, per_query_ranks(ids, gold, k)[0], per_query_ranks(exact, gold, k)[0])


GRADED_DEPTH = 100  # Recall@100


def evaluate_graded(version: IndexVersion, qvecs: np.ndarray, ev: GradedEvalSet, *, nprobe: int | None = None,
                    batch_size: int = 1, threads: int | None = None, exact_budget: int | None = EXACT_PAIRS_BUDGET,
                    query_set: str | None = None, search_params: dict[str, int | None] | None = None,
                    runs: RunCollector | None = None) -> EvalFigures:
    """MRR@10, nDCG@10, Recall@10 and Recall@100 (`indexer.metrics`) of the index at `nprobe` and of exact search
    on the index's own vectors, over queries with graded judgments; single-query search timed at depth 10. A
    version of passages ranks documents by their best passage (`indexer.doc_ranks`), its qrels naming them so.

    As BEIR does by default (`ignore_identical_ids`), a document whose external id equals the query's is
    removed from that query's results (it is the query itself when queries are also documents). `runs`
    receives the rankings scored, to depth 100."""
    if len(qvecs) != len(ev.query_texts) or not len(qvecs):
        raise EvalError(f"{len(qvecs)} query vectors for {len(ev.query_texts)} queries")
    self_docs = np.asarray(ev.self_docs, dtype=np.int64)
    extra = int((self_docs >= 0).any())
    depth = GRADED_DEPTH + extra
    resolved = eval_search_params(version, nprobe, search_params)
    ranks = DocumentRanks(version)  # a version of passages: its documents by their best passage
    if threads:
        set_threads(threads)
    used_threads = get_threads()
    elapsed = _timed_search(version, qvecs, ranks.depth(10 + extra), batch_size, resolved)[2]
    scores, ids = ranks.collapse(*version.ann.search(qvecs, ranks.depth(depth), search_params=resolved), depth)
    sample, pick = _exact_pick(version, len(qvecs), exact_budget)
    exact_scores, exact = ranks.collapse(*version.ann.exact_search(qvecs[pick], ranks.depth(depth)), depth)
    if extra:
        ids, scores = drop_self_scored(ids, scores, self_docs, GRADED_DEPTH)
        exact, exact_scores = drop_self_scored(exact, exact_scores, self_docs[pick], GRADED_DEPTH)
    if runs is not None:
        runs.query_ids = list(ev.query_ext_ids)
        runs.add(RunKey("dense"), ids, scores)
        runs.add(RunKey("dense", exact=True), exact, exact_scores, pick)
    got = mean_metrics(ids, ev.qrels)
    ref = mean_metrics(exact, [ev.qrels[i] for i in pick])
    overlap = np.mean([len(set(a[:10][a[:10] >= 0]) & set(b[:10][b[:10] >= 0])) / max(1, int((b[:10] >= 0).sum()))
                       for a, b in zip(ids[pick], exact, strict=True)])
    on_sample = got if sample is None else mean_metrics(ids[pick], [ev.qrels[i] for i in pick])
    sample_mrr = None if sample is None else on_sample["mrr_at_10"]
    figures = EvalFigures(
        mrr_at_10=_f(got["mrr_at_10"]), recall_at_10=_f(got["recall_at_10"]), ndcg_at_10=_f(got["ndcg_at_10"]),
        recall_at_100=_f(got["recall_at_100"]), exact_mrr_at_10=_f(ref["mrr_at_10"]),
        exact_ndcg_at_10=_r(ref["ndcg_at_10"]), exact_recall_at_10=_r(ref["recall_at_10"]),
        exact_recall_at_100=_f(ref["recall_at_100"]), ann_recall_at_10=_f(float(overlap)),
        exact_n_queries=None if sample is None else len(sample), mrr_at_10_on_exact_sample=_r(sample_mrr),
        n_queries=len(qvecs), query_set=query_set, ndcg_at_10_vs_exact=_f(on_sample["ndcg_at_10"] - ref["ndcg_at_10"]),
        **_run_fields(version, resolved, elapsed, len(qvecs), batch_size, used_threads),
    )
    log.info("eval: MRR@10 %.4f nDCG@10 %.4f Recall@10 %.4f Recall@100 %.4f (exact: %.4f %.4f %.4f %.4f; index vs "
             "exact nDCG@10 %+.4f, top-10 overlap %.4f) over %d queries", figures.mrr_at_10, figures.ndcg_at_10,
             figures.recall_at_10, figures.recall_at_100, figures.exact_mrr_at_10, figures.exact_ndcg_at_10,
             figures.exact_recall_at_10, figures.exact_recall_at_100, figures.ndcg_at_10_vs_exact,
             figures.ann_recall_at_10, len(qvecs))
    return figures


def _f(x: float) -> float:
    return round(float(x), 6)


def _r(x: float | None) -> float | None:
    return None if x is None else _f(x)


def evaluate_query_files(version: IndexVersion, queries: Path, qrels: Path, encoder: OnnxEncoder, *,
                         nprobe: int | None = None, batch_size: int = 1, threads: int | None = None,
                         exact_budget: int | None = EXACT_PAIRS_BUDGET,
                         search_params: dict[str, int | None] | None = None, runs: RunCollector | None = None
                         ) -> tuple[EvalFigures, EvalSetStats]:
    """`indexer eval --queries --qrels`: the graded figures of `version` on the user's own queries (encoded with
    `encoder`, which must be the version's), judged documents named by their external ids."""
    from indexer.evalset import load_eval_set

    if encoder.meta.onnx_sha256 != version.manifest.model.onnx_sha256:
        raise EvalError(f"{encoder.model_dir} is not the encoder version {version.version} was built with")
    loaded = load_eval_set(queries, qrels, DocumentRanks(version).resolver())
    qvecs = encoder.encode(loaded.evalset.query_texts, progress=True, desc="queries")
    figures = evaluate_graded(version, qvecs, loaded.evalset, nprobe=nprobe, batch_size=batch_size,
                              threads=threads, exact_budget=exact_budget, query_set=loaded.source,
                              search_params=search_params, runs=runs)
    return figures, loaded.stats
