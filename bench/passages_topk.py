"""Passage search at top_k 100 against whole-document search on the same corpus: what ranking documents by their
best passage (`indexer.runtime.doc_topk`: the deepening, the tiers, the ext-id lookups) costs per query.

    nice python bench/passages_topk.py --model MODEL_DIR [--work /tmp/passages-topk] [--docs 600] [--queries 60]

The corpus is made of real Quora questions (the shared partial file, `STRATA_DATA_DIR`): each document is k
questions run together, k drawn so most documents are short (1-2 passages at the default chunk) and one in ten is
long (up to ~10 passages), the shape that makes a few documents fill a search's candidates. It is built twice
with the same encoder, flat index and BM25: whole documents (`--chunk off`: the encoder sees the first 254 tokens)
and passages (`--chunk 254`). The queries are other Quora questions. Each query is searched alone, in process
(`Searcher.run_batch`, one thread), at top_k 100 and 10, in every mode, on three sides: whole documents, passages
(snippets included: the default) and passages without snippets (`"snippets": false`), their order rotating query by
query so the machine's load drifts over all alike; p50/p95 of the whole call (encoding included) and of the search
alone (`search_ms`: everything but the encoding), and each passages side's ratio of the p50s to whole's. Writes
bench/results/passages-topk-<stamp>.{md,json}; the build is kept in --work for reruns.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import platform
import random
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from indexer.build import BuildConfig, build  # noqa: E402
from indexer.runtime.layout import IndexRoot  # noqa: E402
from indexer.runtime.paths import data_dir  # noqa: E402
from indexer.runtime.query import Query  # noqa: E402
from service.engine.searcher import Searcher  # noqa: E402

MODES = ("dense", "lexical", "hybrid")
TOP_KS = (100, 10)
SIDES = (("whole", True), ("passages", True), ("passages, no snippets", False))  # (side, snippets)


def questions(limit: int) -> list[str]:
    path = data_dir() / "quora_duplicate_questions.partial.tsv.gz"
    seen: dict[str, None] = {}
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            for q in (row["question1"], row["question2"]):
                if q and q.strip():
                    seen.setdefault(q.strip(), None)
            if len(seen) >= limit:
                break
    return list(seen)


def corpus(n_docs: int, rng: random.Random) -> tuple[list[dict[str, object]], list[str]]:
    """`n_docs` documents of questions run together, and the questions left over as queries."""
    sizes = [rng.randint(60, 200) if rng.random() < 0.1 else rng.randint(2, 30) for _ in range(n_docs)]
    pool = questions(sum(sizes) + 2000)
    rng.shuffle(pool)
    rows, pos = [], 0
    for i, k in enumerate(sizes):
        rows.append({"id": i, "text": " ".join(pool[pos : pos + k])})
        pos += k
    return rows, pool[pos:]


def built(work: Path, model: Path, rows: list[dict[str, object]]) -> dict[str, Path]:
    data = work / "docs.jsonl"
    if not data.is_file():
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = {}
    for side, chunk in (("whole", "off"), ("passages", 254)):
        root = work / side
        if not (root / "current").exists():
            build(BuildConfig(model_dir=model, data=str(data), root=root, index="flat", evaluate=False,
                              chunk=chunk, threads=1))
        out[side] = IndexRoot(root).current_dir()
    return out


def measure(searchers: dict[str, Searcher], queries: list[str]) -> dict[str, dict[str, list[float]]]:
    times: dict[str, dict[str, list[float]]] = {}
    for n, q in enumerate(queries):
        for top_k in TOP_KS:
            for mode in MODES:
                for side, snippets in SIDES[n % 3:] + SIDES[: n % 3]:
                    s = searchers[side.split(",")[0]]
                    t0 = time.perf_counter()
                    r = s.run_batch([Query([q], top_k, mode=mode, snippets=snippets)])[0]  # type: ignore[arg-type]
                    wall = (time.perf_counter() - t0) * 1000
                    key = f"{side} {mode} {top_k}"
                    times.setdefault(key, {"wall": [], "search": [], "hits": []})
                    times[key]["wall"].append(wall)
                    times[key]["search"].append(r.search_ms)
                    times[key]["hits"].append(len(r.hits[0]))
    return times


def report(times: dict[str, dict[str, list[float]]], meta: dict[str, object], out: Path) -> str:
    def p(key: str, what: str, q: int) -> float:
        return float(np.percentile(times[key][what], q))

    lines = [f"# Passage search at top_k 100 vs whole documents ({meta['stamp']})", "",
             f"{meta['docs']} documents → {meta['passages']} passages, {meta['queries']} queries, flat, one thread; "
             f"load average {meta['load']} on {meta['cpus']} CPUs. Command: `{meta['command']}`", "",
             "| mode | top_k | passages side | whole p50 / p95 ms | passages p50 / p95 ms | ratio p50 (call) | "
             "whole search p50 | passages search p50 | ratio p50 (search) | passages' hits (min) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for top_k in TOP_KS:
        for mode, (side, _) in ((m, sd) for m in MODES for sd in SIDES[1:]):
            w, s = f"whole {mode} {top_k}", f"{side} {mode} {top_k}"
            lines.append(f"| {mode} | {top_k} | {side} | {p(w, 'wall', 50):.2f} / {p(w, 'wall', 95):.2f} | "
                         f"{p(s, 'wall', 50):.2f} / {p(s, 'wall', 95):.2f} | "
                         f"{p(s, 'wall', 50) / p(w, 'wall', 50):.2f}× | "
                         f"{p(w, 'search', 50):.2f} | {p(s, 'search', 50):.2f} | "
                         f"{p(s, 'search', 50) / p(w, 'search', 50):.2f}× | {min(times[s]['hits']):.0f} |")
    text = "\n".join(lines) + "\n"
    out.with_suffix(".md").write_text(text)
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "times": times}))
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--work", type=Path, default=Path("/tmp/passages-topk"))
    ap.add_argument("--docs", type=int, default=600)
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    rows, left = corpus(args.docs, rng)
    folders = built(args.work, args.model, rows)
    searchers = {side: Searcher.open(folder, threads=1) for side, folder in folders.items()}
    queries = left[: args.queries]
    measure(searchers, queries[:5])  # warm: the store's pages, ONNX's first runs
    times = measure(searchers, queries)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%MZ")
    meta = {"stamp": stamp, "docs": len(rows), "passages": searchers["passages"].index.ntotal,
            "queries": len(queries), "load": " ".join(f"{x:.1f}" for x in os.getloadavg()), "cpus": os.cpu_count(),
            "machine": platform.processor() or platform.machine(),
            "command": (f"nice -n {os.nice(0)} " if os.nice(0) else "") + "python bench/passages_topk.py "
            + " ".join(sys.argv[1:])}
    print(report(times, meta, REPO_ROOT / "bench" / "results" / f"passages-topk-{stamp}"))
    for s in searchers.values():
        s.close()


if __name__ == "__main__":
    main()
