"""Hybrid search's lexical leg, bounded where the exact one is expensive (a large collection, a query of common terms).

In hybrid mode BM25's top `HYBRID_DEPTH` is fused with the dense top `HYBRID_DEPTH` (`indexer.runtime.fusion`). Its
job there is to bring in the documents the dense leg missed that match the query's *selective* terms, and to give
the dense candidates their BM25 score. The exact BM25 top 100 of a question made of common terms ("what", "best",
"way" hold millions of documents at 10M) needs most of those terms' postings, many times the dense leg's time at 10M
documents. So, where the exact leg would read more than `bounded_from` postings (the same cost the engine's pruning
plan weighs: the sum of the query's terms' document frequencies), the leg is bounded:

- candidates = the documents holding a selective term (document frequency at most `SELECTIVE_DF` of the
  collection, or the engine's own `LexicalIndex.SELECTIVE_DF`, so that their postings together stay a small part of
  the exact leg's; on PISA the best `lexical_pisa.PRUNED_DEPTH` of them by those terms, pruned inside the engine)
  ∪ the dense leg's candidates;
- each candidate is scored with exact BM25 over all the query's terms (the common ones added by seeks into their
  postings, `LexicalIndex.selective_top_rows` and `score_rows`), and the best `k` of them are the leg's answer.

It runs in two steps: `begin` (the selective terms' documents: what needs no vector, so it runs beside the
encoding, like the exact leg) and `complete` (the dense candidates scored and merged in, after the vector search).
Filters and exclusions (tombstones) keep their exact semantics: both steps see only the allowed rows, never the
excluded ones. What it may lose against the exact leg: a document matching only common terms, outside the dense
top 100; measured in docs/decisions.md (agreement with the exact hybrid at 10M, nDCG@10 on BEIR sets).

An engine may bound an unfiltered leg from fewer postings (`LexicalIndex.BOUNDED_FROM`): PISA's bounded leg is its
own pruned top k, cheaper than the exact leg's certificate at every size, so on PISA an unfiltered leg is always
bounded; a filtered one keeps `bounded_from`. Small collections (every BEIR-size set, served by bm25s or tantivy by
default) never reach `BOUNDED_FROM`, and an engine without the capability
(`LexicalIndex.BOUNDED`: bm25s scores every document anyway) always answers exactly; the lexical mode is always
exact. `bounded_from` None turns it off (`STRATA_HYBRID_LEXICAL=exact`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from indexer.runtime.lexical import LexicalIndex
from indexer.runtime.rowsets import in_sorted

# Bench: docs/decisions.md at 10M documents, 200 Quora questions (bench/results/hybrid-bounded-20261128T0109Z.md,
# docs/scaling.md). A query reading more than BOUNDED_FROM postings exactly takes the bounded leg (181 of the 200
# there): the exact leg reads postings at ~20 ns each on an idle core, so below 1M it costs < ~20 ms, and the
# engine's own pruning starts there too (`lexical_tantivy.PRUNE_FROM`).
BOUNDED_FROM = 1_000_000
# A term is selective when at most this fraction of the collection holds it (idf >= ~6.2): at 10M, 20,000
# documents; relative, so that the same questions pick the same terms at every size. Measured there at 0.001 /
# 0.002 / 0.005: the leg's p50 0.23x / 0.31x / 0.45x the exact one's, the fused top 10 agreeing with the exact
# hybrid's at 0.845 / 0.929 / 0.973 (overlap@10); 0.002 is the knee. Forced on every query of SciFact and NFCorpus:
# hybrid nDCG@10 -0.60 [-1.59, +0.37] and -0.21 [-0.74, +0.36] (bench/results/hybrid-bounded-20261128T0138Z.md).
SELECTIVE_DF = 0.002

HybridLexical = Literal["bounded", "exact"]  # the engine's setting (`STRATA_HYBRID_LEXICAL`)
HYBRID_LEXICAL: tuple[HybridLexical, ...] = ("bounded", "exact")


@dataclass(frozen=True)
class LexicalLeg:
    """One query's lexical leg: its answer (scores, FAISS ids, best first), complete, or, when `selective` is set
    (bounded), the selective terms' part of it, to `complete` with the dense candidates."""

    scores: np.ndarray
    ids: np.ndarray
    k: int
    terms: tuple[str, ...] = ()
    selective: tuple[str, ...] | None = None  # None: the exact leg
    allowed_rows: np.ndarray | None = None
    excluded_rows: np.ndarray | None = None

    @property
    def bounded(self) -> bool:
        return self.selective is not None


