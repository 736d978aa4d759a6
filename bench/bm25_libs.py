"""BM25 over a BEIR folder with two well-kept libraries, measured side by side: bm25s (+ PyStemmer) and tantivy's
Python bindings. Used by `bench/beir.py` (its `bm25` mode is `Bm25sRetriever`; `--bm25-libs` runs `compare`).

    python bench/bm25_libs.py /work/shared/data/beir/scifact [--rounds 2] [--max-queries 1000]

Both analyse English the same way where the library allows it: lowercase, English stopwords, English Snowball
stemmer. bm25s scores Lucene's BM25 with Anserini's BEIR settings (k1 0.9, b 0.4); tantivy's Python bindings fix
k1 1.2, b 0.75 (not configurable there). Each library runs in its own process (so peak RSS is its own: the
corpus read plus its index; `index_rss_mib` is the resident growth over the build, what the index keeps — the
peak is only meaningful when the parent process is small, as Linux carries ru_maxrss across exec), rounds
interleaved (bm25s, tantivy, bm25s, …); p50 is one query at a time, analysis included, after the build. tantivy
keeps its index in RAM here (no path), as bm25s does.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import sys
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

K1, B = 0.9, 0.4  # Anserini's BEIR BM25 regressions


class Bm25sRetriever:
    """bm25s with PyStemmer's English stemmer and bm25s's English stopwords; ids are the corpus's strings."""

    def __init__(self, doc_ids: list[str], texts: list[str]) -> None:
        import bm25s
        import Stemmer

        self._bm25s = bm25s
        self.stemmer = Stemmer.Stemmer("english")
        self.ids = doc_ids
        tokens = bm25s.tokenize(texts, stopwords="en", stemmer=self.stemmer, show_progress=False)
        self.model = bm25s.BM25(method="lucene", k1=K1, b=B)
        self.model.index(tokens, show_progress=False)

    def search_many(self, queries: list[str], k: int) -> list[list[tuple[str, float]]]:
        return [self.search(q, k) for q in queries]

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        """One query: bm25s's scores for every document, top k among the non-zero ones. (`retrieve` partitions
        the whole mostly-zero score array: numpy's argpartition took ~176 ms per query on 172k documents here.)"""
        import numpy as np

        tokens = self._bm25s.tokenize([query], stopwords="en", stemmer=self.stemmer, show_progress=False,
                                      return_ids=False)[0]
        if not tokens:
            return []
        scores = self.model.get_scores(tokens)
        nz = np.flatnonzero(scores > 0)
        if len(nz) > k:
            nz = nz[np.argpartition(-scores[nz], k - 1)[:k]]
        order = nz[np.argsort(-scores[nz], kind="stable")]
        return [(self.ids[d], float(scores[d])) for d in order]


class TantivyRetriever:
    """tantivy, in RAM, one text field analysed by simple tokenizer + lowercase + English stopwords + English
    stemmer; a query is the OR of its analysed terms (no query-syntax parsing, so any text is a valid query)."""

    def __init__(self, doc_ids: list[str], texts: list[str]) -> None:
        import tantivy as tv

        self.tv = tv
        analyzer = (tv.TextAnalyzerBuilder(tv.Tokenizer.simple()).filter(tv.Filter.remove_long(40))
                    .filter(tv.Filter.lowercase()).filter(tv.Filter.stopword("english"))
                    .filter(tv.Filter.stemmer("english")).build())
        sb = tv.SchemaBuilder()
        sb.add_text_field("body", stored=False, tokenizer_name="en_bench")
        sb.add_integer_field("row", stored=True, indexed=False)
        self.schema = sb.build()
        self.index = tv.Index(self.schema)
        self.index.register_tokenizer("en_bench", analyzer)
        self.analyzer = analyzer
        writer = self.index.writer(heap_size=200_000_000, num_threads=1)
        for row, text in enumerate(texts):
            writer.add_document(tv.Document(body=text, row=row))
        writer.commit()
        writer.wait_merging_threads()
        self.index.reload()
        self.searcher = self.index.searcher()
        self.ids = doc_ids

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        tv = self.tv
        terms = list(dict.fromkeys(self.analyzer.analyze(query)))
        if not terms:
            return []
        q = tv.Query.boolean_query([(tv.Occur.Should, tv.Query.term_query(self.schema, "body", t)) for t in terms])
        res = self.searcher.search(q, limit=k)
        return [(self.ids[self._row(addr)], float(score)) for score, addr in res.hits]

    def _row(self, addr: object) -> int:
        return self.searcher.doc(addr)["row"][0]  # type: ignore[index]  (a stored-field fetch per hit, counted in p50)

    def search_many(self, queries: list[str], k: int) -> list[list[tuple[str, float]]]:
        return [self.search(q, k) for q in queries]


