"""Lexical retrieval: the seam over BM25 engines, and what every engine shares.

    <version>/lexical/      the engine's files + rows.npy (FAISS id of each row, ascending) + stats.json (N, avgdl),
                            written in the build's staging folder: published with the vectors in the same rename.

Like the vector index seam (`ann`), an engine is a `LexicalIndex` subclass in a module of its own, the only one
importing its library, named in `ENGINES` (engine name → module, imported when first used, so an engine's
library is needed only by the versions built with it). The manifest's `LexicalInfo.engine` says which engine
opens a version's `lexical/` (a manifest without one was built by bm25s); a version serves lexical search when its
manifest has a `lexical` entry at all. Engines (k1=0.9, b=0.4 by default: Anserini's BEIR settings):
- **bm25s** (`lexical_bm25s`): precomputed BM25 weights (CSC), every document scored per query; any k1/b;
- **tantivy** (`lexical_tantivy`): Lucene-style inverted index (its bindings never reach tantivy's block-max WAND:
  the engine prunes by MaxScore's bound itself); its Python bindings fix BM25 at k1=1.2, b=0.75;
- **pisa** (`lexical_pisa`): PISA's compressed index of Lucene's BM25 weights at any k1/b, pruned by block-max WAND
  in C++ over documents ordered by their common terms.
`auto` (`choose_engine`) picks by corpus size (`AUTO_PISA_FROM`, docs/scaling.md#lexical-engines-at-scale).

What every engine shares lives here, so all of them search the same terms: analysis (`Analyzer`: lowercase,
tokens of two or more word characters, Lucene's English stopwords, a Snowball stemmer from PyStemmer; recorded in
the manifest and applied to queries by the same code), the row ↔ FAISS id map, and the overlay of written
documents (`lexical_overlay.LexicalOverlay`), scored with the base version's statistics (N, avgdl, document
frequencies) until `indexer compact` rebuilds the index — what Lucene does too until segments merge.

Every engine's search is exact: the top k by score among the allowed ids (a metadata filter's matches) less the
excluded ones (the overlay's tombstones), ties by FAISS id; documents sharing no term with the query are not hits.
"""

from __future__ import annotations

import importlib
import json
import logging
import math
import re
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import Stemmer

from indexer.runtime.analysed import Recorder, Reuse
from indexer.runtime.manifest import LexicalInfo
from indexer.runtime.progress import Progress
from indexer.runtime.rowsets import ascending_unique

log = logging.getLogger(__name__)

LEXICAL_DIR = "lexical"
ROWS_FILE = "rows.npy"
STATS_FILE = "stats.json"
PROGRESS_EVERY = 10_000  # documents analysed between progress updates (not a call per document)
TOKEN_PATTERN = r"(?u)\b\w\w+\b"
# Lucene's English stopword list (the one Anserini and bm25s use)
LUCENE_ENGLISH = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these they this "
    "to was will with".split())
STOPWORD_LISTS = {"english": LUCENE_ENGLISH, "none": frozenset()}

# The engines: name → the module implementing it (its `Engine` class, a `LexicalIndex`). Adding one is a module
# and a line here (and its library's import contract in pyproject.toml).
ENGINES: dict[str, str] = {name: f"indexer.runtime.lexical_{name}" for name in ("bm25s", "tantivy", "pisa")}
DEFAULT_ENGINE = "bm25s"  # what a manifest without `engine` was built with
AUTO = "auto"
# `--lexical-engine auto`: bm25s below AUTO_PISA_FROM documents, pisa from there on, measured side by side on the
# scale corpus (docs/scaling.md#lexical-engines-at-scale); where pisa is not installed, tantivy from AUTO_TANTIVY_FROM
# (bm25s's index alone would take ~3.2 GB of one machine's serving budget there: 0.65 KB a document, measured).
AUTO_PISA_FROM = 1_000_000
AUTO_TANTIVY_FROM = 5_000_000


class LexicalError(ValueError):
    """Lexical settings that cannot be used, or a lexical index that is missing or inconsistent."""


