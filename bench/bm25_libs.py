"""BM25 libraries side by side. Over a BEIR folder, each in its own process, rounds interleaved: bm25s (+ PyStemmer:
`Bm25sRetriever` is `bench/beir.py`'s `bm25` mode) and Strata's tantivy and pisa engines:

    python bench/bm25_libs.py /work/shared/data/beir/scifact [--rounds 2] [--max-queries 1000]

p50 is one query at a time after the build; `index_rss_mib` the resident growth over the build. At scale:

    nice python -m bench.bm25_libs --scale 1000000 [--queries 1000]

builds the scale corpus's (`bench/scale_corpus.py`) lexical index with each of Strata's engines at k1 1.2, b 0.75
and times held-out Quora questions (rows >= 300,000) as top-10 queries, with and without a 1 % filter, engines
interleaved per query: wall and process CPU p50/p99, each engine's top 10 against bm25s's (ids in order; overlap).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

K1, B = 0.9, 0.4  # Anserini's BEIR BM25 regressions


class _Retriever:
    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        raise NotImplementedError

    def search_many(self, queries: list[str], k: int) -> list[list[tuple[str, float]]]:
        return [self.search(q, k) for q in queries]


class Bm25sRetriever(_Retriever):
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

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        """One query: bm25s's scores for every document, top k among the non-zero ones. (`retrieve` partitions
        the whole mostly-zero score array: numpy's argpartition took ~176 ms per query on 172k documents here.)"""
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


class EngineRetriever(_Retriever):
    """One of Strata's lexical engines (`indexer.runtime.lexical`: its analysis; K1/B where the engine takes them),
    built in a temporary folder; ids are the corpus's strings."""

    def __init__(self, engine: str, doc_ids: list[str], texts: list[str]) -> None:
        from indexer.runtime.lexical import build_lexical, lexical_info, open_lexical

        self.ids, self._dir = doc_ids, tempfile.TemporaryDirectory()
        info = build_lexical(Path(self._dir.name), enumerate(texts), lexical_info(engine=engine, k1=K1, b=B))
        self.index = open_lexical(Path(self._dir.name), info)

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        scores, rows = self.index.search(query, k)
        return [(self.ids[r], float(s)) for s, r in zip(scores.tolist(), rows.tolist(), strict=True)]


LIBRARIES = {"bm25s": Bm25sRetriever, **{e: partial(EngineRetriever, e) for e in ("tantivy", "pisa")}}


def _measure(library: str, folder: str, max_queries: int | None, out: mp.Queue) -> None:
    from bench.beir import DEPTH, drop_identical, load_dataset, mean_pct, per_query_metrics
    from bench.common import rss

    ds = load_dataset(Path(folder))
    before = rss(os.getpid()).total / 2**20
    t0 = time.perf_counter()
    retr = LIBRARIES[library](ds.doc_ids, ds.doc_texts)
    build_s = time.perf_counter() - t0
    # what the built index keeps resident (the peak can be inherited across exec)
    held = rss(os.getpid()).total / 2**20 - before
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
             "index_rss_mib": round(held, 1), "rss_before_build_mib": round(before, 1),
             "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
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


