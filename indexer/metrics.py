"""Ranking metrics over graded relevance judgments, as BEIR reports them (it runs pytrec_eval / trec_eval):

- MRR@10: 1 / rank of the first relevant document in the top 10 (0 if none).
- nDCG@10: DCG = Σ_{i=1..10} gain(doc_i) / log2(i + 1), gain = the document's grade (linear, as trec_eval's
  ndcg_cut; unjudged or non-positive: 0), divided by the DCG of the ideal ranking of the query's judged grades.
- Recall@k: relevant documents in the top k / relevant documents judged for the query.

A document is relevant when its grade is > 0. Only queries with at least one relevant document are averaged
(a query without one has no recall). Judged documents missing from the corpus still count in the recall
denominator and the ideal DCG: no system could retrieve them, and the figures say so instead of hiding them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

CUTOFFS = (10, 100)
METRICS = ("mrr_at_10", "ndcg_at_10", "recall_at_10", "recall_at_100")


def _discounts(k: int) -> np.ndarray:
    return 1.0 / np.log2(np.arange(2, k + 2))


def per_query(ranked: np.ndarray, qrels: Sequence[Mapping[int, int]]) -> dict[str, np.ndarray]:
    """Per query (rows of `ranked`, ids with -1 padding), each metric of `METRICS`; NaN for a query without a
    relevant document."""
    n = len(qrels)
    out = {m: np.full(n, np.nan) for m in METRICS}
    disc = _discounts(10)
    for q, (row, judged) in enumerate(zip(ranked, qrels, strict=True)):
        relevant = {d for d, g in judged.items() if g > 0}
        if not relevant:
            continue
        ids = row.tolist()  # by position: -1 (no hit) is never relevant (missing documents are ≤ -2)
        top10 = ids[:10]
        first = next((i for i, d in enumerate(top10) if d in relevant), None)
        out["mrr_at_10"][q] = 0.0 if first is None else 1.0 / (first + 1)
        gains = np.array([max(judged.get(d, 0), 0) if d != -1 else 0 for d in top10], dtype=np.float64)
        ideal = np.sort(np.array([g for g in judged.values() if g > 0], dtype=np.float64))[::-1][:10]
        idcg = float(ideal @ disc[: len(ideal)])
        out["ndcg_at_10"][q] = float(gains @ disc[: len(gains)]) / idcg
        for k in CUTOFFS:
            out[f"recall_at_{k}"][q] = sum(d in relevant for d in ids[:k]) / len(relevant)
    return out


def mean_metrics(ranked: np.ndarray, qrels: Sequence[Mapping[int, int]]) -> dict[str, float]:
    """Each metric of `METRICS` averaged over the queries with a relevant document (NaN if there is none)."""
    scores = per_query(ranked, qrels)
    evaluated = ~np.isnan(scores["mrr_at_10"])
    if not evaluated.any():
        return {m: math.nan for m in METRICS}
    return {m: float(v[evaluated].mean()) for m, v in scores.items()}
