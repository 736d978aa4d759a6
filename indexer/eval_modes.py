"""Per-mode evaluation: the figures `indexer eval` and a build report for each `/search` mode a version serves.

- dense: the vector index against exact search on the same vectors (`indexer.evaluate`, unchanged);
- lexical: BM25 over the version's lexical index (`indexer.runtime.lexical`). BM25 scores every document, so
  there is no index/exact difference: its exact_* figures are its own and index vs exact is 0 by construction;
- hybrid: as `/search` runs it (`service.engine.searcher`): the top `HYBRID_DEPTH` of the vector index and of BM25,
  fused by `indexer.runtime.fusion` (the same code; the default fusion unless told otherwise), the best k kept.
  Its exact reference fuses exact dense search's top `HYBRID_DEPTH` with the same BM25 lists, so index vs exact
  is what the index costs the hybrid ranking.

A version of passages (`indexer build --chunk`) is ranked as `/search` ranks it: rows (passages) searched
`fetch_depth` deep, fused as rows, then each document kept at its best row (`indexer.doc_ranks`), so its qrels,
which judge documents, apply to every mode.

Self-matches (the Quora full/heldout protocols' queries are documents too; BEIR's `ignore_identical_ids`) are
dropped from each list *before* fusing, so the hybrid ranking is exactly the fusion of the dense and lexical
rankings written by `--run-out` (corpus evaluations, where every run goes to depth 100; the Quora protocol's runs
hold their top 10, fused from 100-deep lists).

Times are per query, one query at a time: lexical its BM25 search, hybrid its dense search at depth
`HYBRID_DEPTH` + its BM25 search + the fusion (no encoding: the stored query vectors are used).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from indexer.doc_ranks import DocumentRanks
from indexer.evaluate import (
    EXACT_PAIRS_BUDGET,
    GRADED_DEPTH,
    EvalError,
    eval_search_params,
    evaluate,
    evaluate_graded,
    exact_sample,
    rank_metrics,
)
from indexer.metrics import mean_metrics
from indexer.runs import RunKey
from indexer.runtime.faiss.devices import get_threads, set_threads
from indexer.runtime.fusion import HYBRID_DEPTH, Fusion, fuse
from indexer.runtime.lexical import LEXICAL_DIR
from indexer.runtime.manifest import EvalFigures
from indexer.runtime.store import GradedEvalSet
from indexer.runtime.version import IndexVersion

if TYPE_CHECKING:
    from indexer.evalset import EvalSetStats
    from indexer.runs import RunCollector
    from indexer.runtime.encoder import OnnxEncoder

log = logging.getLogger(__name__)

MODES = ("dense", "lexical", "hybrid")
QUORA_DEPTH = 10  # the Quora protocol scores (and writes) each query's top 10


def served_modes(version: IndexVersion) -> list[str]:
    """The modes this version can serve: dense, and lexical and hybrid when it has a lexical index."""
    return ["dense", "lexical", "hybrid"] if version.lexical is not None else ["dense"]


def parse_modes(text: str | None, version: IndexVersion) -> list[str]:
    """`--modes dense,lexical,...` (None or "all": every served mode) checked against the version, in MODES
    order; an unknown mode, or lexical/hybrid on a version without a lexical index, is an EvalError."""
    if text is None or text.strip() == "all":
        return served_modes(version)
    asked = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in asked if m not in MODES]
    if unknown or not asked:
        raise EvalError(f"--modes takes a comma-separated list of {', '.join(MODES)} (or all), not {text!r}")
    missing = [m for m in asked if m not in served_modes(version)]
    if missing:
        raise EvalError(f"{version.folder}: mode {', '.join(missing)} needs a lexical index, and this version has "
                        f"none (built before lexical retrieval, or with --no-lexical): use --modes dense")
    return [m for m in MODES if m in asked]


def fusion_dict(fusion: Fusion) -> dict[str, str | float]:
    return {"kind": "rrf", "k": fusion.k} if fusion.kind == "rrf" else {"kind": "convex", "alpha": fusion.alpha}


@dataclass
class _Queries:
    """What the lexical and hybrid evaluations share: the queries' text, the id to drop from each one's results
    (-1: none), the depth scored, and how a ranking is scored (Quora gold sets or graded qrels)."""

    texts: list[str]
    self_ids: np.ndarray
    depth: int
    gold: list[set[int]] | None = None
    qrels: list[dict[int, int]] | None = None
    query_set: str | None = None

    @property
    def extra(self) -> int:
        return int((self.self_ids >= 0).any())

    def metrics(self, ids: np.ndarray, rows: np.ndarray | None = None) -> dict[str, float]:
        if self.qrels is not None:
            qrels = self.qrels if rows is None else [self.qrels[i] for i in rows]
            return mean_metrics(ids, qrels)
        assert self.gold is not None
        gold = self.gold if rows is None else [self.gold[i] for i in rows]
        mrr, recall = rank_metrics(ids, gold, 10)
        return {"mrr_at_10": mrr, "recall_at_10": recall}


def _quora_queries(version: IndexVersion, runs: RunCollector | None) -> tuple[_Queries, np.ndarray | None]:
    qids, texts, gold = version.store.eval_set()
    if not qids:
        raise EvalError(f"{version.folder} has no evaluation queries (it was built without an eval set)")
    exclude_self = version.manifest.data.protocol in ("full", "heldout")
    self_ids = np.asarray(qids, np.int64) if exclude_self else np.full(len(qids), -1, np.int64)
    if runs is not None:
        runs.query_ids = [str(q) for q in qids]
        runs.qrels = {str(q): {str(d): 1 for d in g} for q, g in zip(qids, gold, strict=True)}
    return _Queries(list(texts), self_ids, QUORA_DEPTH, gold=gold), version.query_vectors()


def _graded_queries(ev: GradedEvalSet, query_set: str | None, runs: RunCollector | None) -> _Queries:
    if runs is not None:
        runs.query_ids = list(ev.query_ext_ids)
    return _Queries(list(ev.query_texts), np.asarray(ev.self_docs, np.int64), GRADED_DEPTH, qrels=ev.qrels,
                    query_set=query_set)


def _pad(ranked: Sequence[tuple[np.ndarray, np.ndarray]], depth: int) -> tuple[np.ndarray, np.ndarray]:
    scores = np.full((len(ranked), depth), -np.inf, dtype=np.float32)
    ids = np.full((len(ranked), depth), -1, dtype=np.int64)
    for r, (s, i) in enumerate(ranked):
        scores[r, : len(i)], ids[r, : len(i)] = s[:depth], i[:depth]
    return scores, ids


def _lexical_lists(version: IndexVersion, q: _Queries, depth: int, ranks: DocumentRanks
                   ) -> tuple[np.ndarray, np.ndarray, float]:
    """Each query's BM25 top `depth` rows (self dropped), searched one query at a time: (scores, ids, seconds)."""
    assert version.lexical is not None
    t0 = time.perf_counter()
    got = [version.lexical.search(text, depth + q.extra) for text in q.texts]
    seconds = time.perf_counter() - t0
    scores, ids = _pad(got, depth + q.extra)
    if q.extra:
        scores, ids = ranks.drop_self(scores, ids, q.self_ids, depth)
    return scores, ids, seconds