def engine_class(name: str) -> type[LexicalIndex]:
    """The `LexicalIndex` class of engine `name` (LexicalError naming the engines when unknown or not installed)."""
    if name not in ENGINES:
        raise LexicalError(f"unknown lexical engine {name!r}: one of {', '.join(ENGINES)}")
    try:
        return importlib.import_module(ENGINES[name]).Engine  # type: ignore[no-any-return]
    except ImportError as exc:
        raise LexicalError(f"lexical engine {name!r} is not installed ({exc})") from exc


def choose_engine(requested: str, n_docs: int, unit: str = "documents") -> tuple[str, str]:
    """(engine, why) for `--lexical-engine`: the one asked for, or for `auto` by corpus size (`n_docs` rows, each
    a `unit`: documents, or a version of passages' passages)."""
    if requested != AUTO:
        engine_class(requested)
        return requested, "asked for"
    missing = ""
    for engine, start in (("pisa", AUTO_PISA_FROM), ("tantivy", AUTO_TANTIVY_FROM)):
        if n_docs >= start:
            try:
                engine_class(engine)
            except LexicalError as exc:  # an install without it still builds
                missing += f"; {exc}"
                continue
            return engine, f"auto: {n_docs:,} {unit} >= {start:,} (docs/scaling.md){missing}"
    below = f" < {AUTO_PISA_FROM:,}" if n_docs < AUTO_PISA_FROM else ""
    return "bm25s", f"auto: {n_docs:,} {unit}{below} (docs/scaling.md){missing}"


def check_settings(stemmer: str, stopwords: str, k1: float, b: float, engine: str = DEFAULT_ENGINE) -> None:
    """Raise LexicalError naming what is wrong with these analysis/BM25 settings for `engine` (or auto)."""
    if stemmer != "none" and stemmer not in Stemmer.algorithms():
        raise LexicalError(f"unknown stemmer {stemmer!r}: one of none, {', '.join(sorted(Stemmer.algorithms()))}")
    if stopwords not in STOPWORD_LISTS:
        raise LexicalError(f"unknown stopword list {stopwords!r}: one of {', '.join(STOPWORD_LISTS)}")
    if not (math.isfinite(k1) and k1 >= 0):
        raise LexicalError(f"BM25 k1 must be a finite number >= 0, not {k1}")
    if not (math.isfinite(b) and 0 <= b <= 1):
        raise LexicalError(f"BM25 b must be in [0, 1], not {b}")
    if engine != AUTO:
        fixed = engine_class(engine).FIXED_K1_B
        if fixed is not None and (k1, b) not in (fixed, (0.9, 0.4)):  # 0.9/0.4: the defaults, not asked for
            raise LexicalError(f"the {engine} engine scores with BM25 k1={fixed[0]}, b={fixed[1]} only; "
                               f"not k1={k1}, b={b}")


def lexical_info(stemmer: str = "english", stopwords: str = "english", k1: float = 0.9, b: float = 0.4,
                 engine: str = DEFAULT_ENGINE) -> LexicalInfo:
    """The settings of a lexical index to build (engine `auto` is resolved, and the counts filled in, by
    `build_lexical`)."""
    check_settings(stemmer, stopwords, k1, b, engine)
    return LexicalInfo(engine=engine, engine_version="", stemmer=stemmer, stopwords=stopwords, k1=k1, b=b,
                       token_pattern=TOKEN_PATTERN)


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


def bm25_weight(idf: float, tf: int, dl: int, stats: Stats, k1: float, b: float) -> float:
    """Lucene's BM25 weight of one term in one document."""
    return idf * tf / (k1 * ((1 - b) + b * dl / stats.avgdl) + tf) if stats.avgdl > 0 else 0.0