def plan(index: LexicalIndex, terms: list[str], bounded_from: int | None, *, filtered: bool = False
         ) -> list[str] | None:
    """The selective terms of a bounded leg (possibly none: the dense candidates alone), or None: the exact leg
    (turned off, an engine without the capability, or a query cheap enough). An unfiltered leg takes the engine's
    own threshold where it is lower (`LexicalIndex.BOUNDED_FROM`: PISA bounds it at every size)."""
    if bounded_from is None or not index.BOUNDED or not terms or not index.ntotal:
        return None
    if not filtered and index.BOUNDED_FROM is not None:
        bounded_from = min(bounded_from, index.BOUNDED_FROM)
    dfs = {t: index.doc_freq(t) for t in set(terms)}
    if sum(dfs.values()) <= bounded_from:
        return None
    most = (SELECTIVE_DF if index.SELECTIVE_DF is None else index.SELECTIVE_DF) * index.ntotal
    return sorted(t for t, df in dfs.items() if 0 < df <= most)


def begin(index: LexicalIndex, query: str, k: int, *, allowed_rows: np.ndarray | None = None,
          excluded: np.ndarray | None = None, bounded_from: int | None = BOUNDED_FROM) -> LexicalLeg:
    """A hybrid query's lexical leg: exact (`LexicalIndex.search`) or, where `plan` bounds it, the best k among the
    documents holding a selective term (to `complete`)."""
    terms = index.analyzer.terms(query)
    selective = plan(index, terms, bounded_from, filtered=allowed_rows is not None)
    if allowed_rows is not None and index.prepared(allowed_rows):  # a filter's own postings: exact and cheap
        selective = None
    if selective is None or k <= 0 or (allowed_rows is not None and not allowed_rows.size):
        scores, ids = index.search(query, k, allowed_rows=allowed_rows, excluded=excluded)
        return LexicalLeg(scores, ids, k)
    excluded_rows = index.rows_of(excluded) if excluded is not None and len(excluded) else None
    if selective:
        scores, rows = index.selective_top_rows(terms, selective, k, allowed_rows, excluded_rows)
    else:
        scores, rows = np.zeros(0, np.float32), np.zeros(0, np.int64)
    return LexicalLeg(scores.astype(np.float32, copy=False), np.asarray(index.fids[rows], dtype=np.int64), k,
                      tuple(terms), tuple(selective), allowed_rows, excluded_rows)


def complete(index: LexicalIndex, leg: LexicalLeg, dense_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The leg's answer: as it is when exact; bounded, with the dense candidates (`dense_ids`, FAISS ids; -1 and
    ids this index does not hold are skipped) scored exactly over every term and merged in: the best k of both."""
    if not leg.bounded:
        return leg.scores, leg.ids
    rows = index.rows_of(np.asarray(dense_ids, np.int64))
    if leg.allowed_rows is not None:
        rows = rows[in_sorted(rows, leg.allowed_rows)]
    if leg.excluded_rows is not None:
        rows = rows[~in_sorted(rows, leg.excluded_rows)]
    d_scores, d_rows = index.score_rows(list(leg.terms), rows)
    return merge(leg.scores, leg.ids, d_scores.astype(np.float32, copy=False), index.fids[d_rows], leg.k)


def merge(a_scores: np.ndarray, a_ids: np.ndarray, b_scores: np.ndarray, b_ids: np.ndarray, k: int
          ) -> tuple[np.ndarray, np.ndarray]:
    """The best k of two lists of exact scores (a document in both counted once, at its higher score: the same
    score up to float rounding), ties by the smaller id."""
    ids = np.concatenate([np.asarray(a_ids, np.int64), np.asarray(b_ids, np.int64)])
    scores = np.concatenate([np.asarray(a_scores, np.float32), np.asarray(b_scores, np.float32)])
    if not ids.size:
        return scores, ids
    order = np.lexsort((-scores, ids))  # by id, its best score first
    ids, scores = ids[order], scores[order]
    first = np.ones(ids.size, bool)
    first[1:] = ids[1:] != ids[:-1]
    ids, scores = ids[first], scores[first]
    best = np.lexsort((ids, -scores))[:k]
    return scores[best], ids[best]
