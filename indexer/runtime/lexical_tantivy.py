"""The tantivy lexical engine (the only module that imports tantivy): a Lucene-style inverted index in Rust.

    <version>/lexical/      tantivy's index files (one text field of the analysed terms, frequencies only; the row
                            as a fast field), beside the seam's rows.npy and stats.json

The documents are analysed by the seam's `Analyzer` (the same terms as every engine) and indexed already split:
tantivy's whitespace tokenizer reads them back as they are. A query is a disjunction of term queries (a repeated
term is a clause each time). What it costs beside bm25s, by kind of query, in CPU, memory and disk:
docs/scaling.md#lexical-engines-at-scale. Its Python bindings fix BM25 at k1=1.2, b=0.75 (`FIXED_K1_B`); document
lengths are Lucene's one-byte norms.

**Pruning, done here.** The bindings always wrap the top-k collector in a `MultiCollector`, so tantivy's block-max
WAND never runs from Python: every posting of every query term is scored, so a common term costs all its postings
(docs/decisions.md#where-the-lexical-time-goes-at-10m). `_pruned` applies MaxScore's bound instead, exactly: a term
scores below `count * idf * (k1 + 1)` in any document, so once `limit` documents are known to score at least
`theta`, the lowest-bound terms whose bounds sum below `theta` ("optional") cannot lift a document holding none of
the other terms into the top `limit`. The query then runs over the documents holding a required term only, each
optional term added by a seek into its postings (a nested Must/Should) instead of a read of all of them. `theta`
comes from a cheap first pass (the highest-bound terms within `PASS1_POSTINGS`), its top rows rescored exactly. The
plan is taken only where it reads fewer postings by the cost model (`SEEK_COST`); the answers are the same documents
in the same order, scores equal to float rounding (the sum is grouped differently).

Filters stay exact: a filter's matches are a term-set clause on the row field when they are few
(`TERM_SET_MAX`), else the top hits are read deep enough that k of them match at the filter's selectivity
(`WIDE_SIGMAS`), deeper again in the rare case that they do not (or every scoring document was read).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import tantivy

from indexer.runtime.lexical import LexicalIndex
from indexer.runtime.manifest import LexicalInfo
from indexer.runtime.rowsets import in_sorted
from indexer.runtime.topk import top_k_rows

TOKENIZER = "strata_terms"
TEXT, ROW = "terms", "row"
HEAP_BYTES = 256_000_000  # the writer's memory budget before it flushes a segment
TERM_SET_MAX = 50_000  # a filter matching at most this many documents is a clause of the query itself
# A filter matching more is read deep enough that the hits hold, at its selectivity, k + WIDE_SIGMAS·sqrt(k) + 5
# matches on average: fewer than k then happens ~1e-5 of the time (Poisson), and reads 4x deeper again
WIDE_SIGMAS = 5
# Pruning (`_plan`): only for queries reading more than PRUNE_FROM postings (below, the first pass costs more than it
# saves) and at most PRUNE_MAX_LIMIT hits deep; a seek into a term's postings costs about SEEK_COST postings read; the
# first pass reads the highest-bound terms within PASS1_POSTINGS. Measured on the 10M version, docs/decisions.md.
PRUNE_FROM = 1_000_000
PRUNE_MAX_LIMIT = 1_000
SEEK_COST = 5
PASS1_POSTINGS = 50_000
# A clause of at most ROWS_AS_TERMS rows is a disjunction of one term query per row, not a term-set query (which
# fills a bitset of every document in each segment): with the query's terms added, p50 1.5 vs 47 ms at 100 rows,
# 103 vs 229 ms at 1,200, on the 10M version at load 15 (docs/decisions.md,
# bench/results/hybrid-bounded-20261128T0112Z.md)
ROWS_AS_TERMS = 1_024
# An exhaustive query (no pruning: every posting of its terms is scored) first reads this many times the hits it
# needs: the top-k heap's size costs nothing measurable beside the scoring (10M version, 83 bounded hybrid legs:
# p50 3.46 / 2.94 / 3.32 ms at 101 / 404 / 1,616 hits), and a tie across the k-th place (common: documents of the
# same terms and length score alike) no longer runs the whole query a second time (164 runs for 83 legs before)
EXHAUSTIVE_DEPTH = 4
BOUND_MARGIN = 1e-4  # relative: tantivy's float32 scores against the bounds computed here in float64


def _schema() -> tantivy.Schema:
    sb = tantivy.SchemaBuilder()
    sb.add_text_field(TEXT, stored=False, tokenizer_name=TOKENIZER, index_option="freq")
    sb.add_integer_field(ROW, stored=False, indexed=True, fast=True)
    return sb.build()


def _register(index: tantivy.Index) -> None:
    index.register_tokenizer(TOKENIZER, tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build())


class Engine(LexicalIndex):
    """tantivy's BM25 (k1=1.2, b=0.75) over the version's analysed documents."""

    FIXED_K1_B = (1.2, 0.75)
    BOUNDED = True
    SCORE_SCALE = 2.2  # tantivy keeps BM25's (k1 + 1) numerator, which Lucene 8+ (and bm25s) dropped

    @staticmethod
    def version() -> str:
        return str(tantivy.__version__)

    @staticmethod
    def build(out: Path, terms: Iterable[list[str]], info: LexicalInfo) -> int:  # streamed: one document at a time
        index = tantivy.Index(_schema(), path=str(out))
        _register(index)
        writer = index.writer(heap_size=HEAP_BYTES, num_threads=1)  # one thread: segments in row order
        vocab: set[str] = set()
        for row, doc in enumerate(terms):
            vocab.update(doc)
            writer.add_document(tantivy.Document(**{TEXT: " ".join(doc), ROW: row}))
        writer.commit()
        writer.wait_merging_threads()
        return len(vocab)

    def _open(self, mmap: bool) -> None:  # tantivy reads its files memory-mapped whatever `mmap`
        self.index = tantivy.Index.open(str(self.folder))
        _register(self.index)
        self.searcher = self.index.searcher()
        self.schema = self.index.schema
        self.n_docs = int(self.searcher.num_docs)  # the N of tantivy's idf

    def doc_freq(self, term: str) -> int:
        return int(self.searcher.doc_freq(TEXT, term))

    def _term(self, term: str) -> tantivy.Query:
        return tantivy.Query.term_query(self.schema, TEXT, term)

    def _flat(self, terms: list[str]) -> tantivy.Query:
        return tantivy.Query.boolean_query([(tantivy.Occur.Should, self._term(t)) for t in terms])

    def _adding(self, query: tantivy.Query, terms: list[str]) -> tantivy.Query:
        """`query`'s documents only, each term's score added to theirs (one seek per document into its postings)."""
        for t in terms:
            query = tantivy.Query.boolean_query([(tantivy.Occur.Must, query), (tantivy.Occur.Should, self._term(t))])
        return query

    def _rows_clause(self, rows: np.ndarray) -> tantivy.Query:
        """These rows, scoring 0 (a filter, not a score)."""
        if len(rows) <= ROWS_AS_TERMS:  # a term query per row: no bitset over every document of each segment
            query = tantivy.Query.boolean_query([(tantivy.Occur.Should, tantivy.Query.term_query(self.schema, ROW, r))
                                                 for r in rows.tolist()])
        else:
            query = tantivy.Query.term_set_query(self.schema, ROW, rows.tolist())
        return tantivy.Query.const_score_query(query, 0.0)

    def _query(self, terms: list[str], allowed_rows: np.ndarray | None) -> tantivy.Query:
        if allowed_rows is None or len(allowed_rows) > TERM_SET_MAX:
            return self._flat(terms)
        return tantivy.Query.boolean_query([(tantivy.Occur.Must, self._flat(terms)),
                                            (tantivy.Occur.Must, self._rows_clause(allowed_rows))])

    def _hits(self, query: tantivy.Query, limit: int) -> tuple[np.ndarray, np.ndarray]:
        hits = self.searcher.search(query, limit, count=False).hits
        if not hits:
            return np.zeros(0, np.float32), np.zeros(0, np.int64)
        scores = np.fromiter((s for s, _ in hits), np.float32, count=len(hits))
        rows = np.asarray(self.searcher.fast_field_values(ROW, [a for _, a in hits]), dtype=np.int64)
        return scores, rows

    def bound(self, term: str, count: int = 1) -> float:
        """More than `count` occurrences of `term` in a query add to any document's score: BM25's tf part is < 1."""
        df = self.doc_freq(term)
        if not df:
            return 0.0
        n = self.n_docs
        return count * math.log1p((n - df + 0.5) / (df + 0.5)) * (1 + self.FIXED_K1_B[0]) * (1 + BOUND_MARGIN)

    def _plan(self, terms: list[str], limit: int) -> list[str]:
        """The optional terms of `_pruned` (none: read every posting), lowest bound first."""
        counts = Counter(terms)
        dfs = {t: self.doc_freq(t) for t in counts}
        bounds = {t: self.bound(t, c) for t, c in counts.items()}
        total = sum(dfs.values())
        if len(counts) < 2 or total <= PRUNE_FROM or limit > PRUNE_MAX_LIMIT:
            return []
        # a lower bound of the limit-th score: the top rows of the highest-bound terms, rescored with every term
        first: list[str] = []
        read = 0
        for t in sorted(counts, key=lambda t: -bounds[t]):
            if not first or read + dfs[t] <= PASS1_POSTINGS:
                first.append(t)
                read += dfs[t]
        _, rows = self._hits(self._flat([t for t in terms if t in first]), limit)
        if len(rows) < limit:
            return []
        hits = self.searcher.search(self._adding(self._rows_clause(rows), terms), limit, count=False).hits
        theta = min(s for s, _ in hits) if len(hits) >= limit else 0.0  # (the scores only: no rows to read)
        best: list[str] = []
        optional: list[str] = []
        cost, best_cost, ub = total, total, 0.0
        for t in sorted(counts, key=lambda t: bounds[t]):  # MaxScore: the lowest bounds summing below theta
            ub += bounds[t]
            if ub >= theta or len(optional) == len(counts) - 1:
                break
            optional.append(t)
            required = total - sum(dfs[o] for o in optional)
            cost = required + SEEK_COST * min(required, self.ntotal) * sum(counts[o] for o in optional)
            if cost < best_cost:
                best, best_cost = list(optional), cost
        return best

    def _pruned(self, terms: list[str], limit: int) -> tuple[np.ndarray, np.ndarray]:
        """`_hits(self._flat(terms), limit)`, reading the postings of `_plan`'s optional terms only by seeks."""
        optional = set(self._plan(terms, limit))
        if not optional:
            return self._hits(self._flat(terms), limit)
        required = self._flat([t for t in terms if t not in optional])
        return self._hits(self._adding(required, [t for t in terms if t in optional]), limit)

    def top_rows(self, terms: list[str], k: int, allowed_rows: np.ndarray | None, excluded_rows: np.ndarray | None
                 ) -> tuple[np.ndarray, np.ndarray]:
        if allowed_rows is not None and len(allowed_rows) <= TERM_SET_MAX:
            query = self._query(terms, allowed_rows)
            return self._top(lambda limit: self._hits(query, limit), k, allowed_rows, excluded_rows, exhaustive=True)
        return self._top(lambda limit: self._pruned(terms, limit), k, allowed_rows, excluded_rows)

    def selective_top_rows(self, terms: list[str], selective: list[str], k: int, allowed_rows: np.ndarray | None,
                           excluded_rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """One query: the selective terms' postings read, every other term added by a seek per document (each costs
        about what reading a few postings does)."""
        chosen = set(selective)
        driver = self._query([t for t in terms if t in chosen], allowed_rows)
        query = self._adding(driver, [t for t in terms if t not in chosen])
        return self._top(lambda limit: self._hits(query, limit), k, allowed_rows, excluded_rows, exhaustive=True)

    def score_rows(self, terms: list[str], rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if not len(rows):
            return np.zeros(0, np.float32), np.zeros(0, np.int64)
        scores, got = self._hits(self._adding(self._rows_clause(rows), terms), len(rows))
        keep = scores > 0  # a row sharing no term is in the clause with a score of 0
        return scores[keep], got[keep]

    def _top(self, run: Callable[[int], tuple[np.ndarray, np.ndarray]], k: int, allowed_rows: np.ndarray | None,
             excluded_rows: np.ndarray | None, *, exhaustive: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """The best k of `run(limit)`'s hits (best first) among the allowed rows, less the excluded ones: a filter
        wider than `TERM_SET_MAX` (not in the query) and the exclusions are applied to the hits, read deeper until
        k of them are kept or every hit was read. `exhaustive`: `run` scores every matching document whatever the
        limit (no pruning), so a deeper first read costs nothing but the heap and saves a second run."""
        wide = allowed_rows is not None and len(allowed_rows) > TERM_SET_MAX
        n_excl = 0 if excluded_rows is None else len(excluded_rows)
        # one more than needed, so the k-th's ties past the cut are seen and broken by row like every engine
        limit = k + n_excl + 1
        if exhaustive:  # a tie across the k-th place would otherwise run the whole query again, 4x deeper
            limit *= EXHAUSTIVE_DEPTH
        if wide:  # deep enough that k of the hits match, at the filter's selectivity
            want = k + n_excl + WIDE_SIGMAS * math.sqrt(k + n_excl) + 5
            limit = math.ceil(want * self.ntotal / len(allowed_rows)) + 1  # type: ignore[arg-type]
        limit = min(self.ntotal, limit)
        while True:
            scores, rows = run(limit)
            keep = np.ones(len(rows), bool)
            if wide:
                keep &= in_sorted(rows, allowed_rows)  # type: ignore[arg-type]
            if excluded_rows is not None:
                keep &= ~in_sorted(rows, excluded_rows)
            exhausted = len(rows) < limit or limit >= self.ntotal
            # done when the k-th kept score is above the last one read: every document tied with it was read
            if exhausted or (keep.sum() >= k and scores[keep][k - 1] > scores[-1]):
                return top_k_rows(scores[keep], rows[keep], k)
            limit = min(self.ntotal, limit * 4)
