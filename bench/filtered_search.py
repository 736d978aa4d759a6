"""Filtered `/search` latency at 50 %, 10 %, 1 % and 0.1 % selectivity next to unfiltered, over real HTTP.

Builds (or reuses, with `--root`) a corpus index of real Quora questions (rows < 300,000) whose metadata has a
`bucket` field in 0..999 spread over the documents, so that `{"bucket": {"lt": 500}}` matches 50 %,
`{"lt": 100}` 10 %, `{"lt": 10}` 1 % and `{"bucket": 0}` 0.1 %. Starts `python -m service` on it and sends one
client's sequential requests, in interleaved rounds (each round visits every condition in a shuffled order, so
drifting machine load hits them alike). Each selectivity is measured twice:
- `repeat`: the same filter every time (what the per-version filter cache serves after the first request);
- `fresh`: every request's filter is new (one more bound or value that changes nothing: `"gt": -1 - i`, or
  `-1 - i` in an `in` list), so the store's SQL query runs and the ID selector is built every time.
It also measures, in this process, recall@10 of the filtered index search against brute force over the
matching documents' vectors. Prints a table with ratios to unfiltered and writes
bench/results/filtered-search-<UTC>.md.

    python bench/filtered_search.py --model DIR [--docs 50000] [--root DIR] [--rounds 6] [--requests 25]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import start_server, stop  # noqa: E402
from indexer.quora import HELD_OUT_FROM, read_rows  # noqa: E402
from indexer.runtime.layout import IndexRoot  # noqa: E402
from indexer.runtime.paths import data_dir  # noqa: E402

SELECTIVITIES: dict[str, dict[str, Any]] = {
    "50%": {"bucket": {"lt": 500}}, "10%": {"bucket": {"lt": 100}}, "1%": {"bucket": {"lt": 10}},
    "0.1%": {"bucket": 0}}


def bucket_of(qid: int) -> int:
    return (qid * 7919) % 1000  # spread over the corpus, unrelated to its order or topics


def write_corpus(quora: Path, out: Path, n_docs: int, n_queries: int) -> list[str]:
    """The first `n_docs` unique questions as JSONL with metadata; returns `n_queries` other questions."""
    seen: set[int] = set()
    queries: list[str] = []
    with out.open("w", encoding="utf-8") as fh:
        for row in read_rows(quora):
            if row.id >= HELD_OUT_FROM:
                break
            for qid, text in ((row.qid1, row.question1), (row.qid2, row.question2)):
                if qid in seen or not text.strip():
                    continue
                seen.add(qid)
                if len(seen) <= n_docs:
                    fh.write(json.dumps({"id": qid, "text": text, "bucket": bucket_of(qid),
                                         "year": 1990 + qid % 30}) + "\n")
                else:
                    queries.append(text)
            if len(queries) >= n_queries:
                break
    return queries


def build(args: argparse.Namespace, root: Path) -> list[str]:
    corpus = root.parent / f"{root.name}-corpus.jsonl"
    queries = write_corpus(args.quora, corpus, args.docs, 500)
    (root.parent / f"{root.name}-queries.json").write_text(json.dumps(queries))
    if IndexRoot(root).current_version() is None:
        cmd = [sys.executable, "-m", "indexer.cli", "build", "--data", str(corpus), "--model", str(args.model),
               "--root", str(root), "--no-eval"]
        print("building:", " ".join(cmd), flush=True)
        subprocess.run(cmd, cwd=REPO, check=True)
    return queries


def fresh(flt: dict[str, Any], i: int) -> dict[str, Any]:
    """The same documents as `flt`, written differently each time (buckets are >= 0): the same single index
    range scan in SQL, but a new cache key."""
    cond = flt["bucket"]
    return {"bucket": {**cond, "gt": -1 - i} if isinstance(cond, dict) else {"in": [cond, -1 - i]}}


async def timed(session: aiohttp.ClientSession, body: dict[str, Any]) -> tuple[float, float]:
    """(latency ms seen by the client, the server's `search_ms`: the filter's SQL and selector + the index search)"""
    t0 = time.perf_counter()
    async with session.post("/search", json=body) as r:
        payload = await r.read()
        if r.status != 200:
            raise SystemExit(f"/search answered {r.status}: {payload[:300]!r}")
    return (time.perf_counter() - t0) * 1000, float(json.loads(payload)["search_ms"])


async def measure(url: str, queries: list[str], rounds: int, requests: int, top_k: int
                  ) -> dict[str, list[tuple[float, float]]]:
    conditions = ["unfiltered", *(f"{s} repeat" for s in SELECTIVITIES), *(f"{s} fresh" for s in SELECTIVITIES)]
    lat: dict[str, list[tuple[float, float]]] = {c: [] for c in conditions}
    rng = random.Random(0)
    counter = 0
    async with aiohttp.ClientSession(url, timeout=aiohttp.ClientTimeout(total=60)) as session:
        for q in queries[:30]:  # warm-up
            await timed(session, {"query": q, "top_k": top_k})
        for _ in range(rounds):
            order = conditions[:]
            rng.shuffle(order)
            for cond in order:
                for _ in range(requests):
                    counter += 1
                    body: dict[str, Any] = {"query": queries[counter % len(queries)], "top_k": top_k}
                    if cond != "unfiltered":
                        sel, kind = cond.split()
                        body["filter"] = SELECTIVITIES[sel] if kind == "repeat" else fresh(SELECTIVITIES[sel], counter)
                    lat[cond].append(await timed(session, body))
    return lat


def recall(folder: Path, model: Path, queries: list[str], top_k: int) -> dict[str, tuple[float, int, bool]]:
    """Per selectivity: recall@k of the filtered index search vs brute force over the matching vectors (the
    index's own fp16 codes), the number of matches, and whether the search went exact."""
    from indexer.runtime.encoder import OnnxEncoder
    from indexer.runtime.faiss.exact import stored_vectors
    from indexer.runtime.faiss.filtered import filtered_nprobe
    from indexer.runtime.version import IndexVersion

    version = IndexVersion(folder)
    try:
        vecs = OnnxEncoder(model).encode(queries[:200])
        ids, stored = stored_vectors(version.index)
        _, got = version.search(vecs, top_k)
        want = ids[(vecs @ stored.T).argsort(axis=1)[:, ::-1][:, :top_k]]
        hit = np.mean([len(set(g) & set(w)) / len(w) for g, w in zip(got.tolist(), want.tolist(), strict=True)])
        out = {"unfiltered": (float(hit), len(ids), False)}
        for name, flt in SELECTIVITIES.items():
            match = version.match(flt)
            _, got = version.search(vecs, top_k, match)
            keep = np.isin(ids, match.ids)
            exact = (vecs @ stored[keep].T).argsort(axis=1)[:, ::-1][:, :top_k]
            want = ids[keep][exact]
            hit = np.mean([len(set(g) & set(w)) / len(w) for g, w in zip(got.tolist(), want.tolist(), strict=True)])
            probe = filtered_nprobe(version.nprobe, len(match.ids), version.ntotal, version.nlist)
            assert match.prepared is not None
            out[name] = (float(hit), len(match.ids), len(match.prepared.lists) <= probe)
        return out
    finally:
        version.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, required=True, help="exported encoder folder")
    p.add_argument("--quora", type=Path, default=data_dir() / "quora_duplicate_questions.partial.tsv.gz")
    p.add_argument("--docs", type=int, default=50_000)
    p.add_argument("--root", type=Path, default=Path.home() / ".strata" / "indexes" / "filtered-bench")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--requests", type=int, default=25, help="requests per condition per round")
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument("--build-only", action="store_true")
    p.add_argument("--out-dir", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args()

    args.root.parent.mkdir(parents=True, exist_ok=True)
    queries = build(args, args.root)
    if args.build_only:
        return 0
    folder = IndexRoot(args.root).current_dir()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        proc, url, _ = start_server(args.root, Path(tmp))
        try:
            lat = asyncio.run(measure(url, queries, args.rounds, args.requests, args.top_k))
        finally:
            stop(proc)
    load_after = os.getloadavg()
    rec = recall(folder, args.model, queries, args.top_k)

    from indexer.runtime.manifest import Manifest

    manifest = Manifest.load(folder)
    base = float(np.percentile([t for t, _ in lat["unfiltered"]], 50))
    lines = [f"index {manifest.version}: {manifest.index.ntotal} documents, {manifest.index.factory}, nprobe "
             f"{manifest.index.nprobe}; "
             f"{args.rounds} interleaved rounds x {args.requests} sequential requests per condition, 1 client, "
             f"top_k {args.top_k}",
             f"load average (1 min) {load_before[0]:.1f} before, {load_after[0]:.1f} after, on {os.cpu_count()} cores",
             "",
             "| condition | matches | p50 ms | p95 ms | p50 / unfiltered | server search_ms p50 | recall@10 vs "
             "brute force | search |",
             "|---|---|---|---|---|---|---|---|"]
    for cond, xs in lat.items():
        total = [t for t, _ in xs]
        p50, p95 = np.percentile(total, 50), np.percentile(total, 95)
        search_p50 = np.percentile([s for _, s in xs], 50)
        r = rec[cond.split()[0]]
        how = "IVF" if cond == "unfiltered" else "exact" if r[2] else "IVF + selector"
        lines.append(f"| {cond} | {r[1]:,} | {p50:.2f} | {p95:.2f} | {p50 / base:.2f}x | {search_p50:.2f} | "
                     f"{r[0]:.3f} | {how} |")
    text = "\n".join(lines)
    print(text)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.out_dir / f"filtered-search-{stamp}.md"
    out.write_text(f"# Filtered /search, {stamp}\n\n`python bench/filtered_search.py {' '.join(sys.argv[1:])}`\n\n"
                   f"{text}\n")
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
