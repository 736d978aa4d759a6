"""Lexical retrieval: BM25 over a version's documents, on bm25s (the only module that imports bm25s and Stemmer).

    <version>/lexical/      bm25s's files (a CSC matrix of precomputed per-(term, document) BM25 weights and the
                            vocabulary) + rows.npy (FAISS id of each row, ascending) + stats.json (N, avgdl,
                            the analysis) — written by `build_lexical` inside the build's staging folder, so it is
                            published with the vectors in the same rename.

Why bm25s (`bench/results/lexical-engines-*.md`): it scores with Lucene's BM25 at any k1/b, so Anserini's BEIR
settings (k1=0.9, b=0.4) are reproduced exactly; tantivy's Python bindings fix k1=1.2, b=0.75. On 100k Quora
questions it builds faster and answers a query in less time. What bm25s lacks — deletes and additions — the
serving side needs only until `indexer compact` rebuilds the index from the folded store: `LexicalOverlay` scores
written documents with the base version's statistics (N, avgdl, document frequencies), which is what Lucene
does too until segments merge (deleted documents keep counting in the statistics).

Analysis (`Analyzer`): lowercase, tokens of two or more word characters (bm25s's and scikit-learn's pattern),
stopwords dropped (Lucene's English list, the one Anserini uses), then a Snowball stemmer (PyStemmer; "english" is
Porter2). Both configurable per build and recorded in the manifest (`LexicalInfo`); queries are analysed the same
way, by the same code.

Search is exact: every document's score is computed (a sum of the query terms' sparse rows), then restricted to the
allowed rows (a metadata filter's ids) and stripped of tombstones before the top k is taken — so a filter never
leaves fewer than k hits when k documents match with a score > 0. Documents that share no term with the query
(score 0) are not hits.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import bm25s
import numpy as np
import Stemmer
from bm25s.stopwords import STOPWORDS_EN

from indexer.runtime.manifest import LexicalInfo

log = logging.getLogger(__name__)
logging.getLogger("bm25s").setLevel(logging.WARNING)  # its per-build debug lines are not ours to show

LEXICAL_DIR = "lexical"
ROWS_FILE = "rows.npy"
STATS_FILE = "stats.json"
TOKEN_PATTERN = r"(?u)\b\w\w+\b"
STOPWORD_LISTS = {"english": frozenset(STOPWORDS_EN), "none": frozenset()}
ENGINE = "bm25s"
SAMPLE_STRIDE = 16  # top-k preselection: one score in 16 read for a threshold (see LexicalIndex._candidates)


class LexicalError(ValueError):
    """Lexical settings that cannot be used, or a lexical index that is missing or inconsistent."""


def stemmer_languages() -> list[str]:
    return sorted(Stemmer.algorithms())


def check_settings(stemmer: str, stopwords: str, k1: float, b: float) -> None:
    """Raise LexicalError naming what is wrong with these analysis/BM25 settings."""
    if stemmer != "none" and stemmer not in Stemmer.algorithms():
        raise LexicalError(f"unknown stemmer {stemmer!r}: one of none, {', '.join(stemmer_languages())}")
    if stopwords not in STOPWORD_LISTS:
        raise LexicalError(f"unknown stopword list {stopwords!r}: one of {', '.join(STOPWORD_LISTS)}")
    if not (math.isfinite(k1) and k1 >= 0):
        raise LexicalError(f"BM25 k1 must be a finite number >= 0, not {k1}")
    if not (math.isfinite(b) and 0 <= b <= 1):
        raise LexicalError(f"BM25 b must be in [0, 1], not {b}")


def lexical_info(stemmer: str = "english", stopwords: str = "english", k1: float = 0.9, b: float = 0.4
                 ) -> LexicalInfo:
    """The settings of a lexical index to build (its counts are filled in by `build_lexical`)."""
    check_settings(stemmer, stopwords, k1, b)
    return LexicalInfo(engine=ENGINE, engine_version=bm25s.__version__, stemmer=stemmer, stopwords=stopwords,
                       k1=k1, b=b, token_pattern=TOKEN_PATTERN)


class Analyzer:
    """Text → terms, the same for documents and queries. Thread-safe: a PyStemmer object is not, so each thread
    gets its own."""

    def __init__(self, stemmer: str, stopwords: str) -> None:
        self.language = stemmer
        self.stopwords = STOPWORD_LISTS[stopwords]
        self._split = re.compile(TOKEN_PATTERN).findall
        self._local = threading.local()

    def _stem(self) -> Callable[[list[str]], list[str]] | None:
        if self.language == "none":
            return None
        stem = getattr(self._local, "stem", None)
        if stem is None:
            stem = self._local.stem = Stemmer.Stemmer(self.language).stemWords
        return stem

    def terms(self, text: str) -> list[str]:
        words = [w for w in self._split(text.lower()) if w not in self.stopwords]
        stem = self._stem()
        return stem(words) if stem is not None and words else words


@dataclass(frozen=True)
class Stats:
    n_docs: int
    avgdl: float


def _weight(idf: float, tf: int, dl: int, stats: Stats, k1: float, b: float) -> float:
    """Lucene's BM25 weight of one term in one document (bm25s's `lucene` method, which the base index holds)."""
    return idf * tf / (k1 * ((1 - b) + b * dl / stats.avgdl) + tf) if stats.avgdl > 0 else 0.0


def _idf(df: int, n: int) -> float:
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def build_lexical(folder: Path, docs: Iterable[tuple[int, str]], info: LexicalInfo) -> LexicalInfo:
    """Index `docs` ((FAISS id, text), any order) into `folder/lexical/`; returns `info` with its counts."""
    t0 = time.perf_counter()
    analyzer = Analyzer(info.stemmer, info.stopwords)
    pairs = sorted(docs, key=lambda p: p[0])
    fids = np.fromiter((p[0] for p in pairs), dtype=np.int64, count=len(pairs))
    terms = [analyzer.terms(t) for _, t in pairs]
    del pairs
    out = folder / LEXICAL_DIR
    out.mkdir(parents=True, exist_ok=True)
    n_terms = sum(map(len, terms))
    model = bm25s.BM25(method="lucene", k1=info.k1, b=info.b)
    if fids.size:
        model.index(terms, show_progress=False)
        model.save(str(out), show_progress=False)
    vocab = len(model.vocab_dict) if fids.size else 0
    np.save(out / ROWS_FILE, fids)
    (out / STATS_FILE).write_text(json.dumps({"n_docs": int(fids.size),
                                              "avgdl": n_terms / fids.size if fids.size else 0.0}))
    seconds = time.perf_counter() - t0
    log.info("lexical index: %d documents, %d terms in the vocabulary, %.1fs", fids.size, vocab, seconds)
    return info.model_copy(update={"n_docs": int(fids.size), "vocabulary": vocab, "seconds": round(seconds, 3)})


class LexicalIndex:
    """A version's lexical index opened for searching (read-only; safe to share between threads)."""

    def __init__(self, folder: Path, info: LexicalInfo, *, mmap: bool = False) -> None:
        """`mmap`: the postings and row ids are memory-mapped (read through the page cache), not loaded."""
        self.folder = Path(folder) / LEXICAL_DIR
        self.info = info
        self.analyzer = Analyzer(info.stemmer, info.stopwords)
        try:
            self.fids = np.load(self.folder / ROWS_FILE, mmap_mode="r" if mmap else None)
            raw = json.loads((self.folder / STATS_FILE).read_text())
            self.stats = Stats(int(raw["n_docs"]), float(raw["avgdl"]))
            if self.fids.size:
                self.model = bm25s.BM25.load(str(self.folder), mmap=mmap, show_progress=False, verbosity=0)
                self.vocab: dict[str, int] = self.model.vocab_dict
                self.df = np.diff(self.model.scores["indptr"]).astype(np.int64)
            else:
                self.model, self.vocab, self.df = None, {}, np.zeros(0, np.int64)
        except (OSError, ValueError, KeyError) as exc:
            raise LexicalError(f"{self.folder} is not a readable lexical index: {exc}") from exc
        if len(self.fids) != info.n_docs or self.stats.n_docs != info.n_docs:
            raise LexicalError(f"{self.folder} holds {len(self.fids)} documents but the manifest says {info.n_docs}")

    @property
    def ntotal(self) -> int:
        return int(self.fids.size)

    def rows_of(self, fids: np.ndarray) -> np.ndarray:
        """The rows of those FAISS ids that this index holds."""
        fids = np.asarray(fids, dtype=np.int64)
        if not len(self.fids) or not len(fids):
            return np.zeros(0, np.int64)
        rows = np.minimum(np.searchsorted(self.fids, fids), len(self.fids) - 1)
        return rows[self.fids[rows] == fids]

    def term_ids(self, query: str) -> list[int]:
        return [self.vocab[t] for t in self.analyzer.terms(query) if t in self.vocab]

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every row for `query` (0 where no query term occurs)."""
        ids = self.term_ids(query)
        if not ids or self.model is None:
            return np.zeros(len(self.fids), dtype=np.float32)
        return self.model.get_scores_from_ids(ids)

    def search(self, query: str, k: int, *, allowed: np.ndarray | None = None, excluded: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """(scores, FAISS ids) of the best k documents with a score > 0, best first (fewer when fewer match);
        `allowed`: only these FAISS ids (a filter's matches); `excluded`: never these (tombstones)."""
        scores = self.scores(query)
        if excluded is not None and len(excluded):
            scores = scores.copy() if not scores.flags.writeable else scores
            scores[self.rows_of(excluded)] = 0.0
        rows = None if allowed is None else self.rows_of(allowed)
        cand = scores if rows is None else scores[rows]
        if k <= 0:
            return np.zeros(0, np.float32), np.zeros(0, np.int64)
        nz = self._candidates(cand, k)
        if nz.size == 0:
            return np.zeros(0, np.float32), np.zeros(0, np.int64)
        sub = cand[nz]
        if k < nz.size:  # the k best; of those tied with the k-th, the first rows (nz ascends): deterministic
            kth = np.partition(sub, nz.size - k)[nz.size - k]
            above = np.flatnonzero(sub > kth)
            tied = np.flatnonzero(sub == kth)[: k - above.size]
            keep = np.concatenate([above, tied])
            nz, sub = nz[keep], sub[keep]
        order = np.lexsort((nz, -sub))  # by score, ties by row (= by FAISS id): deterministic
        picked = nz[order] if rows is None else rows[nz[order]]
        return sub[order].astype(np.float32), self.fids[picked]

    @staticmethod
    def _candidates(cand: np.ndarray, k: int) -> np.ndarray:
        """Positions holding the top k of `cand` (every position with a score > 0 when fewer), plus possibly some
        more. Common terms ("what", "how" are not stopwords) give a score to almost half of Quora's questions, and
        selecting among all of them costs more than scoring: a threshold read off a strided sample usually keeps a
        few hundred; when it keeps fewer than k, every scored position is taken — so the result is always exact."""
        if len(cand) > 8 * SAMPLE_STRIDE * k:
            sample = cand[::SAMPLE_STRIDE]
            rank = len(sample) - 1 - 2 * (k // SAMPLE_STRIDE + 1)  # about 2k positions above it in all
            thr = float(np.partition(sample, rank)[rank])
            if thr > 0:
                nz = np.flatnonzero(cand >= thr)
                if nz.size >= k:
                    return nz
        return np.flatnonzero(cand > 0)

    def weights(self, text: str) -> dict[str, float]:
        """A new document's term → BM25 weight under this index's statistics (N, avgdl, document frequencies): how
        `LexicalOverlay` scores written documents until `indexer compact` indexes them with the rest. A term this
        index has never seen counts as in one document."""
        terms = self.analyzer.terms(text)
        tf: dict[str, int] = {}
        for t in terms:
            tf[t] = tf.get(t, 0) + 1
        n = max(self.stats.n_docs, 1)
        out = {}
        for t, f in tf.items():
            tid = self.vocab.get(t)
            df = int(self.df[tid]) if tid is not None else 0
            out[t] = _weight(_idf(df + 1 if tid is None else df, n), f, len(terms), self.stats, self.info.k1,
                             self.info.b)
        return out


class LexicalOverlay:
    """Written documents' BM25 weights, searched beside a base `LexicalIndex` (an inverted map, small until
    `indexer compact`). The caller serialises writes; searches read under the lock."""

    def __init__(self, base: LexicalIndex) -> None:
        self.base = base
        self._lock = threading.Lock()
        self._postings: dict[str, dict[int, float]] = {}
        self._terms: dict[int, list[str]] = {}  # FAISS id -> its terms (to remove it)

    def put(self, fid: int, text: str) -> None:
        weights = self.base.weights(text)
        with self._lock:
            self._remove(fid)
            for term, w in weights.items():
                self._postings.setdefault(term, {})[fid] = w
            self._terms[fid] = list(weights)

    def drop(self, fid: int) -> None:
        with self._lock:
            self._remove(fid)

    def _remove(self, fid: int) -> None:
        for term in self._terms.pop(fid, ()):
            posting = self._postings.get(term)
            if posting is not None:
                posting.pop(fid, None)
                if not posting:
                    del self._postings[term]

    def __len__(self) -> int:
        return len(self._terms)

    def scores(self, query: str) -> dict[int, float]:
        """FAISS id → score of the written documents that share a term with `query` (a repeated query term counts
        each time, as in the base index)."""
        acc: dict[int, float] = {}
        terms = self.base.analyzer.terms(query)
        with self._lock:
            for t in terms:
                for fid, w in self._postings.get(t, {}).items():
                    acc[fid] = acc.get(fid, 0.0) + w
        return acc
