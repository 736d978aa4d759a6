"""Token-budget micro-batching at mixed text lengths: short `/search` queries beside long `/encode` documents.

Starts `python -m service` on 127.0.0.1 for an index root twice per round — once with the token bound
(`STRATA_BATCH_MAX_TOKENS`, default 2048) and once with texts alone bounding a batch (0) — and, for each,
drives `--short-clients` clients sending one short Quora question to `/search` while `--long-clients` clients
send `/encode` requests of `--long-texts` long passages (~250 tokens each). Rounds alternate the two settings
(A B A B …), so drifting machine load hits both alike; the table gives per-setting medians over rounds and
the ratios. Written to bench/results/batching-<UTC>.md/.json.

    python bench/batching.py --root ~/.strata/indexes/quora [--rounds 3] [--seconds 15]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.search_latency import free_port, wait_ready  # noqa: E402
from indexer.runtime.layout import IndexRoot, LayoutError  # noqa: E402
from indexer.runtime.store import STORE, Store  # noqa: E402


def start(root: Path, max_tokens: int) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = os.environ | {"STRATA_INDEX_ROOT": str(root), "STRATA_PORT": str(port), "STRATA_LOG_LEVEL": "warning",
                        "STRATA_BATCH_MAX_TOKENS": str(max_tokens), "STRATA_MAX_IN_FLIGHT": "256"}
    proc = subprocess.Popen([sys.executable, "-m", "service"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    return proc, wait_ready(proc, f"http://127.0.0.1:{port}", "server", 120)


def long_passages(questions: list[str], n: int) -> list[str]:
    """Long texts (~250 tokens: the model's limit is 256) made of real questions joined end to end."""
    out, i = [], 0
    while len(out) < n:
        words: list[str] = []
        while len(words) < 190:
            words += questions[i % len(questions)].split()
            i += 1
        out.append(" ".join(words))
    return out


async def drive(url: str, shorts: list[str], longs: list[str], short_clients: int, long_clients: int,
                seconds: float) -> dict[str, float]:
    short_lat: list[float] = []
    long_lat: list[float] = []
    failures = 0
    counter = iter(range(10**9))
    deadline = time.perf_counter() + seconds

    async def short_worker(session: aiohttp.ClientSession) -> None:
        nonlocal failures
        while time.perf_counter() < deadline:
            q = shorts[next(counter) % len(shorts)]
            t0 = time.perf_counter()
            async with session.post("/search", json={"query": q, "top_k": 10}) as r:
                await r.read()
                short_lat.append(time.perf_counter() - t0)
                failures += r.status != 200

    async def long_worker(session: aiohttp.ClientSession) -> None:
        nonlocal failures
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            async with session.post("/encode", json={"texts": longs}) as r:
                await r.read()
                long_lat.append(time.perf_counter() - t0)
                failures += r.status != 200

    connector = aiohttp.TCPConnector(limit=short_clients + long_clients)
    async with aiohttp.ClientSession(url, connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:
        for q in shorts[:10]:  # warm-up
            async with session.post("/search", json={"query": q, "top_k": 10}) as r:
                await r.read()
        t0 = time.perf_counter()
        deadline = t0 + seconds
        await asyncio.gather(*(short_worker(session) for _ in range(short_clients)),
                             *(long_worker(session) for _ in range(long_clients)))
        wall = time.perf_counter() - t0
    s, lg = np.asarray(short_lat) * 1000, np.asarray(long_lat) * 1000
    return {"short_p50_ms": float(np.percentile(s, 50)), "short_p95_ms": float(np.percentile(s, 95)),
            "short_p99_ms": float(np.percentile(s, 99)), "short_rps": len(s) / wall,
            "long_p50_ms": float(np.percentile(lg, 50)) if len(lg) else float("nan"),
            "long_texts_per_s": len(lg) * len(longs) / wall, "failed": failures}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", type=Path, required=True, help="index root (with current)")
    p.add_argument("--max-tokens", type=int, default=2048, help="the token bound measured against 0 (none)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=15.0, help="load per round and setting")
    p.add_argument("--short-clients", type=int, default=8)
    p.add_argument("--long-clients", type=int, default=2)
    p.add_argument("--long-texts", type=int, default=16, help="long passages per /encode request")
    p.add_argument("--out-dir", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args()

    try:
        folder = IndexRoot(args.root).current_dir()
    except LayoutError as exc:
        raise SystemExit(f"bench/batching.py: {exc}") from None
    store = Store(folder / STORE)
    _, questions, _ = store.eval_set()
    store.close()
    shorts, longs = questions[:2000], long_passages(questions[2000:], args.long_texts)
    settings = {"token bound": args.max_tokens, "texts only": 0}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in settings}
    loads = [os.getloadavg()]
    for rnd in range(args.rounds):
        for name, max_tokens in settings.items():
            proc, url = start(args.root, max_tokens)
            try:
                r = asyncio.run(drive(url, shorts, longs, args.short_clients, args.long_clients, args.seconds))
            finally:
                proc.terminate()
                proc.wait(timeout=30)
            runs[name].append(r)
            print(f"round {rnd + 1} {name:>11}: short p50 {r['short_p50_ms']:.1f} ms p95 {r['short_p95_ms']:.1f} "
                  f"ms {r['short_rps']:.0f} req/s; long {r['long_texts_per_s']:.0f} texts/s; failed {r['failed']}",
                  flush=True)
        loads.append(os.getloadavg())

    keys = ["short_p50_ms", "short_p95_ms", "short_p99_ms", "short_rps", "long_p50_ms", "long_texts_per_s"]
    med = {name: {k: statistics.median(r[k] for r in rs) for k in keys} for name, rs in runs.items()}
    # per-round ratios (bound / texts only), then their median: pairs measured minutes apart
    ratio = {k: statistics.median(a[k] / b[k] for a, b in zip(runs["token bound"], runs["texts only"], strict=True))
             for k in keys}
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    lines = [f"# Token-budget micro-batching at mixed lengths ({stamp})", "",
             f"Command: `python bench/batching.py --root {args.root} --rounds {args.rounds} --seconds {args.seconds}`"
             f"  ", f"Index {folder.name}; {args.short_clients} clients send one short question to `/search`, "
             f"{args.long_clients} clients send `/encode` with {args.long_texts} passages of ~250 tokens; "
             f"{args.rounds} rounds alternating the settings, {args.seconds:.0f} s each; "
             f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), load average (1 min) "
             f"{min(x[0] for x in loads):.1f}–{max(x[0] for x in loads):.1f}.", "",
             "| setting | short p50 ms | short p95 ms | short p99 ms | short req/s | long request p50 ms | "
             "long texts/s |", "|---|---|---|---|---|---|---|"]
    for name, m in med.items():
        label = f"`STRATA_BATCH_MAX_TOKENS={settings[name]}` ({name})"
        lines.append(f"| {label} | " + " | ".join(f"{m[k]:.1f}" for k in keys) + " |")
    lines.append("| ratio bound / texts only (median of per-round ratios) | "
                 + " | ".join(f"{ratio[k]:.2f}×" for k in keys) + " |")
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / f"batching-{stamp}.md").write_text(text)
    (args.out_dir / f"batching-{stamp}.json").write_text(json.dumps(
        {"runs": runs, "median": med, "ratio": ratio, "loads": loads, "settings": settings, "args": {
            k: str(v) for k, v in vars(args).items()}}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