def bm25_idf(df: int, n: int) -> float:
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def build_lexical(folder: Path, docs: Iterable[tuple[int, str]], info: LexicalInfo, *,
                  n_docs: int | None = None, unit: str = "documents",
                  parent: tuple[Path, set[int]] | None = None) -> LexicalInfo:
    """Index `docs` ((FAISS id, text)) into `folder/lexical/` with `info.engine` (`auto`: chosen by size, with its
    reason logged and recorded); returns `info` with the engine, its version and the counts.

    With `n_docs`, `docs` is a stream of that many documents in ascending id order (`Store.iter_texts`): each is
    analysed and handed to the engine as it is read, so what the build holds is the engine's own buffers (tantivy:
    its writer's heap) and 8 bytes per document, not every text and term list as Python objects (several GB at 10M
    Quora questions, by estimate; bm25s holds them). Without, `docs` is any iterable in any order, sorted here.
    Progress with an ETA is logged. `unit`: what a row is (documents, or a version of passages' passages).
    A build of documents keeps their analysed terms beside the index (`analysed`); `parent` (a parent version's
    folder, the FAISS ids written since it) takes the terms of the others from the parent's instead of analysing
    them again (a compaction's build)."""
    t0 = time.perf_counter()
    if n_docs is None:
        docs = sorted(docs, key=lambda p: p[0])
        n_docs = len(docs)
    engine, why = choose_engine(info.engine, n_docs, unit)
    why = info.engine_reason if info.engine != AUTO and info.engine_reason else why  # a parent version's, kept
    cls = engine_class(engine)
    if info.engine == AUTO and cls.FIXED_K1_B is not None and (info.k1, info.b) not in (cls.FIXED_K1_B, (0.9, 0.4)):
        engine, why = DEFAULT_ENGINE, f"auto: BM25 k1={info.k1}, b={info.b} asked for, which {engine} cannot score"
        cls = engine_class(engine)
    if cls.FIXED_K1_B is not None:
        info = info.model_copy(update={"k1": cls.FIXED_K1_B[0], "b": cls.FIXED_K1_B[1]})
    out = folder / LEXICAL_DIR
    out.mkdir(parents=True, exist_ok=True)
    rows = _Rows(out, n_docs, info, unit, parent)
    try:
        vocab = cls.build(out, rows.analysed(docs, engine), info) if n_docs else 0
        rows.save(out)
    finally:
        rows.close()
    seconds = time.perf_counter() - t0
    reused = f" ({n_docs - rows.reuse.reused:,} analysed, {rows.reuse.reused:,} as the parent analysed them)" \
        if rows.reuse is not None else ""
    log.info("lexical index (%s, %s): %d %s, %d terms in the vocabulary, %.1fs%s", engine, why, n_docs, unit, vocab,
             seconds, reused)
    return info.model_copy(update={"engine": engine, "engine_version": cls.version(), "engine_reason": why,
                                   "n_docs": n_docs, "vocabulary": vocab, "seconds": round(seconds, 3)})


class _Rows:
    """A lexical build's rows as they are analysed: their FAISS ids, their terms (kept for the next build of
    documents: `analysed.Recorder`; taken from the parent's where unchanged: `analysed.Reuse`) and their count."""

    def __init__(self, out: Path, n_docs: int, info: LexicalInfo, unit: str, parent: tuple[Path, set[int]] | None
                 ) -> None:
        self.n_docs, self.fids = n_docs, np.empty(n_docs, dtype=np.int64)
        self.rows = self.terms = 0
        self.analyzer, analyser = Analyzer(info.stemmer, info.stopwords), (info.stemmer, info.stopwords)
        self.recorder = Recorder(out, analyser) if unit == "documents" else None
        self.reuse = Reuse.open(parent[0] / LEXICAL_DIR, ROWS_FILE, analyser, parent[1]) \
            if parent is not None and self.recorder is not None else None

    def analysed(self, docs: Iterable[tuple[int, str]], engine: str) -> Iterator[list[str]]:
        n_docs, fids, reuse, recorder = self.n_docs, self.fids, self.reuse, self.recorder
        rows = 0
        with Progress(n_docs, f"lexical index ({engine})", unit="texts", logger=log) as bar:
            for fid, text in docs:
                if rows == n_docs:
                    raise ValueError(f"more documents than the {n_docs:,} announced")
                if rows and fid <= fids[rows - 1]:
                    raise ValueError(f"document ids not ascending: {fid} after {fids[rows - 1]}")
                fids[rows] = fid
                terms = reuse.terms(fid) if reuse is not None else None
                if terms is None:
                    terms = self.analyzer.terms(text)
                if recorder is not None:
                    recorder.add(terms)
                self.terms += len(terms)
                rows += 1
                if rows % PROGRESS_EVERY == 0:
                    bar.update(PROGRESS_EVERY)
                yield terms
            bar.update(rows % PROGRESS_EVERY)
        self.rows = rows

    def save(self, out: Path) -> None:
        if self.rows != self.n_docs:
            raise ValueError(f"{self.rows:,} documents where {self.n_docs:,} were announced")
        np.save(out / ROWS_FILE, self.fids)
        if self.recorder is not None:
            self.recorder.save()
        (out / STATS_FILE).write_text(json.dumps({"n_docs": self.n_docs,
                                                  "avgdl": self.terms / self.n_docs if self.n_docs else 0.0}))

    def close(self) -> None:
        if self.recorder is not None:
            self.recorder.close()


