"""The bm25s lexical engine (the only module that imports bm25s): precomputed BM25 weights, every document scored.

    <version>/lexical/      bm25s's files: a CSC matrix of per-(term, document) BM25 weights (Lucene's formula at
                            the manifest's k1/b) and the vocabulary, beside the seam's rows.npy and stats.json

Why bm25s (docs/scaling.md#lexical-engines-at-scale): it scores with Lucene's BM25 at any k1/b, so Anserini's
BEIR settings (k1=0.9, b=0.4) are reproduced exactly, and on collections of up to about a million documents it
answers common questions in less CPU time than tantivy. A query sums its terms' sparse rows into a score per
document, then selects the top k: the cost grows with the documents holding the query's terms, and its weights
take more memory per document than tantivy's postings: what `auto` weighs (`lexical.choose_engine`).
"""

from __future__ import annotations

import gc
import itertools
import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import bm25s
import numpy as np

from indexer.runtime.lexical import LexicalIndex
from indexer.runtime.manifest import LexicalInfo
from indexer.runtime.topk import top_k_rows

logging.getLogger("bm25s").setLevel(logging.WARNING)  # its per-build debug lines are not ours to show

SAMPLE_STRIDE = 16  # top-k preselection: one score in 16 read for a threshold (see `_candidates`)


class Engine(LexicalIndex):
    """bm25s's `lucene` method over the version's analysed documents."""

    @staticmethod
    def version() -> str:
        return str(bm25s.__version__)

    @staticmethod
    def build(out: Path, terms: Iterable[list[str]], info: LexicalInfo) -> int:
        model = ArrayBuiltBM25(method="lucene", k1=info.k1, b=info.b)
        with collector_paused():
            docs = list(terms)  # bm25s indexes a corpus held in memory
            # bm25s's empty token (for its own queries' unknown terms; ours skip them) fails on a corpus of no terms
            model.index(docs, show_progress=False, create_empty_token=any(docs))
            del docs
        model.save(str(out), show_progress=False)
        return len(model.vocab_dict)

    def _open(self, mmap: bool) -> None:
        self.model = bm25s.BM25.load(str(self.folder), mmap=mmap, show_progress=False, verbosity=0)
        self.vocab: dict[str, int] = self.model.vocab_dict
        self.df = np.diff(self.model.scores["indptr"]).astype(np.int64)

    def doc_freq(self, term: str) -> int:
        tid = self.vocab.get(term)
        return 0 if tid is None else int(self.df[tid])

    def top_rows(self, terms: list[str], k: int, allowed_rows: np.ndarray | None, excluded_rows: np.ndarray | None
                 ) -> tuple[np.ndarray, np.ndarray]:
        ids = [self.vocab[t] for t in terms if t in self.vocab]
        if not ids:
            return np.zeros(0, np.float32), np.zeros(0, np.int64)
        scores = self.model.get_scores_from_ids(ids)
        if excluded_rows is not None:
            scores = scores.copy() if not scores.flags.writeable else scores
            scores[excluded_rows] = 0.0
        cand = scores if allowed_rows is None else scores[allowed_rows]
        nz = _candidates(cand, k)
        rows = nz if allowed_rows is None else allowed_rows[nz]
        return top_k_rows(cand[nz], rows, k)


def _candidates(cand: np.ndarray, k: int) -> np.ndarray:
    """Positions holding the top k of `cand` (every position with a score > 0 when fewer), plus possibly some
    more. Common terms ("what", "how" are not stopwords) give a score to almost half of Quora's questions, and
    selecting among all of them costs more than scoring: a threshold read off a strided sample usually keeps a few
    hundred; when it keeps fewer than k, every scored position is taken — so the result is always exact."""
    if len(cand) > 8 * SAMPLE_STRIDE * k:
        sample = cand[::SAMPLE_STRIDE]
        rank = len(sample) - 1 - 2 * (k // SAMPLE_STRIDE + 1)  # about 2k positions above it in all
        thr = float(np.partition(sample, rank)[rank])
        if thr > 0:
            nz = np.flatnonzero(cand >= thr)
            if nz.size >= k:
                return nz
    return np.flatnonzero(cand > 0)


@contextmanager
def collector_paused() -> Iterator[None]:
    """The garbage collector off while a corpus' term lists are made and indexed (on again after, whatever happens):
    they are a list per document, containers no reference cycle runs through, which each full collection would walk
    again as more are made — a fifth of a million-document build's CPU (docs/decisions.md)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class ArrayBuiltBM25(bm25s.BM25):
    """bm25s's Lucene BM25 whose index is built by array operations over every document at once. bm25s documents
    `build_index_from_ids` as the method to override to build the index another way; its own counts each document's
    terms with a `Counter` and scores them one document at a time, about 60 % of a compaction's lexical rebuild.
    What this builds is what bm25s builds, to the bit: the same float64 arithmetic in the same order, cast to the
    same float32, through bm25s's own CSC builder (`tests/indexer/runtime/test_lexical.py`)."""

    def build_index_from_ids(self, unique_token_ids: list[int], corpus_token_ids: list[list[int]],
                             show_progress: bool = True, leave_progress: bool = False) -> dict[str, object]:
        if self.method != "lucene":
            raise ValueError(f"ArrayBuiltBM25 builds the lucene method's weights, not {self.method!r}")
        n_docs, n_vocab = len(corpus_token_ids), len(unique_token_ids)
        self.nonoccurrence_array = None  # (BM25L and BM25+ only: bm25s's own build sets it so for lucene)
        if n_vocab == 0:  # documents of no terms (stopwords, punctuation): an index that finds nothing
            return {"data": np.zeros(0, self.dtype), "indices": np.zeros(0, self.int_dtype),
                    "indptr": np.zeros(1, np.int64), "num_docs": n_docs}
        lengths = np.fromiter(map(len, corpus_token_ids), dtype=np.int64, count=n_docs)
        flat = np.fromiter(itertools.chain.from_iterable(corpus_token_ids), dtype=np.int64, count=int(lengths.sum()))
        # each (document, term) pair once, with its count, in document order then term order
        pairs, tf = np.unique(np.repeat(np.arange(n_docs, dtype=np.int64), lengths) * n_vocab + flat,
                              return_counts=True)
        docs, terms = np.divmod(pairs, n_vocab)
        df = np.bincount(terms, minlength=n_vocab)
        idf = np.log(1 + (n_docs - df + 0.5) / (df + 0.5)).astype(self.dtype)  # bm25s: math.log into its dtype
        avg_doc_len = lengths.mean() if n_docs else 0.0
        denominator = self.k1 * ((1 - self.b) + self.b * lengths / avg_doc_len)  # per document, float64
        tf64 = tf.astype(self.dtype).astype(np.float64)
        scores = (idf[terms].astype(np.float64) * (tf64 / (denominator[docs] + tf64))).astype(self.dtype)
        data, indices, indptr = self._np_csc(data=scores, rows=docs.astype(self.int_dtype),
                                             cols=terms.astype(self.int_dtype), shape=(n_docs, n_vocab))
        return {"data": data.astype(self.dtype), "indices": indices, "indptr": indptr, "num_docs": n_docs}