def _fused(fusion: Fusion, dense: tuple[np.ndarray, np.ndarray], lexical: tuple[np.ndarray, np.ndarray],
           k: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Row by row, `fuse` of the dense and lexical lists (scores, ids), the best k: (scores, ids, seconds)."""
    t0 = time.perf_counter()
    got = [fuse(fusion, (ds, di), (ls, li), k)
           for ds, di, ls, li in zip(dense[0], dense[1], lexical[0], lexical[1], strict=True)]
    seconds = time.perf_counter() - t0
    scores, ids = _pad(got, k)
    return scores, ids, seconds


def _lexical_bytes(version: IndexVersion) -> int:
    folder = Path(version.folder) / LEXICAL_DIR
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _figures(mode: str, q: _Queries, got: dict[str, float], ref: dict[str, float], on_sample: dict[str, float],
             sample: np.ndarray | None, overlap: float, ms: float, version: IndexVersion, search_params: dict[str, int],
             memory_bytes: int, fusion: Fusion | None, threads: int) -> EvalFigures:
    graded = q.qrels is not None
    r6 = lambda x: None if x is None else round(float(x), 6)  # noqa: E731
    return EvalFigures(
        mode=mode, fusion=None if fusion is None else fusion_dict(fusion),
        mrr_at_10=r6(got["mrr_at_10"]), recall_at_10=r6(got["recall_at_10"]),
        exact_mrr_at_10=r6(ref["mrr_at_10"]), ann_recall_at_10=r6(overlap),
        exact_n_queries=None if sample is None else len(sample),
        mrr_at_10_on_exact_sample=None if sample is None else r6(on_sample["mrr_at_10"]),
        avg_retrieval_ms=round(ms, 5), batch_size=1, threads=threads,
        nprobe=search_params.get("nprobe") if mode != "lexical" else None,
        index_kind=version.kind if mode != "lexical" else None,
        search_params=search_params if mode != "lexical" else {},
        memory_gb=round(memory_bytes / 1e9, 4), n_queries=len(q.texts), n_docs=version.ntotal,
        measured_at=datetime.now(timezone.utc), query_set=q.query_set,
        ndcg_at_10=r6(got.get("ndcg_at_10")) if graded else None,
        recall_at_100=r6(got.get("recall_at_100")) if graded else None,
        exact_ndcg_at_10=r6(ref.get("ndcg_at_10")) if graded else None,
        exact_recall_at_10=r6(ref.get("recall_at_10")) if graded else None,
        exact_recall_at_100=r6(ref.get("recall_at_100")) if graded else None,
        ndcg_at_10_vs_exact=r6(on_sample["ndcg_at_10"] - ref["ndcg_at_10"]) if graded else None,
    )


def _top10_overlap(a: np.ndarray, b: np.ndarray) -> float:
    shares = [len(set(x[:10][x[:10] >= 0]) & set(y[:10][y[:10] >= 0])) / int((y[:10] >= 0).sum())
              for x, y in zip(a, b, strict=True) if (y[:10] >= 0).any()]
    return float(np.mean(shares)) if shares else 1.0


def _lexical_and_hybrid(version: IndexVersion, q: _Queries, qvecs: np.ndarray | None, modes: list[str], *,
                        fusion: Fusion, nprobe: int | None, search_params: dict[str, int | None] | None,
                        exact_budget: int | None, runs: RunCollector | None) -> dict[str, EvalFigures]:
    out: dict[str, EvalFigures] = {}
    threads = get_threads()
    ranks = DocumentRanks(version)  # a version of passages: rows are passages, rankings its documents
    # BM25 once, deep enough for the fusion; the lexical ranking is its top `depth` (BM25's order is total)
    lex_depth = ranks.depth(max(q.depth, HYBRID_DEPTH) if "hybrid" in modes else q.depth)
    lex_scores, lex_ids, lex_s = _lexical_lists(version, q, lex_depth, ranks)
    n = len(q.texts)
    lex_bytes = _lexical_bytes(version)
    if "lexical" in modes:
        scores, ids = ranks.collapse(lex_scores, lex_ids, q.depth)
        got = q.metrics(ids)
        out["lexical"] = _figures("lexical", q, got, got, got, None, 1.0, lex_s * 1000 / n, version, {}, lex_bytes,
                                  None, threads)
        if runs is not None:
            runs.add(RunKey("lexical"), ids, scores)
    if "hybrid" not in modes:
        return out
    if qvecs is None or len(qvecs) != n:
        raise EvalError(f"{version.folder}: query vectors do not match its {n} queries")
    resolved = eval_search_params(version, nprobe, search_params)
    dense_depth = ranks.depth(max(q.depth, HYBRID_DEPTH))
    t0 = time.perf_counter()
    for i in range(n):  # one query at a time, as `/search` at 1 client: the time hybrid adds to BM25
        version.ann.search(qvecs[i : i + 1], dense_depth + q.extra, search_params=resolved)
    dense_s = time.perf_counter() - t0
    d_scores, d_ids = version.ann.search(qvecs, dense_depth + q.extra, search_params=resolved)
    sample = exact_sample(n, version.ntotal, exact_budget)
    pick = np.arange(n) if sample is None else sample
    e_scores, e_ids = version.ann.exact_search(qvecs[pick], dense_depth + q.extra)
    if q.extra:
        d_scores, d_ids = ranks.drop_self(d_scores, d_ids, q.self_ids, dense_depth)
        e_scores, e_ids = ranks.drop_self(e_scores, e_ids, q.self_ids[pick], dense_depth)
    # rows fused as `/search` fuses them, then (passages) each document kept at its best row
    lexical, fused_depth = (lex_scores, lex_ids), ranks.depth(q.depth)
    h_scores, h_ids, fuse_s = _fused(fusion, (d_scores, d_ids), lexical, fused_depth)
    x_scores, x_ids, _ = _fused(fusion, (e_scores, e_ids), (lex_scores[pick], lex_ids[pick]), fused_depth)
    (h_scores, h_ids), (x_scores, x_ids) = ranks.collapse(h_scores, h_ids, q.depth), \
        ranks.collapse(x_scores, x_ids, q.depth)
    got = q.metrics(h_ids)
    ref = q.metrics(x_ids, pick)
    on_sample = got if sample is None else q.metrics(h_ids[pick], pick)
    ms = (dense_s + lex_s + fuse_s) * 1000 / n
    out["hybrid"] = _figures("hybrid", q, got, ref, on_sample, sample, _top10_overlap(h_ids[pick], x_ids), ms,
                             version, resolved, version.ann.memory_bytes() + lex_bytes, fusion, threads)
    if runs is not None:
        runs.add(RunKey("hybrid"), h_ids, h_scores)
        runs.add(RunKey("hybrid", exact=True), x_ids, x_scores, pick)
    return out


def _log(figures: dict[str, EvalFigures]) -> None:
    for mode, f in figures.items():
        ndcg = "" if f.ndcg_at_10 is None else f" nDCG@10 {f.ndcg_at_10:.4f} (exact {f.exact_ndcg_at_10:.4f})"
        log.info("eval %s: MRR@10 %.4f (exact %.4f)%s, %.4f ms/query", mode, f.mrr_at_10, f.exact_mrr_at_10, ndcg,
                 f.avg_retrieval_ms)


def evaluate_modes(version: IndexVersion, modes: Sequence[str] | None = None, *, fusion: Fusion | None = None,
                   nprobe: int | None = None, batch_size: int = 1, threads: int | None = None,
                   exact_budget: int | None = EXACT_PAIRS_BUDGET,
                   search_params: dict[str, int | None] | None = None,
                   runs: RunCollector | None = None) -> dict[str, EvalFigures]:
    """The figures of each mode of `modes` (None: every served one) on the version's own evaluation set (see
    the module docstring), by mode; `runs` receives every ranking scored."""
    modes = served_modes(version) if modes is None else list(modes)
    if threads:
        set_threads(threads)
    out: dict[str, EvalFigures] = {}
    if "dense" in modes:
        out["dense"] = evaluate(version, nprobe=nprobe, batch_size=batch_size, threads=threads,
                                exact_budget=exact_budget, search_params=search_params, runs=runs)
    if {"lexical", "hybrid"} & set(modes):
        graded = version.store.graded_eval_set()
        if graded is not None:
            q, qvecs = _graded_queries(graded, version.manifest.data.eval_source, runs), version.query_vectors()
        else:
            q, qvecs = _quora_queries(version, runs)
        out |= _lexical_and_hybrid(version, q, qvecs, modes, fusion=fusion or Fusion(), nprobe=nprobe,
                                   search_params=search_params, exact_budget=exact_budget, runs=runs)
    _log(out)
    return {m: out[m] for m in MODES if m in out}


def evaluate_modes_on_files(version: IndexVersion, queries: Path, qrels: Path, encoder: OnnxEncoder | None,
                            modes: Sequence[str], *, fusion: Fusion | None = None, nprobe: int | None = None,
                            batch_size: int = 1, threads: int | None = None,
                            exact_budget: int | None = EXACT_PAIRS_BUDGET,
                            search_params: dict[str, int | None] | None = None, runs: RunCollector | None = None
                            ) -> tuple[dict[str, EvalFigures], EvalSetStats]:
    """`indexer eval --queries --qrels` for each mode: the queries are encoded (with `encoder`, the version's)
    only when a mode searches vectors, so `--modes lexical` needs no encoder."""
    from indexer.evalset import load_eval_set

    needs_vectors = bool({"dense", "hybrid"} & set(modes))
    if needs_vectors and encoder is None:
        raise EvalError("modes dense and hybrid encode the queries: an encoder is needed")
    if encoder is not None and needs_vectors and encoder.meta.onnx_sha256 != version.manifest.model.onnx_sha256:
        raise EvalError(f"{encoder.model_dir} is not the encoder version {version.version} was built with")
    loaded = load_eval_set(queries, qrels, DocumentRanks(version).resolver())
    qvecs = encoder.encode(loaded.evalset.query_texts, progress=True, desc="queries") \
        if needs_vectors and encoder is not None else None
    if threads:
        set_threads(threads)
    out: dict[str, EvalFigures] = {}
    if "dense" in modes:
        assert qvecs is not None
        out["dense"] = evaluate_graded(version, qvecs, loaded.evalset, nprobe=nprobe, batch_size=batch_size,
                                       threads=threads, exact_budget=exact_budget, query_set=loaded.source,
                                       search_params=search_params, runs=runs)
    if {"lexical", "hybrid"} & set(modes):
        q = _graded_queries(loaded.evalset, loaded.source, runs)
        out |= _lexical_and_hybrid(version, q, qvecs, list(modes), fusion=fusion or Fusion(), nprobe=nprobe,
                                   search_params=search_params, exact_budget=exact_budget, runs=runs)
    _log(out)
    return {m: out[m] for m in MODES if m in out}, loaded.stats


def format_modes(figures: dict[str, EvalFigures]) -> str:
    """One line per mode: nDCG@10 (graded sets), MRR@10, index vs exact, ms/query."""
    lines = []
    for mode, f in figures.items():
        ndcg = "" if f.ndcg_at_10 is None else f"nDCG@10 {f.ndcg_at_10 * 100:.2f}  "
        if mode == "lexical":
            vs = "index vs exact: none (BM25 scores every document: it is exact)"
        else:
            d_ndcg = "" if f.ndcg_at_10_vs_exact is None else f"nDCG@10 {f.ndcg_at_10_vs_exact * 100:+.2f}, "
            d_mrr = (f.mrr_at_10 if f.mrr_at_10_on_exact_sample is None else f.mrr_at_10_on_exact_sample) - \
                f.exact_mrr_at_10
            vs = f"index vs exact: {d_ndcg}MRR@10 {d_mrr * 100:+.2f}, top-10 overlap {f.ann_recall_at_10:.4f}"
        how = "" if f.fusion is None else " (" + " ".join(str(v) for v in f.fusion.values()) + ")"
        lines.append(f"{mode + how:<21} {ndcg}MRR@10 {f.mrr_at_10 * 100:.2f}  {vs}  {f.avg_retrieval_ms:.3f} ms/query")
    return "\n".join(lines)