def scale(n: int, n_queries: int, engines: list[str], work: Path) -> str:
    """Strata's lexical engines on the `n`-document scale corpus (see the module docstring): a markdown report."""
    from bench.common import load, log, pct
    from bench.scale_corpus import grown_docs, held_out
    from indexer.runtime import lexical_pisa
    from indexer.runtime.lexical import build_lexical, lexical_info, open_lexical
    from indexer.runtime.paths import data_dir

    tsv = data_dir() / "quora_duplicate_questions.partial.tsv.gz"
    start_load, texts = load(), list(grown_docs(tsv, n))  # the scale corpus's texts (no vectors: no encoder)
    queries = held_out(tsv, n_queries)[0]
    allowed = np.flatnonzero(np.random.default_rng(5).random(n) < 0.01)
    built, lines = {}, [f"{n:,} documents, {len(queries)} held-out Quora questions, k=10; load before {start_load}",
                        "", "| engine | build CPU s (wall) | disk MB | p50 / p99 ms | CPU p50 / p99 ms | 1 % filter "
                        "p50 / p99 ms | top 10 = bm25s's | overlap@10 |", "|---|---|---|---|---|---|---|---|"]
    for e in dict.fromkeys(x.split(":")[0] for x in engines):
        t0, c0 = time.perf_counter(), time.process_time()
        info = build_lexical(work / e, enumerate(texts), lexical_info(engine=e, k1=1.2, b=0.75), n_docs=n)
        disk = sum(f.stat().st_size for f in (work / e).rglob("*") if f.is_file()) / 2**20
        built[e] = (open_lexical(work / e, info, mmap=True), time.process_time() - c0, time.perf_counter() - t0, disk)
        log(f"bm25_libs: {e} built in {built[e][2]:.0f} s (load {load()})")
    got: dict[str, dict[str, list]] = {x: {"wall": [], "cpu": [], "filt": [], "ids": []} for x in engines}
    default = lexical_pisa.ALGORITHM
    for i, q in enumerate(queries):
        for x in engines[i % len(engines):] + engines[: i % len(engines)]:  # who goes first rotates
            name, _, algorithm = x.partition(":")  # pisa:ALGORITHM@THREADS
            lexical_pisa.ALGORITHM, _, threads = (algorithm or default).partition("@")
            lexical_pisa.THREADS = int(threads or 2)
            index, row = built[name][0], got[x]
            t0, c0 = time.perf_counter(), time.process_time()
            row["ids"].append(index.search(q, 10)[1].tolist())
            row["wall"].append((time.perf_counter() - t0) * 1e3)
            row["cpu"].append((time.process_time() - c0) * 1e3)
            t0 = time.perf_counter()
            index.search(q, 10, allowed=allowed)
            row["filt"].append((time.perf_counter() - t0) * 1e3)
    ref = got.get("bm25s", got[engines[0]])["ids"]
    for x in engines:
        r, (_, cpu, wall, disk) = got[x], built[x.split(":")[0]]
        same = np.mean([a == b for a, b in zip(r["ids"], ref, strict=True)])
        overlap = np.mean([len(set(a) & set(b)) / max(len(b), 1) for a, b in zip(r["ids"], ref, strict=True)])
        lines.append(f"| {x} | {cpu:.1f} ({wall:.0f}) | {disk:.1f} | "
                     + " | ".join(f"{pct(r[m], 50):.2f} / {pct(r[m], 99):.2f}" for m in ("wall", "cpu", "filt"))
                     + f" | {same:.3f} | {overlap:.3f} |")
    return "\n".join([*lines, "", f"load after {load()}"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("folder", type=Path, nargs="?", help="a prepared BEIR folder (bench/beir_data.py)")
    p.add_argument("--scale", type=int, help="instead: Strata's engines on the scale corpus of this many documents")
    p.add_argument("--queries", type=int, default=1000, help="--scale: held-out questions timed (default 1000)")
    p.add_argument("--engines", help="--scale: engine[:PISA algorithm[@threads]],...",
                   default="bm25s,tantivy,pisa:block_max_wand,pisa,pisa:block_max_maxscore,pisa:maxscore@1")
    p.add_argument("--rounds", type=int, default=2, help="interleaved rounds per library (default 2)")
    p.add_argument("--max-queries", type=int, default=1000, help="queries timed and scored (default 1000)")
    args = p.parse_args(argv)
    if args.scale:
        with tempfile.TemporaryDirectory() as work:
            report = scale(args.scale, args.queries, args.engines.split(","), Path(work))
        out = REPO_ROOT / f"bench/results/lexical-scale-{args.scale}-{time.strftime('%Y%m%dT%H%MZ', time.gmtime())}.md"
        out.write_text(f"# `python -m bench.bm25_libs --scale {args.scale} --queries {args.queries}`\n\n{report}\n")
        print(report)
        return 0
    if args.folder is None or not (args.folder / "corpus.jsonl").is_file():
        p.error(f"{args.folder} has no corpus.jsonl")
    print(json.dumps(compare(args.folder, args.rounds, args.max_queries), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
