"""The tantivy lexical engine (the only module that imports tantivy): a Lucene-style inverted index in Rust.

    <version>/lexical/      tantivy's index files (one text field of the analysed terms, frequencies only; the row
                            as a fast field), beside the seam's rows.npy and stats.json

The documents are analysed by the seam's `Analyzer` (the same terms as every engine) and indexed already split:
tantivy's whitespace tokenizer reads them back as they are. A query is a disjunction of term queries (a repeated
term is a clause each time), answered by tantivy's top-k collector (block-max WAND: the postings of common terms
are skipped where they cannot reach the top k). Measured against bm25s (`bench/lexical_engines.py`, docs/scaling.md):
rare terms cost a fraction (0.13x the CPU at 1M documents), common questions about twice, memory and disk about
half. Its
Python bindings fix BM25 at k1=1.2, b=0.75 (`FIXED_K1_B`); document lengths are Lucene's one-byte norms.

Filters stay exact: a filter's matches are a term-set clause on the row field when they are few
(`TERM_SET_MAX`), else the top hits are read deeper until k of them match (or every scoring document was read).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tantivy

from indexer.runtime.lexical import LexicalIndex, top_k_rows
from indexer.runtime.manifest import LexicalInfo

TOKENIZER = "strata_terms"
TEXT, ROW = "terms", "row"
HEAP_BYTES = 256_000_000  # the writer's memory budget before it flushes a segment
TERM_SET_MAX = 50_000  # a filter matching at most this many documents is a clause of the query itself


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
    SCORE_SCALE = 2.2  # tantivy keeps BM25's (k1 + 1) numerator, which Lucene 8+ (and bm25s) dropped

    @staticmethod
    def version() -> str:
        return str(tantivy.__version__)

    @staticmethod
    def build(out: Path, terms: list[list[str]], info: LexicalInfo) -> int:
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

    def doc_freq(self, term: str) -> int:
        return int(self.searcher.doc_freq(TEXT, term))

    def _query(self, terms: list[str], allowed_rows: np.ndarray | None) -> tantivy.Query:
        text = tantivy.Query.boolean_query(
            [(tantivy.Occur.Should, tantivy.Query.term_query(self.schema, TEXT, t)) for t in terms])
        if allowed_rows is None or len(allowed_rows) > TERM_SET_MAX:
            return text
        rows = tantivy.Query.const_score_query(tantivy.Query.term_set_query(self.schema, ROW, allowed_rows.tolist()),
                                               0.0)  # a filter, not a score
        return tantivy.Query.boolean_query([(tantivy.Occur.Must, text), (tantivy.Occur.Must, rows)])

    def _hits(self, query: tantivy.Query, limit: int) -> tuple[np.ndarray, np.ndarray]:
        hits = self.searcher.search(query, limit, count=False).hits
        if not hits:
            return np.zeros(0, np.float32), np.zeros(0, np.int64)
        scores = np.fromiter((s for s, _ in hits), np.float32, count=len(hits))
        rows = np.asarray(self.searcher.fast_field_values(ROW, [a for _, a in hits]), dtype=np.int64)
        return scores, rows

    def top_rows(self, terms: list[str], k: int, allowed_rows: np.ndarray | None, excluded_rows: np.ndarray | None
                 ) -> tuple[np.ndarray, np.ndarray]:
        query = self._query(terms, allowed_rows)
        wide = allowed_rows is not None and len(allowed_rows) > TERM_SET_MAX
        n_excl = 0 if excluded_rows is None else len(excluded_rows)
        # one more than needed, so the k-th's ties past the cut are seen and broken by row like every engine
        limit = min(self.ntotal, k + n_excl + 1 if not wide else 4 * (k + n_excl) + 1)
        while True:
            scores, rows = self._hits(query, limit)
            keep = np.ones(len(rows), bool)
            if wide:
                keep &= np.isin(rows, allowed_rows)  # type: ignore[arg-type]
            if excluded_rows is not None:
                keep &= ~np.isin(rows, excluded_rows)
            exhausted = len(rows) < limit or limit >= self.ntotal
            # done when the k-th kept score is above the last one read: every document tied with it was read
            if exhausted or (keep.sum() >= k and scores[keep][k - 1] > scores[-1]):
                return top_k_rows(scores[keep], rows[keep], k)
            limit = min(self.ntotal, limit * 4)
