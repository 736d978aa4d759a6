"""The PISA lexical engine (the only module that loads PISA): a compressed inverted index whose top k prunes
inside the engine (WAND over per-term score bounds; block-max WAND, MaxScore and block-max MaxScore measured), in C++.

    <version>/lexical/      PISA's files (fwd.termlex: the sorted vocabulary; fwd.doclex: each PISA document's
                            name, its row: PISA's documents are the rows in `document_order`; quantized.q0.bmw.64:
                            the per-term and per-block score bounds; quantized.q0.bmw.64.block_simdbp: the
                            postings), fwd.terms (the vocabulary as text), df.npy (each term's document frequency),
                            forward.*.npy (each row's terms and exact BM25 weights: `forward_index`) and pisa.json (the
                            quantisation scale and the order), beside the seam's rows.npy and stats.json

PISA comes from the `pyterrier-pisa` wheel (manylinux, no JVM: only its compiled `_pisathon` module is loaded, not
PyTerrier). Its own BM25 uses Robertson's idf, log((N - df + 0.5) / (df + 0.5)) clamped at 0, which differs from
Lucene's for common terms; so Strata computes Lucene's BM25 weight of every posting at build time, at any k1/b (like
bm25s), and indexes them as integer impacts (PISA's `quantized` scorer: the weight times `scale`, `QUANT_BITS` bits)
— the score of a document is the sum of its query terms' impacts, its top k pruned by `ALGORITHM`.

**Exact answers.** Quantisation moves each term's weight by at most 1/scale. PISA's hits are candidates: each is
rescored exactly from the forward index (the float32 weights, summed in float64, as bm25s scores), and the top k is
taken once the k-th exact score exceeds the last candidate's quantised score plus the query's largest quantisation
error (no document PISA did not return can pass it); otherwise PISA is asked 4x deeper. Ties go by row, scores are
Lucene's BM25 (`SCORE_SCALE` 1): the same answers as bm25s.

**Document order.** PISA's document ids are the rows sorted by their most common terms (`document_order`): the
common terms' postings cluster, so WAND skips whole runs of them and fewer of their blocks are decoded
(docs/decisions.md#pisas-document-order). PISA names each document by its row, so hits come
back as rows. Exact answers do not depend on the order; the bounded leg's can only in which of the documents tied
at its depth PISA keeps (the first ids of a tie).

**Filters.** PISA has none. A filter used again, matching at most `POSTINGS_SHARE` of the documents, gets its own
postings (`prepare_rows`: its rows' forward entries inverted, `forward_index.RowPostings`), and its searches read
only their terms' postings among its rows, exactly (hybrid's leg too). Before that, a filter of at most
`FORWARD_MAX` rows is scored from the forward index (its rows' terms read: exact, ~8 entries a document) where PISA
would be read deeper than `OVERFETCH_SHARE` of its rows; otherwise PISA's top hits are over-fetched deep enough that
k of them match at its selectivity (as the tantivy engine does), deeper until k match or every scoring document was
read. Tombstones are skipped the same way.

**Hybrid's lexical leg** (`bounded_leg`, where a query reads more than `BOUNDED_FROM` postings) is pruned inside
PISA and read once: `selective_top_rows` asks PISA for its top `PRUNED_DEPTH` (at least k) by `ALGORITHM` over the
selective terms (`SELECTIVE_DF` 1.0: every term), each weighted by its count in the query, and scores those rows, and
later the dense candidates, exactly over every term from the forward index, without the exact path's certificate
(which reads 4x deeper whenever the k-th place ties). A filter of at most `PRUNED_DEPTH` rows is read whole (those
holding a selective term); a wider one and tombstones are over-fetched as `_pruned` does. Approximate: what it may
lose is the order of ties and of scores within the quantisation error at the k-th place (measured:
docs/decisions.md#pisa-and-hybrids-bounded-leg).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import math
import os
import sys
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import numpy as np

from indexer.runtime.forward_index import ForwardIndex, Query, RowPostings, RowPostingsCache
from indexer.runtime.lexical import LexicalError, LexicalIndex
from indexer.runtime.manifest import LexicalInfo
from indexer.runtime.rowsets import in_sorted
from indexer.runtime.topk import top_k_rows

PACKAGE = "pyterrier_pisa"  # the wheel that ships PISA's compiled module
ENCODING = "block_simdbp"  # PISA's postings codec (SIMD binary packing, 128-posting blocks)
BLOCK = 64  # postings per block of the block-max bounds (PISA's default)
# PISA's query algorithm: WAND. In `document_order` it beats block-max WAND, whose per-block checks cost more than
# they skip on short questions, and MaxScore; in row order MaxScore was the faster (docs/decisions.md#pisas-document-
# order: at 10M mean / p99 against block-max WAND, exact top 10 0.86x / 0.74x, hybrid's leg 0.89x / 0.80x)
ALGORITHM = "wand"
QUANT_BITS = 16  # impacts up to 2**16 - 1: a sum of 256 of them is still exact in PISA's float32
WAND_FILE = f"quantized.q0.bmw.{BLOCK}"
INDEX_FILE = f"{WAND_FILE}.{ENCODING}"
# A filter matching at most FORWARD_MAX rows is scored from the forward index, unless PISA's over-fetch for it reads
# at most OVERFETCH_SHARE of its row count (10M, 1 % filter, block-max WAND: top 10, a read of 3,100, p50 / p99 6.7 /
# 15 ms against the forward index's 15 / 34; top 100, a read of 15,500, 18 / 26 against 15 / 30)
FORWARD_MAX = 100_000
OVERFETCH_SHARE = 0.1
# A filter used again, of at most this share of the documents, gets its own postings (`prepare_rows`): at 10M, p50
# 1 % 0.4 ms, 13 for the bounded leg; 10 % 3.7, no better than its 4.0 (docs/decisions.md#a-filters-postings)
POSTINGS_SHARE = 0.05
POSTINGS_BYTES = 256 << 20  # the engine's `RowPostingsCache` (one filter's postings: at most a quarter of it)
WIDE_SIGMAS = 5  # a wider filter: read deep enough for k + 5·sqrt(k) + 5 matches on average (see lexical_tantivy)
THREADS = 2  # PISA releases the GIL only when asked for more than one thread (one query takes one of them)
# Hybrid's bounded leg: PISA's top this many (at least the leg's k), no deeper (docs/decisions.md#pisa-and-hybrids-
# bounded-leg: the exact leg's certificate read 4x deeper for most questions, for ties at the k-th place)
PRUNED_DEPTH = 100
# PISA's document order: by each document's 5 most common terms (`document_order`). At 10M scale-corpus documents,
# MaxScore on both, hybrid's leg 0.58x the mean time, 0.59x the p99 of row order's; 5 keys against 2, 3 and 10 and a
# min-hash order measured (docs/decisions.md#pisas-document-order)
ORDER_KEYS = 5

_module: ModuleType | None = None
if importlib.util.find_spec(PACKAGE) is None:  # found, not imported: the seam then says the engine is not installed
    raise ImportError(f"no module named {PACKAGE!r} (pip install pyterrier-pisa)")


def pisa() -> ModuleType:
    """PISA's compiled module, loaded from the installed wheel without importing PyTerrier (which the package's
    `__init__` does: pandas, a JVM bridge and more, none of it needed here)."""
    global _module
    if _module is None:
        spec = importlib.util.find_spec(PACKAGE)
        places = list(spec.submodule_search_locations or ()) if spec else []
        found = sorted(Path(places[0]).glob("_pisathon*.so")) if places else []
        if not found:
            raise ImportError(f"{PACKAGE} has no compiled _pisathon module")
        loader = importlib.machinery.ExtensionFileLoader(f"{PACKAGE}._pisathon", str(found[0]))
        module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))  # type: ignore[arg-type]
        loader.exec_module(module)
        _module = module
    return _module


def _package_version() -> str:
    from importlib.metadata import version

    return f"pyterrier-pisa {version('pyterrier-pisa')}"


class Engine(LexicalIndex):
    """Lucene's BM25 at the manifest's k1/b, as quantised impacts in PISA, its top k pruned inside PISA."""

    BOUNDED = True  # hybrid's bounded leg: `selective_top_rows`, pruned inside PISA
    SELECTIVE_DF = 1.0  # every term: leaving the common ones out of PISA's query saved little, lost agreement
    # Unfiltered, the bounded leg at every size: PISA's top 100 read once costs about half the exact leg's top 100
    # read again deeper until certain, and differs from it only within the quantisation error at the 100th place
    # (docs/decisions.md#pisas-bounded-leg-at-every-size). A filter keeps the threshold: the bounded leg reads PISA
    # deeper by the filter's selectivity, where the exact one scores the filter's rows from the forward index.
    BOUNDED_FROM = 0

    @staticmethod
    def version() -> str:
        return _package_version()

    @staticmethod
    def build(out: Path, terms: Iterable[list[str]], info: LexicalInfo) -> int:
        vocab: dict[str, int] = {}
        ids, lens = array("i"), array("I")
        for doc in terms:  # streamed: 4 bytes a term kept, not the term lists
            ids.extend([vocab.setdefault(t, len(vocab)) for t in doc])
            lens.append(len(doc))
        n, v = len(lens), len(vocab)
        dl = np.frombuffer(lens, np.uint32).astype(np.int64)
        # (row, term) pairs in row order, each with its frequency in the row
        key, tf = np.unique(np.repeat(np.arange(n, dtype=np.int64), dl) * max(v, 1) + np.frombuffer(ids, np.int32),
                            return_counts=True)
        del ids
        words = sorted(vocab)  # PISA finds a term by binary search over the sorted vocabulary
        rank = np.empty(v, np.int32)
        rank[np.fromiter((vocab[w] for w in words), np.int64, count=v)] = np.arange(v, dtype=np.int32)
        del vocab
        _write(out, words, key // max(v, 1), rank[key % max(v, 1)], tf, dl, info)
        return v

    def _open(self, mmap: bool) -> None:  # PISA maps its files; the forward index is always memory-mapped
        meta = json.loads((self.folder / "pisa.json").read_text())
        self.scale = float(meta["scale"])
        self.words: list[str] = []
        self.vocab: dict[str, int] = {}
        self.df = np.zeros(0, np.int64)
        self.forward = ForwardIndex(self.folder)
        self.postings = RowPostingsCache(POSTINGS_BYTES)
        if not meta["terms"]:
            return
        self.words = (self.folder / "fwd.terms").read_text().split("\n")[:-1]
        self.vocab = {w: i for i, w in enumerate(self.words)}
        self.df = np.load(self.folder / "df.npy")
        for name in ("fwd.termlex", "fwd.doclex", WAND_FILE, INDEX_FILE):  # PISA would try to rebuild a missing one
            if not (self.folder / name).is_file() or not (self.folder / name).stat().st_size:
                raise LexicalError(f"{self.folder / name} is missing or empty")
        if len(self.vocab) != int(meta["terms"]) or len(self.df) != len(self.vocab):
            raise LexicalError(f"{self.folder}: the vocabulary does not match pisa.json")
        self.context = pisa().RetrievalContext()
        pisa().prepare_index(self.context, str(self.folder), ENCODING, "quantized", "", BLOCK, 0)

    def doc_freq(self, term: str) -> int:
        tid = self.vocab.get(term)
        return 0 if tid is None else int(self.df[tid])

    def _query(self, terms: list[str]) -> dict[int, int]:
        """Term id → how many times the query holds it (known terms only)."""
        counts = Counter(self.vocab[t] for t in terms if t in self.vocab)
        return dict(counts)

    def _candidates(self, query: dict[int, int], words: dict[str, float], limit: int, algorithm: str | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
        """PISA's top `limit` rows by quantised score (`algorithm`, default `ALGORITHM`): (quantised scores, rows),
        best first."""
        algorithm = algorithm or ALGORITHM
        qidx, ranks = np.empty(limit, np.int32), np.empty(limit, np.int32)
        names, scores = np.empty(limit, object), np.empty(limit, np.float32)
        got = pisa().retrieve(self.context, algorithm, [(0, words)], k=limit, threads=THREADS, pretokenised=True,
                              query_weighted=1, result_qidxs=qidx, result_docnos=names, result_ranks=ranks,
                              result_scores=scores)
        return scores[:got] / self.scale, _rows(names[:got])

    def score_rows(self, terms: list[str], rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Exact BM25 of `rows` (sorted) from the forward index: those sharing a term with the query."""
        return self.forward.score_rows(Query.of(self._query(terms)), np.asarray(rows, np.int64))

    def prepare_rows(self, rows: np.ndarray) -> bool:
        """A filter used again: its rows' postings (`RowPostings`), if it matches at most `POSTINGS_SHARE` of the
        documents and they fit a quarter of the cache, kept while `rows` lives; its searches then read only their
        terms' postings among its rows, exactly."""
        if not self.ntotal:  # nothing was opened: no search reads a filter's rows
            return False
        if self.postings.get(rows) is not None:
            return True
        if len(rows) > POSTINGS_SHARE * self.ntotal or self.forward.n_entries(rows) * 8 > POSTINGS_BYTES // 4:
            return False
        self.postings.put(rows, RowPostings.build(self.forward, rows))
        return self.postings.get(rows) is not None

    def prepared(self, rows: np.ndarray) -> bool:
        return self.ntotal > 0 and self.postings.get(rows) is not None

    def selective_top_rows(self, terms: list[str], selective: list[str], k: int, allowed_rows: np.ndarray | None,
                           excluded_rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """The bounded leg's candidates, pruned inside PISA: its top `PRUNED_DEPTH` by `ALGORITHM` over the selective
        terms alone (read deeper at a filter's selectivity, and past the tombstones), or, for a filter of at most
        `PRUNED_DEPTH` rows, those of its rows holding a selective term; each scored exactly over every term."""
        keep = set(selective)  # each weighted by how often the query holds it, as the exact query weighs it
        chosen = {t: c for t, c in self._query(terms).items() if self.words[t] in keep}
        if not chosen:
            return np.zeros(0, np.float32), np.zeros(0, np.int64)
        if allowed_rows is not None and len(allowed_rows) <= PRUNED_DEPTH:
            _, rows = self.score_rows(selective, allowed_rows)  # those of the filter's rows holding one
        else:
            limit = max(k, PRUNED_DEPTH) + (0 if excluded_rows is None else len(excluded_rows))
            if allowed_rows is not None:
                limit = math.ceil(limit * self.ntotal / len(allowed_rows))
            _, rows = self._candidates(chosen, {self.words[t]: float(c) for t, c in chosen.items()},
                                       min(limit, self.ntotal))
            rows.sort()
            if allowed_rows is not None:
                rows = rows[in_sorted(rows, allowed_rows)]
        if excluded_rows is not None:
            rows = rows[~in_sorted(rows, excluded_rows)]
        return top_k_rows(*self.score_rows(terms, rows), k)

    def top_rows(self, terms: list[str], k: int, allowed_rows: np.ndarray | None, excluded_rows: np.ndarray | None
                 ) -> tuple[np.ndarray, np.ndarray]:
        query = self._query(terms)
        if not query:
            return np.zeros(0, np.float32), np.zeros(0, np.int64)
        if (postings := self.postings.get(allowed_rows)) is not None:
            return top_k_rows(*postings.score(Query.of(query), excluded_rows), k)
        n_excl = 0 if excluded_rows is None else len(excluded_rows)
        if allowed_rows is not None and len(allowed_rows) <= FORWARD_MAX and \
                self._depth(k, n_excl, allowed_rows) > OVERFETCH_SHARE * len(allowed_rows):
            rows = allowed_rows
            if excluded_rows is not None:
                rows = rows[~in_sorted(rows, excluded_rows)]
            return top_k_rows(*self.score_rows(terms, rows), k)
        return self._pruned(terms, query, k, allowed_rows, excluded_rows)

    def _depth(self, k: int, n_excl: int, allowed_rows: np.ndarray) -> int:
        """PISA's first read for a filter: deep enough that k of its hits match, at the filter's selectivity."""
        want = k + n_excl + WIDE_SIGMAS * math.sqrt(k + n_excl) + 5
        return math.ceil(want * self.ntotal / max(len(allowed_rows), 1)) + 1

    def _pruned(self, terms: list[str], query: dict[int, int], k: int, allowed_rows: np.ndarray | None,
                excluded_rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """PISA's candidates rescored exactly, read deeper until the top k among the kept ones is certain."""
        words = {self.words[t]: float(c) for t, c in query.items()}
        error = sum(query.values()) / self.scale * (1 + 1e-6)  # the largest quantisation error of a document
        n_excl = 0 if excluded_rows is None else len(excluded_rows)
        limit = k + n_excl + 1 if allowed_rows is None else self._depth(k, n_excl, allowed_rows)
        while True:
            limit = min(self.ntotal, limit)
            quantised, rows = self._candidates(query, words, limit)
            keep = np.ones(len(rows), bool)
            if allowed_rows is not None:
                keep &= in_sorted(rows, allowed_rows)
            if excluded_rows is not None:
                keep &= ~in_sorted(rows, excluded_rows)
            kept = rows[keep]
            kept.sort()
            scores, kept = self.score_rows(terms, kept)
            best_s, best_r = top_k_rows(scores, kept, k)
            exhausted = len(rows) < limit or limit >= self.ntotal
            if exhausted or (len(best_s) >= k and float(best_s[-1]) > float(quantised[-1]) + error):
                return best_s, best_r
            limit *= 4


def document_order(rows: np.ndarray, tids: np.ndarray, df: np.ndarray, n: int, keys: int | None = None
                   ) -> np.ndarray:
    """The rows in PISA's document order: sorted by their `keys` (`ORDER_KEYS`) most common terms, compared as
    tuples (each row's terms ranked by document frequency, the most common first; a row with fewer terms first among
    those it prefixes), ties by row. `rows` and `tids` are the (row, term) pairs in row order, `df` each term's
    document frequency. Documents sharing common terms get neighbouring ids, so the common terms' postings cluster:
    fewer blocks decoded, tighter block bounds to skip by (docs/decisions.md#pisas-document-order)."""
    keys = ORDER_KEYS if keys is None else keys
    if not n or keys <= 0:  # 0 keys: row order
        return np.arange(n, dtype=np.int64)
    v = len(df)
    common = np.empty(v, np.int64)
    common[np.argsort(-df, kind="stable")] = np.arange(v)  # 0: the most common term
    ranked = common[tids]
    within = np.argsort(np.asarray(rows, np.int64) * max(v, 1) + ranked)  # by row, its most common terms first
    ranked = ranked[within]
    del within
    lens = np.bincount(rows, minlength=n)
    starts = np.cumsum(lens) - lens
    columns = []
    for j in range(keys):
        column = np.full(n, -1, np.int64)  # past a row's last term: before any term
        has = lens > j
        column[has] = ranked[starts[has] + j]
        columns.append(column)
    return np.lexsort(columns[::-1]).astype(np.int64)  # stable: ties keep row order


def _rows(names: np.ndarray) -> np.ndarray:
    """PISA's document names (the rows, as text) as rows: parsed in one pass, not one `int` per name."""
    if not len(names):
        return np.zeros(0, np.int64)
    return np.fromstring(" ".join(names.tolist()), dtype=np.int64, sep=" ")


@contextmanager
def _quiet() -> Iterator[None]:
    """PISA logs each step's progress to the process's stdout and stderr (C++, not Python's logging): kept out of
    the build's own output (builds run in the CLI or a child process, never in the API's)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (null, *saved):
            os.close(fd)


def _write(out: Path, words: list[str], rows: np.ndarray, tids: np.ndarray, tf: np.ndarray, dl: np.ndarray,
           info: LexicalInfo) -> None:
    """Lucene's BM25 weight of every (row, term) pair: the forward index (exact float32 weights, row order) and
    PISA's index (integer impacts, term order), with its block-max bounds built and its postings compressed."""
    n, v = len(dl), len(words)
    df = np.bincount(tids, minlength=v).astype(np.int64)
    avgdl = dl.sum() / n if n else 0.0
    idf = np.log1p((n - df + 0.5) / (df + 0.5))
    weights = (idf[tids] * tf / (tf + info.k1 * ((1 - info.b) + info.b * dl[rows] / max(avgdl, 1e-12)))
               ).astype(np.float32)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))]).astype(np.int64)
    ForwardIndex.save(out, indptr, tids, weights)
    scale = (2**QUANT_BITS - 1) / float(weights.max()) if v else 0.0
    (out / "pisa.json").write_text(json.dumps({"scale": scale, "terms": v, "order": f"common terms ({ORDER_KEYS})"}))
    if not v:  # no document has a term: nothing for PISA to index, nothing will match
        return
    np.save(out / "df.npy", df)
    (out / "fwd.terms").write_text("".join(f"{w}\n" for w in words))
    lay_out(out, rows, tids, weights, df, dl, scale)