LIBRARIES = {"bm25s": Bm25sRetriever, "tantivy": TantivyRetriever}


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rss_mib() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def _measure(library: str, folder: str, max_queries: int | None, out: mp.Queue) -> None:
    from bench.beir import DEPTH, drop_identical, load_dataset, mean_pct, per_query_metrics

    ds = load_dataset(Path(folder))
    before = _rss_mib()
    t0 = time.perf_counter()
    retr = LIBRARIES[library](ds.doc_ids, ds.doc_texts)
    build_s = time.perf_counter() - t0
    held = _rss_mib() - before  # what the built index keeps resident (the peak can be inherited across exec)
    n = min(len(ds.query_texts), max_queries or len(ds.query_texts))
    lat, run = [], []
    for q in ds.query_texts[:n]:
        t1 = time.perf_counter()
        hits = retr.search(q, DEPTH + 1)
        lat.append((time.perf_counter() - t1) * 1000)
        run.append(hits)
    run = drop_identical(run, ds.query_ids[:n])
    sub = ds.__class__(ds.name, ds.folder, ds.doc_ids, ds.doc_texts, ds.query_ids[:n], ds.query_texts[:n],
                       ds.qrels[:n])
    ndcg = mean_pct(per_query_metrics(run, sub))["ndcg_at_10"]
    out.put({"dataset": ds.name, "library": library, "build_s": round(build_s, 2),
             "index_rss_mib": round(held, 1), "peak_rss_mib": round(_peak_rss_mib(), 1),
             "rss_before_build_mib": round(before, 1),
             "query_p50_ms": round(float(np.percentile(lat, 50)), 3), "queries": n, "ndcg_at_10": ndcg})


def compare(folder: Path, rounds: int = 2, max_queries: int | None = 1000) -> list[dict[str, object]]:
    """Each library `rounds` times in a fresh process, interleaved; per library the median of its rounds."""
    ctx = mp.get_context("spawn")
    got: dict[str, list[dict[str, object]]] = {k: [] for k in LIBRARIES}
    for r in range(rounds):
        for lib in LIBRARIES:
            q: mp.Queue = ctx.Queue()
            proc = ctx.Process(target=_measure, args=(lib, str(folder), max_queries, q))
            proc.start()
            row = q.get()
            proc.join()
            print(f"bm25_libs: round {r + 1}/{rounds} {lib}: {row}", file=sys.stderr, flush=True)
            got[lib].append(row)
    rows = []
    for rs in got.values():
        row = dict(rs[0])
        for key in ("build_s", "index_rss_mib", "peak_rss_mib", "query_p50_ms"):
            row[key] = round(float(np.median([x[key] for x in rs])), 3)
        row["rounds"] = len(rs)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("folder", type=Path, help="a prepared BEIR folder (bench/beir_data.py)")
    p.add_argument("--rounds", type=int, default=2, help="interleaved rounds per library (default 2)")
    p.add_argument("--max-queries", type=int, default=1000, help="queries timed and scored (default 1000)")
    args = p.parse_args(argv)
    if not (args.folder / "corpus.jsonl").is_file():
        p.error(f"{args.folder} has no corpus.jsonl")
    print(json.dumps(compare(args.folder, args.rounds, args.max_queries), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
