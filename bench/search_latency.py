"""`/search` latency over real HTTP next to the index's `indexer eval` figures.

Starts `python -m service` on 127.0.0.1 (free port) for an index root, sends the index's own evaluation
queries (real Quora questions, cycled) from 1 and 8 concurrent clients, and prints p50/p95/p99 latency and
requests/s as a table; writes the same as JSON to bench/results/. The load generator shares the machine's
cores with the server, as a sidecar would.

    python bench/search_latency.py --root ~/.strata/indexes/quora [--seconds 20] [--clients 1 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from indexer.runtime.layout import IndexRoot  # noqa: E402
from indexer.runtime.manifest import Manifest  # noqa: E402
from indexer.runtime.store import STORE, Store  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(root: Path, threads: int | None) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = os.environ | {"STRATA_INDEX_ROOT": str(root), "STRATA_PORT": str(port), "STRATA_LOG_LEVEL": "warning"}
    if threads:
        env["STRATA_THREADS"] = str(threads)
    proc = subprocess.Popen([sys.executable, "-m", "service"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    return proc, wait_ready(proc, f"http://127.0.0.1:{port}", "server", 60)


def wait_ready(proc: subprocess.Popen[bytes], url: str, name: str, timeout_s: float) -> str:
    """Poll `url`/ready until it answers 200; kill the process and exit with a message if it never does."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/ready", timeout=1).status_code == 200:
                return url
        except httpx.TransportError:
            pass
        if proc.poll() is not None:
            raise SystemExit(f"{name} exited with status {proc.returncode}")
        time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"{name} not ready after {timeout_s:.0f} s")


async def load(url: str, queries: list[str], clients: int, seconds: float, top_k: int) -> dict[str, float]:
    """`clients` concurrent keep-alive connections, each sending the next query as soon as its answer is in.

    aiohttp rather than httpx: the client shares the server's cores, and with httpx, 1-client p50 was 1.1-2.5 ms
    higher against the same server (interleaved runs), time the server would be charged for."""
    latencies: list[float] = []
    failures = 0
    deadline = 0.0  # set after the warm-up, which can take seconds on a cold server
    counter = iter(range(10**9))

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal failures
        while time.perf_counter() < deadline:
            q = queries[next(counter) % len(queries)]
            t0 = time.perf_counter()
            async with session.post("/search", json={"query": q, "top_k": top_k}) as r:
                await r.read()
                latencies.append(time.perf_counter() - t0)
                failures += r.status != 200

    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(url, connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as session:
        for q in queries[:20]:  # warm-up
            async with session.post("/search", json={"query": q, "top_k": top_k}) as r:
                await r.read()
        t0 = time.perf_counter()
        deadline = t0 + seconds
        await asyncio.gather(*(worker(session) for _ in range(clients)))
        wall = time.perf_counter() - t0
    if not latencies:
        raise SystemExit(f"no request completed in {seconds} s at {clients} client(s)")
    lat = np.asarray(latencies) * 1000
    return {"clients": clients, "requests": len(lat), "failed": failures, "rps": round(len(lat) / wall, 1),
            "p50_ms": round(float(np.percentile(lat, 50)), 2), "p95_ms": round(float(np.percentile(lat, 95)), 2),
            "p99_ms": round(float(np.percentile(lat, 99)), 2)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", type=Path, required=True, help="index root (with current)")
    p.add_argument("--seconds", type=float, default=20.0, help="load duration per concurrency level")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 8], help="concurrency levels")
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument("--threads", type=int, default=None, help="server STRATA_THREADS")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "search_latency.json")
    args = p.parse_args()

    folder = IndexRoot(args.root).current_dir()
    manifest = Manifest.load(folder)
    store = Store(folder / STORE)
    _, queries, _ = store.eval_set()
    store.close()
    if not queries:
        raise SystemExit(f"{folder} has no stored queries to send")

    proc, url = start(args.root, args.threads)
    try:
        rows = [asyncio.run(load(url, queries, c, args.seconds, args.top_k)) for c in args.clients]
    finally:
        proc.terminate()
        proc.wait(timeout=15)

    e = manifest.eval
    print(f"index {manifest.version}: {manifest.index.ntotal} vectors, {manifest.index.factory}, nprobe "
          f"{manifest.index.nprobe}, {manifest.model.pooling} pooling, {manifest.data.protocol} protocol")
    if e:
        print(f"indexer eval: MRR@10 {e.mrr_at_10 * 100:.2f} (exact {e.exact_mrr_at_10 * 100:.2f}), retrieval "
              f"{e.avg_retrieval_ms:.4f} ms/query (batch {e.batch_size}, {e.threads} threads), memory "
              f"{e.memory_gb:.4f} GB, build {manifest.build_seconds.total_s:.0f} s")
    print(f"\n{'clients':>7} {'requests':>8} {'failed':>6} {'req/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}")
    for r in rows:
        print(f"{r['clients']:>7} {r['requests']:>8} {r['failed']:>6} {r['rps']:>8} {r['p50_ms']:>8} "
              f"{r['p95_ms']:>8} {r['p99_ms']:>8}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"version": manifest.version, "pooling": manifest.model.pooling,
                                    "eval": e.model_dump(mode="json") if e else None,
                                    "build_seconds": manifest.build_seconds.total_s, "load": rows}, indent=2))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