def lay_out(out: Path, rows: np.ndarray, tids: np.ndarray, weights: np.ndarray, df: np.ndarray, dl: np.ndarray,
            scale: float) -> None:
    """PISA's own files in `out` (beside fwd.terms) from the (row, term, weight) triples in row order: the
    documents in `document_order`, each named by its row, the weights as integer impacts (weight × `scale`), the
    block-max bounds built and the postings compressed."""
    n, v = len(dl), len(df)
    impacts = np.maximum(1, np.rint(weights * scale)).astype(np.uint32)  # a weight > 0 stays a hit
    by_docid = document_order(rows, tids, df, n)  # PISA's document d is row by_docid[d]
    docid = np.empty(n, np.int64)
    docid[by_docid] = np.arange(n)
    docids = docid[rows]
    order = np.argsort(tids.astype(np.int64) * n + docids)  # term order, document ids ascending within each term
    heads = np.cumsum(df) - df + np.arange(v)  # where each term's list starts: its length, then its entries
    is_head = np.zeros(v + len(order), bool)
    is_head[heads] = True
    for name, values, first in (("docs", docids, [1, n]), ("freqs", impacts, [])):
        lists = np.empty(v + len(order), np.uint32)
        lists[heads] = df
        lists[~is_head] = values[order]
        with open(out / f"inv.{name}", "wb") as f:
            np.asarray(first, np.uint32).tofile(f)
            lists.tofile(f)
    del order, docids, is_head
    np.concatenate([[n], dl[by_docid]]).astype(np.uint32).tofile(out / "inv.sizes")
    (out / "fwd.documents").write_text("".join(f"{r}\n" for r in by_docid.tolist()))  # a document's name: its row
    lib = pisa()
    with _quiet():
        lib.build_binlex(str(out / "fwd.terms"), str(out / "fwd.termlex"))
        lib.build_binlex(str(out / "fwd.documents"), str(out / "fwd.doclex"))
        lib.prepare_index(lib.RetrievalContext(), str(out), ENCODING, "quantized", "", BLOCK, 0)  # bounds, compression
    for name in ("inv.docs", "inv.freqs", "inv.sizes", "fwd.documents"):  # what PISA built them from
        (out / name).unlink()
