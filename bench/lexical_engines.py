"""Strata's two lexical engines (`indexer.runtime.lexical`: bm25s and tantivy) on the same texts, as a build and
`/search` run them (`build_lexical`, `open_lexical`, `LexicalIndex.search`).

Scale (`--sizes 1000000,3000000`): the first N texts of the grown Quora corpus of `bench/scale_corpus.py` (real
questions recombined; cached under ~/.cache/strata-scale). Per engine, in a child process of its own (so its memory
is its own): build time, peak RSS over the child that only loaded the texts, on-disk size, and single-query
latency p50/p99 (one query per call, as `/search` runs them, index memory-mapped as served) on
- **common**: real Quora questions (their words — "what", "how", "best" — are held by a large share of documents);
- **rare**: two words each, drawn (seeded) among those seen once or twice in the first 50,000 texts,
at k=10, and the common set at k=100 (the depth hybrid search fuses). Both engines score BM25 at k1=1.2, b=0.75
(tantivy's fixed values), so the answers can be compared: top-10 overlap of tantivy's ranking with bm25s's.

BEIR (`--beir scifact,nfcorpus`): nDCG@10 of both engines and of bm25s at Anserini's k1=0.9, b=0.4 (Strata's
default) on the prepared sets (`bench/beir_data.py --out DIR`), queries' own ids dropped as `bench/beir.py` does.

    nice -n 10 python bench/lexical_engines.py --sizes 1000000 --beir scifact,nfcorpus,arguana --beir-dir /tmp/beir
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

ENGINES = ("bm25s", "tantivy")
QUORA = Path("/work/shared/data/quora_duplicate_questions.partial.tsv.gz")


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def corpus_texts(n: int) -> list[str]:
    import pyarrow.parquet as pq

    from bench.scale_corpus import corpus

    texts: list[str] = []
    for part in sorted(corpus(QUORA, max(n, 1_000_000)).glob("part-*.parquet")):
        texts += pq.read_table(part, columns=["text"]).column("text").to_pylist()
        if len(texts) >= n:
            break
    return texts[:n]


def query_sets(texts: list[str], n: int = 300) -> dict[str, list[str]]:
    from bench.scale_corpus import query_texts

    counts = Counter(w for t in texts[:50_000] for w in re.findall(r"[a-z]{4,}", t.lower()))
    rare = sorted(w for w, c in counts.items() if c <= 2)
    rng = np.random.default_rng(7)
    pick = rng.choice(len(rare), size=(n, 2))
    return {"common": query_texts(QUORA, n), "rare": [f"{rare[a]} {rare[b]}" for a, b in pick]}


def timed(index: object, queries: list[str], k: int) -> tuple[list[float], list[float], list[np.ndarray]]:
    """Per query: wall ms, CPU ms of the calling thread (both engines answer a query on it; on a loaded machine
    the CPU time is the steadier figure), the ids."""
    lat, cpu, got = [], [], []
    for q in queries:
        t, c = time.perf_counter(), time.thread_time()
        got.append(index.search(q, k)[1])  # type: ignore[attr-defined]
        cpu.append((time.thread_time() - c) * 1000)
        lat.append((time.perf_counter() - t) * 1000)
    return lat, cpu, got


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(p * len(s)))]


def child_scale(engine: str, n: int) -> dict:
    from indexer.runtime.lexical import LEXICAL_DIR, build_lexical, lexical_info, open_lexical

    texts = corpus_texts(n)
    sets = query_sets(texts)
    base = rss_mb()
    if engine == "none":
        return {"engine": engine, "peak_rss_mb": base}
    with tempfile.TemporaryDirectory(dir=Path.home() / ".cache" / "strata-scale") as d:
        t0, c0 = time.perf_counter(), time.process_time()
        info = build_lexical(Path(d), enumerate(texts), lexical_info(k1=1.2, b=0.75, engine=engine))
        build_s, build_cpu_s = time.perf_counter() - t0, time.process_time() - c0
        del texts
        disk = sum(p.stat().st_size for p in (Path(d) / LEXICAL_DIR).rglob("*") if p.is_file())
        build_rss = rss_mb()
        index = open_lexical(Path(d), info, mmap=True)
        timed(index, sets["common"][:30], 10)  # warm the page cache
        out: dict = {"engine": engine, "n": n, "build_s": build_s, "build_cpu_s": build_cpu_s, "disk_mb": disk / 2**20,
                     "build_peak_rss_mb": build_rss - base, "vocabulary": info.vocabulary}
        tops = {}
        for name, k in (("common", 10), ("rare", 10), ("common", 100)):
            lat, cpu, got = timed(index, sets[name], k)
            out[f"{name}@{k}"] = {"p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99), "mean_ms": statistics.mean(lat),
                                  "cpu_p50_ms": pct(cpu, 0.5), "cpu_p99_ms": pct(cpu, 0.99)}
            tops[f"{name}@{k}"] = [g[:10].tolist() for g in got]
        out["serve_rss_mb"] = rss_mb() - base
        out["tops"] = tops
    return out


def load_beir(folder: Path) -> tuple[list[str], list[str], list[str], list[str], list[dict[str, int]]]:
    from bench.beir import load_dataset

    ds = load_dataset(folder)
    return ds.doc_ids, ds.doc_texts, ds.query_ids, ds.query_texts, ds.qrels


def beir_ndcg(folder: Path, engine: str, k1: float, b: float) -> dict:
    from indexer.metrics import per_query
    from indexer.runtime.lexical import build_lexical, lexical_info, open_lexical

    doc_ids, texts, qids, qtexts, qrels = load_beir(folder)
    pos = {d: i for i, d in enumerate(doc_ids)}
    with tempfile.TemporaryDirectory() as d:
        info = build_lexical(Path(d), enumerate(texts), lexical_info(k1=k1, b=b, engine=engine))
        index = open_lexical(Path(d), info)
        ranked = np.full((len(qids), 10), -1, np.int64)
        for r, (q, text) in enumerate(zip(qids, qtexts, strict=True)):
            own = pos.get(q, -1)
            hits = [int(h) for h in index.search(text, 11)[1] if h != own][:10]
            ranked[r, : len(hits)] = hits
    judged = [{pos.get(doc, -2 - j): g for j, (doc, g) in enumerate(qr.items())} for qr in qrels]
    ndcg = per_query(ranked, judged)["ndcg_at_10"]
    return {"ndcg_at_10": float(np.mean(ndcg)) * 100, "per_query": ndcg.tolist()}


def run_child(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def scale_section(n: int, lines: list[str]) -> None:
    runs = {e: run_child(["scale", e, str(n)]) for e in ("none", *ENGINES)}
    b, t = runs["bm25s"], runs["tantivy"]
    lines += [f"## {n:,} documents", "",
              f"Texts loaded: {runs['none']['peak_rss_mb']:.0f} MB RSS (subtracted below). Vocabulary "
              f"{b['vocabulary']:,} terms.", "",
              "Query times: wall p50 / p99 ms, then in brackets the CPU time of the querying thread p50 / p99 ms (the "
              "steadier figure under load).", "",
              "| engine | build s (CPU s) | build peak RSS MB | serving RSS MB | disk MB | common@10 | rare@10 | "
              "common@100 |", "|---|---|---|---|---|---|---|---|"]
    for e in ENGINES:
        r = runs[e]
        cells = " | ".join(f"{r[s]['p50_ms']:.2f} / {r[s]['p99_ms']:.2f} ({r[s].get('cpu_p50_ms', 0):.2f} / "
                           f"{r[s].get('cpu_p99_ms', 0):.2f})" for s in ("common@10", "rare@10", "common@100"))
        lines.append(f"| {e} | {r['build_s']:.1f} ({r.get('build_cpu_s', 0):.1f}) | {r['build_peak_rss_mb']:.0f} | "
                     f"{r['serve_rss_mb']:.0f} | {r['disk_mb']:.1f} | {cells} |")
    agree = {s: float(np.mean([len(set(x) & set(y)) / max(1, len(x)) for x, y in zip(b["tops"][s], t["tops"][s],
                                                                                      strict=True)]))
             for s in ("common@10", "rare@10")}
    cpu = {s: t[s]["cpu_p50_ms"] / max(b[s]["cpu_p50_ms"], 1e-6) for s in ("common@10", "rare@10", "common@100")}
    lines += ["", f"CPU p50 tantivy / bm25s: common@10 {cpu['common@10']:.2f}×, rare@10 {cpu['rare@10']:.2f}×, "
              f"common@100 {cpu['common@100']:.2f}×; build CPU {t['build_cpu_s'] / b['build_cpu_s']:.2f}×.",
              "", f"Wall tantivy / bm25s: build {t['build_s'] / b['build_s']:.2f}×, common@10 p50 "
              f"{t['common@10']['p50_ms'] / b['common@10']['p50_ms']:.2f}× (p99 "
              f"{t['common@10']['p99_ms'] / b['common@10']['p99_ms']:.2f}×), rare@10 p50 "
              f"{t['rare@10']['p50_ms'] / b['rare@10']['p50_ms']:.2f}×, common@100 p50 "
              f"{t['common@100']['p50_ms'] / b['common@100']['p50_ms']:.2f}×, disk {t['disk_mb'] / b['disk_mb']:.2f}×. "
              f"Top-10 overlap with bm25s (same k1/b): common {agree['common@10']:.3f}, rare {agree['rare@10']:.3f}.",
              ""]


def beir_section(names: list[str], root: Path, lines: list[str]) -> None:
    lines += ["## nDCG@10 on BEIR sets", "",
              "| dataset | bm25s k1=0.9 b=0.4 (default) | bm25s k1=1.2 b=0.75 | tantivy k1=1.2 b=0.75 | "
              "tantivy − bm25s (same k1/b) | queries differing by > 0.01 |", "|---|---|---|---|---|---|"]
    for name in names:
        folder = root / name
        d = run_child(["beir", "bm25s", str(folder), "0.9", "0.4"])
        b = run_child(["beir", "bm25s", str(folder), "1.2", "0.75"])
        t = run_child(["beir", "tantivy", str(folder), "1.2", "0.75"])
        diff = np.abs(np.array(t["per_query"]) - np.array(b["per_query"]))
        lines.append(f"| {name} | {d['ndcg_at_10']:.2f} | {b['ndcg_at_10']:.2f} | {t['ndcg_at_10']:.2f} | "
                     f"{t['ndcg_at_10'] - b['ndcg_at_10']:+.2f} | {int((diff > 0.01).sum())} of {len(diff)} |")
    lines.append("")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000000", help="corpus sizes, comma-separated ('' for none)")
    ap.add_argument("--beir", default="", help="BEIR datasets, comma-separated")
    ap.add_argument("--beir-dir", type=Path, default=Path("/work/shared/data/beir"))
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        what, engine, *rest = a.child
        res = child_scale(engine, int(rest[0])) if what == "scale" else \
            beir_ndcg(Path(rest[0]), engine, float(rest[1]), float(rest[2]))
        print(json.dumps(res))
        return
    load = Path("/proc/loadavg").read_text().split()[:3]
    lines = ["# Strata's lexical engines: bm25s and tantivy behind the lexical seam", "",
             f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, `python bench/lexical_engines.py --sizes {a.sizes} "
             f"--beir {a.beir}`; 2 shared cores, load average at start {' '.join(load)} (other jobs running: ratios "
             f"side by side, not absolute times). One child process per engine; 300 queries per set.", ""]
    for n in [int(x) for x in a.sizes.split(",") if x]:
        print(f"scale {n} ...", file=sys.stderr, flush=True)
        scale_section(n, lines)
    if a.beir:
        print("beir ...", file=sys.stderr, flush=True)
        beir_section(a.beir.split(","), a.beir_dir, lines)
    text = "\n".join(lines) + "\n"
    print(text)
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / f"lexical-engines-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}.md"
    path.write_text(text)
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
