"""Two lexical engines on the same corpus: bm25s (+ PyStemmer) against tantivy's Python bindings.

Corpus: the first `--rows` rows of the Quora TSV in the paper protocol (`indexer.quora.load_split`), its queries
and gold duplicates (MRR@10, each query's own id excluded, as `indexer eval` does). Both engines analyse English
the same way: lowercase, English stopwords, Porter-family (Snowball English) stemming. bm25s scores with Lucene's
BM25 at Anserini's BEIR settings (k1=0.9, b=0.4); tantivy's BM25 is fixed at k1=1.2, b=0.75 (its Python
bindings expose neither), so it is run at those.

Each engine runs in its own child process (so its memory is its own): build time, the child's peak RSS over a
child that only loads the data, single-query latency p50/p95 (one query per call, as `/search` runs them), and
MRR@10 / R@10. Engines cannot be interleaved within one process without sharing memory figures, so the children
run one after the other, `--rounds` times alternating, and the table reports the median over rounds.

    python bench/lexical_engines.py --rows 100000 --queries 2000 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

DATA = Path("/work/shared/data/quora_duplicate_questions.partial.tsv.gz")
K1_ANSERINI, B_ANSERINI = 0.9, 0.4


def load(rows: int, n_queries: int):  # noqa: ANN201
    from indexer.quora import load_split

    split = load_split(DATA, "paper", rows)
    ev = split.evalset
    take = np.random.default_rng(0).permutation(len(ev.query_texts))[:n_queries] if n_queries else \
        np.arange(len(ev.query_texts))
    return (split.corpus.ids, split.corpus.texts, [ev.query_texts[i] for i in take],
            ev.query_ids[take], [ev.gold[i] for i in take])


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_bm25s(ids: np.ndarray, texts: list[str], queries: list[str], k: int, k1: float = K1_ANSERINI,  # noqa: ANN201
              b: float = B_ANSERINI):
    """Strata's own lexical module (`indexer.runtime.lexical`, bm25s underneath), as `indexer build` and
    `/search` run it."""
    from indexer.runtime.lexical import LEXICAL_DIR, LexicalIndex, build_lexical, lexical_info

    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        info = build_lexical(Path(d), zip(ids.tolist(), texts, strict=True),
                             lexical_info(k1=k1, b=b))
        build_s = time.perf_counter() - t0
        disk = sum(p.stat().st_size for p in (Path(d) / LEXICAL_DIR).iterdir())
        index = LexicalIndex(Path(d), info)
    lat, ranked = [], np.full((len(queries), k), -1, np.int64)
    for qi, q in enumerate(queries):
        t = time.perf_counter()
        _, got = index.search(q, k)
        ranked[qi, : len(got)] = got
        lat.append(time.perf_counter() - t)
    return build_s, disk, lat, ranked


def run_tantivy(ids: np.ndarray, texts: list[str], queries: list[str], k: int):  # noqa: ANN201
    import tantivy

    analyzer = (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple()).filter(tantivy.Filter.lowercase())
                .filter(tantivy.Filter.stopword("english")).filter(tantivy.Filter.stemmer("english")).build())
    sb = tantivy.SchemaBuilder()
    sb.add_integer_field("id", stored=True, indexed=True, fast=True)
    sb.add_text_field("text", stored=False, tokenizer_name="en", index_option="freq")
    schema = sb.build()
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        index = tantivy.Index(schema, path=d)
        index.register_tokenizer("en", analyzer)
        writer = index.writer(heap_size=128_000_000, num_threads=1)
        for i, t in zip(ids.tolist(), texts, strict=True):
            writer.add_document(tantivy.Document(id=i, text=t))
        writer.commit()
        writer.wait_merging_threads()
        index.reload()
        build_s = time.perf_counter() - t0
        disk = sum(p.stat().st_size for p in Path(d).rglob("*") if p.is_file())
        searcher = index.searcher()
        lat, ranked = [], np.full((len(queries), k), -1, np.int64)
        for qi, q in enumerate(queries):
            t = time.perf_counter()
            query, _errors = index.parse_query_lenient(q, ["text"])
            res = searcher.search(query, k).hits
            got = [searcher.doc(addr)["id"][0] for _, addr in res]
            ranked[qi, : len(got)] = got
            lat.append(time.perf_counter() - t)
    return build_s, disk, lat, ranked


def child(engine: str, rows: int, n_queries: int) -> dict:
    from indexer.evaluate import drop_self, rank_metrics

    ids, texts, queries, qids, gold = load(rows, n_queries)
    base_mb = rss_mb()
    runner = {"bm25s": run_bm25s, "tantivy": run_tantivy, "none": None,
              "bm25s-tantivy-params": lambda *a: run_bm25s(*a, k1=1.2, b=0.75)}[engine]
    if runner is None:
        return {"engine": engine, "peak_rss_mb": base_mb}
    build_s, disk, lat, ranked = runner(ids, texts, queries, 11)
    mrr, r10 = rank_metrics(drop_self(ranked, qids, 10), gold, 10)
    lat_ms = sorted(x * 1000 for x in lat)
    return {"engine": engine, "build_s": build_s, "docs_per_s": len(texts) / build_s, "disk_mb": disk / 2**20,
            "peak_rss_mb": rss_mb(), "rss_over_data_mb": rss_mb() - base_mb,
            "p50_ms": lat_ms[len(lat_ms) // 2], "p95_ms": lat_ms[int(len(lat_ms) * 0.95)],
            "mrr_at_10": 100 * mrr, "recall_at_10": 100 * r10, "n_docs": len(texts), "n_queries": len(queries)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=2000,
                    help="queries sampled (seed 0) from the paper protocol; 0: all")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    ap.add_argument("--child", choices=["bm25s", "tantivy", "bm25s-tantivy-params", "none"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child, a.rows, a.queries)))
        return
    order = ["none", "bm25s", "tantivy", "bm25s-tantivy-params"]
    runs: dict[str, list[dict]] = {e: [] for e in order}
    for r in range(a.rounds):
        for engine in order if r % 2 == 0 else order[::-1]:
            print(f"round {r + 1}/{a.rounds}: {engine} ...", file=sys.stderr, flush=True)
            out = subprocess.run([sys.executable, __file__, "--child", engine, "--rows", str(a.rows), "--queries",
                                  str(a.queries)], check=True, capture_output=True, text=True).stdout
            runs[engine].append(json.loads(out.strip().splitlines()[-1]))
    base = statistics.median(x["peak_rss_mb"] for x in runs["none"])
    keys = ["build_s", "docs_per_s", "disk_mb", "peak_rss_mb", "p50_ms", "p95_ms", "mrr_at_10", "recall_at_10"]
    med = {e: {k: statistics.median(x[k] for x in runs[e]) for k in keys} for e in order[1:]}
    lines = [f"# Lexical engines on Quora (paper protocol, first {a.rows:,} rows)", "",
             f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, `python bench/lexical_engines.py --rows {a.rows} "
             f"--queries {a.queries} --rounds {a.rounds}`; {runs['bm25s'][0]['n_docs']:,} documents, "
             f"{runs['bm25s'][0]['n_queries']:,} queries (seed 0); 2 shared cores (other jobs running); "
             f"median of {a.rounds} rounds, engines alternating. Memory: the child's peak RSS less a child that only "
             f"loads the data ({base:.0f} MB).", "",
             "| engine | BM25 | build s | docs/s | disk MB | memory MB | p50 ms | p95 ms | MRR@10 | R@10 |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    params = {"bm25s": f"lucene k1={K1_ANSERINI} b={B_ANSERINI}", "tantivy": "k1=1.2 b=0.75 (fixed)",
              "bm25s-tantivy-params": "lucene k1=1.2 b=0.75 (tantivy's)"}
    for e, m in med.items():
        lines.append(f"| {e} | {params[e]} | {m['build_s']:.2f} | {m['docs_per_s']:,.0f} | {m['disk_mb']:.1f} | "
                     f"{m['peak_rss_mb'] - base:.0f} | {m['p50_ms']:.3f} | {m['p95_ms']:.3f} | {m['mrr_at_10']:.2f} | "
                     f"{m['recall_at_10']:.2f} |")
    b, t = med["bm25s"], med["tantivy"]
    mem = (t["peak_rss_mb"] - base) / max(b["peak_rss_mb"] - base, 1)
    lines += ["", f"Ratios tantivy / bm25s: build {t['build_s'] / b['build_s']:.2f}×, query p50 "
              f"{t['p50_ms'] / b['p50_ms']:.2f}×, memory {mem:.2f}×; "
              f"MRR@10 {t['mrr_at_10'] - b['mrr_at_10']:+.2f} (against bm25s at tantivy's k1/b: "
              f"{t['mrr_at_10'] - med['bm25s-tantivy-params']['mrr_at_10']:+.2f}, the engines' analysis and "
              f"scoring code alone)."]
    text = "\n".join(lines) + "\n"
    print(text)
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / f"lexical-engines-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}.md"
    path.write_text(text)
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