def open_lexical(folder: Path, info: LexicalInfo, *, mmap: bool = False) -> LexicalIndex:
    """A version's lexical index opened by the engine its manifest names (LexicalError when it cannot be)."""
    return engine_class(info.engine)(folder, info, mmap=mmap)


class LexicalIndex(ABC):
    """A version's lexical index opened for searching (read-only; safe to share between threads). An engine
    implements `build`, `_open`, `search` and `doc_freq`; the rows, statistics and analysis are shared."""

    FIXED_K1_B: tuple[float, float] | None = None  # an engine that scores at fixed BM25 parameters says which
    SCORE_SCALE = 1.0  # its scores over Lucene's BM25 (`bm25_weight`): how written documents are scored alike

    def __init__(self, folder: Path, info: LexicalInfo, *, mmap: bool = False) -> None:
        """`mmap`: the postings and row ids are memory-mapped (read through the page cache) where the engine can."""
        self.folder = Path(folder) / LEXICAL_DIR
        self.info = info
        self.analyzer = Analyzer(info.stemmer, info.stopwords)
        try:
            self.fids = np.asarray(np.load(self.folder / ROWS_FILE, mmap_mode="r" if mmap else None))  # no np.memmap
            raw = json.loads((self.folder / STATS_FILE).read_text())
            self.stats = Stats(int(raw["n_docs"]), float(raw["avgdl"]))
            if self.fids.size:
                self._open(mmap)
        except (OSError, ValueError, KeyError) as exc:
            raise LexicalError(f"{self.folder} is not a readable lexical index: {exc}") from exc
        if len(self.fids) != info.n_docs or self.stats.n_docs != info.n_docs:
            raise LexicalError(f"{self.folder} holds {len(self.fids)} documents but the manifest says {info.n_docs}")

    # -- what an engine implements ---------------------------------------------------------------------------------
    @staticmethod
    @abstractmethod
    def version() -> str:
        """The engine library's version (recorded in the manifest)."""

    @staticmethod
    @abstractmethod
    def build(out: Path, terms: Iterable[list[str]], info: LexicalInfo) -> int:
        """Index the analysed documents (row i: FAISS id `rows.npy[i]`), read once in row order, into `out`;
        returns the vocabulary size. An engine that can add documents one by one should not hold them all."""

    @abstractmethod
    def _open(self, mmap: bool) -> None:
        """Open the engine's files in `self.folder` (only called when the index holds documents)."""

    @abstractmethod
    def top_rows(self, terms: list[str], k: int, allowed_rows: np.ndarray | None, excluded_rows: np.ndarray | None
                 ) -> tuple[np.ndarray, np.ndarray]:
        """(scores, rows) of the best k rows with a score > 0 for these query terms (a repeated term counts each
        time), best first, ties by row; `allowed_rows`: only these; `excluded_rows`: never these (both `rows_of`'s)."""

    @abstractmethod
    def doc_freq(self, term: str) -> int:
        """How many documents hold `term` (0: unknown)."""

    # -- hybrid's bounded lexical leg (`indexer.runtime.bounded_leg`): an engine that can score a set of documents
    # without reading every posting says so; one that scores every document anyway (bm25s) keeps the exact leg.
    BOUNDED = False
    SELECTIVE_DF: float | None = None  # the engine's own `bounded_leg.SELECTIVE_DF` (None: the seam's)
    # the engine's own threshold for an unfiltered leg, where lower than the searcher's `bounded_from` (None: that one)
    BOUNDED_FROM: int | None = None

    def selective_top_rows(self, terms: list[str], selective: list[str], k: int, allowed_rows: np.ndarray | None,
                           excluded_rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """`top_rows` among the rows holding a term of `selective`, each scored with every term of `terms`."""
        raise NotImplementedError(f"the {self.info.engine} engine has no bounded lexical leg")

    def score_rows(self, terms: list[str], rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(scores, rows) of those of `rows` (sorted, unique) sharing a term with `terms`, by BM25, in any order."""
        raise NotImplementedError(f"the {self.info.engine} engine has no bounded lexical leg")

    # -- a filter used again (`IndexVersion.match`): an engine that can make its searches among the same rows cheaper
    # prepares them, off the request path, for as long as that rows array lives; the answers do not change.
    def prepare_rows(self, rows: np.ndarray) -> bool:  # prepares searches among this very array: True once done
        return False

    def prepared(self, rows: np.ndarray) -> bool:
        """Whether searches among `rows` (this very array) are prepared: an exact answer then costs less than
        hybrid's bounded leg (`bounded_leg.begin` takes the exact one)."""
        return False

    # -- shared -----------------------------------------------------------------------------------------------------
    @property
    def ntotal(self) -> int:
        return int(self.fids.size)

    def rows_of(self, fids: np.ndarray) -> np.ndarray:
        """The rows of those FAISS ids that this index holds (ascending). Where its ids are one run (0..n-1, or all
        assigned), a row is its id's offset: no binary search over them (docs/decisions.md#a-filters-postings)."""
        fids = np.asarray(fids, dtype=np.int64)
        n = len(self.fids)
        if not n or not len(fids):
            return np.zeros(0, np.int64)
        first = int(self.fids[0])
        if int(self.fids[-1]) - first == n - 1:  # ascending and unique: one run of ids
            rows = fids - first
            rows = rows[(rows >= 0) & (rows < n)]
        else:
            rows = np.minimum(np.searchsorted(self.fids, fids), n - 1)
            rows = rows[self.fids[rows] == fids]
        return ascending_unique(rows)

    def search(self, query: str, k: int, *, allowed: np.ndarray | None = None, excluded: np.ndarray | None = None,
               allowed_rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(scores, FAISS ids) of the best k documents with a score > 0, best first (fewer when fewer match), ties
        by FAISS id; `allowed`: only these FAISS ids (a filter's matches), or `allowed_rows`, their `rows_of` found
        once for many searches; `excluded`: never these (tombstones)."""
        if k <= 0 or not self.fids.size:
            return np.zeros(0, np.float32), np.zeros(0, np.int64)
        terms = self.analyzer.terms(query)
        if allowed is not None:
            allowed_rows = self.rows_of(allowed)
        if not terms or (allowed_rows is not None and not allowed_rows.size):
            return np.zeros(0, np.float32), np.zeros(0, np.int64)
        excluded_rows = self.rows_of(excluded) if excluded is not None and len(excluded) else None
        scores, rows = self.top_rows(terms, k, allowed_rows, excluded_rows)
        return scores.astype(np.float32, copy=False), np.asarray(self.fids[rows], dtype=np.int64)

    def weights(self, text: str) -> dict[str, float]:
        """A new document's term → BM25 weight under this index's statistics (N, avgdl, document frequencies): how
        `LexicalOverlay` scores written documents until `indexer compact` indexes them with the rest. A term this
        index has never seen counts as in one document. An index of no documents (an empty first version) has no
        statistics to lend: each term counts as in one document of one, the text's own length as the average (no
        length normalisation), so texts rank by the query terms they hold until a compaction indexes them."""
        terms = self.analyzer.terms(text)
        tf: dict[str, int] = {}
        for t in terms:
            tf[t] = tf.get(t, 0) + 1
        n = max(self.stats.n_docs, 1)
        stats = self.stats if self.stats.avgdl > 0 else Stats(n, float(len(terms)))
        out = {}
        for t, f in tf.items():
            df = self.doc_freq(t) if self.fids.size else 0
            out[t] = self.SCORE_SCALE * bm25_weight(bm25_idf(df or 1, n), f, len(terms), stats, self.info.k1,
                                                    self.info.b)
        return out
