"""`/search` latency per mode (dense, lexical, hybrid) over real HTTP, measured with wrk (a C load generator: a
Python client on the same 2 cores adds milliseconds to what it measures).

Starts `python -m service` on 127.0.0.1 for an index root built with a lexical index (`indexer build`, the
default), then for `--rounds` rounds runs wrk for each mode in turn (the order rotating per round, so drift in the
machine's load hits every mode alike), each with `--clients` connection(s) for `--seconds` s, sending the
version's own evaluation queries (real Quora questions, cycled). Reports p50/p95/p99 and requests/s per mode
(median over rounds), the ratio of each mode's p50 to dense's, and the server's own per-stage times (the
`stages` of 300 answers per mode, medians). Writes the table to bench/results/search-modes-<time>.md.

    python bench/search_modes_latency.py --root /tmp/q100k [--seconds 10] [--rounds 3] [--clients 1]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.search_latency import free_port  # noqa: E402
from indexer.runtime.layout import IndexRoot  # noqa: E402
from indexer.runtime.manifest import Manifest  # noqa: E402
from indexer.runtime.store import STORE, Store  # noqa: E402

MODES = ("dense", "lexical", "hybrid")
STAGES = ("encode_ms", "dense_ms", "lexical_ms", "fusion_ms", "lookup_ms")

LUA = """
local bodies = {%s}
local i = 0
request = function()
  i = i %% #bodies + 1
  return wrk.format("POST", "/search", {["Content-Type"] = "application/json"}, bodies[i])
end
done = function(summary, latency, requests)
  io.write(string.format("RESULT %%d %%d %%d %%f %%f %%f\\n", summary.requests, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50) / 1000, latency:percentile(95) / 1000, latency:percentile(99) / 1000))
end
"""


def start(root: Path, threads: int | None) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = os.environ | {"STRATA_INDEX_ROOT": str(root), "STRATA_PORT": str(port), "STRATA_LOG_LEVEL": "warning",
                        "STRATA_WATCH_INTERVAL_S": "0"}
    if threads:
        env["STRATA_THREADS"] = str(threads)
    proc = subprocess.Popen([sys.executable, "-m", "service"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/ready", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with status {proc.returncode}")
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("the server was not ready after 120 s")


def lua_script(queries: list[str], mode: str, top_k: int, folder: Path) -> Path:
    def lua_string(s: str) -> str:
        body = json.dumps({"query": s, "top_k": top_k, "mode": mode})
        return "[==[" + body + "]==]" if "]==]" not in body else json.dumps(body)

    path = folder / f"{mode}.lua"
    path.write_text(LUA % ", ".join(lua_string(q) for q in queries))
    return path


def run_wrk(url: str, script: Path, clients: int, seconds: float) -> dict[str, float]:
    out = subprocess.run(["wrk", "-t1", f"-c{clients}", f"-d{seconds:g}s", "--timeout", "10s", "-s", str(script),
                          url], capture_output=True, text=True, check=True).stdout
    m = re.search(r"RESULT (\d+) (\d+) (\d+) (\S+) (\S+) (\S+)", out)
    if m is None:
        raise SystemExit(f"wrk printed no result:\n{out}")
    n, non2xx, errors = (int(m.group(i)) for i in (1, 2, 3))
    p50, p95, p99 = (float(m.group(i)) for i in (4, 5, 6))
    return {"requests": n, "non2xx": non2xx, "errors": errors, "rps": n / seconds, "p50_ms": p50, "p95_ms": p95,
            "p99_ms": p99}


def stage_medians(url: str, queries: list[str], mode: str, top_k: int, n: int = 300) -> dict[str, float]:
    rows: dict[str, list[float]] = {s: [] for s in STAGES}
    with httpx.Client(base_url=url, timeout=30) as c:
        for q in queries[:n]:
            body = c.post("/search", json={"query": q, "top_k": top_k, "mode": mode}).json()
            assert body["mode"] == mode, body
            for s in STAGES:
                rows[s].append(body["stages"][s])
    return {s: statistics.median(v) for s, v in rows.items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", type=Path, required=True, help="index root (its current version has a lexical index)")
    p.add_argument("--seconds", type=float, default=10.0, help="wrk duration per mode and round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--clients", type=int, default=1, help="wrk connections")
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument("--queries", type=int, default=2000, help="evaluation queries cycled")
    p.add_argument("--threads", type=int, default=None, help="server STRATA_THREADS")
    p.add_argument("--target-ms", type=float, default=3.0, help="the hybrid p50 target")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    a = p.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install -y wrk")

    folder = IndexRoot(a.root).current_dir()
    manifest = Manifest.load(folder)
    if manifest.lexical is None:
        raise SystemExit(f"{folder} has no lexical index: build it with `indexer build` (without --no-lexical)")
    store = Store(folder / STORE)
    _, queries, _ = store.eval_set()
    store.close()
    queries = queries[: a.queries]
    if not queries:
        raise SystemExit(f"{folder} has no stored queries to send")

    load_start = os.getloadavg()[0]
    proc, url = start(a.root, a.threads)
    runs: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            scripts = {m: lua_script(queries, m, a.top_k, Path(tmp)) for m in MODES}
            for m in MODES:  # warm-up: ONNX Runtime's first runs, the store's hot documents
                run_wrk(url, scripts[m], 1, 2)
            for r in range(a.rounds):
                order = MODES[r % 3:] + MODES[: r % 3]
                for m in order:
                    res = run_wrk(url, scripts[m], a.clients, a.seconds)
                    print(f"round {r + 1}/{a.rounds} {m:>7}: p50 {res['p50_ms']:.3f} ms, {res['rps']:.0f} req/s",
                          file=sys.stderr, flush=True)
                    runs[m].append(res)
        stages = {m: stage_medians(url, queries, m, a.top_k) for m in MODES}
    finally:
        proc.terminate()
        proc.wait(timeout=15)

    med = {m: {k: statistics.median(x[k] for x in runs[m]) for k in ("p50_ms", "p95_ms", "p99_ms", "rps")}
           for m in MODES}
    bad = {m: sum(x["non2xx"] + x["errors"] for x in runs[m]) for m in MODES}
    lx = manifest.lexical
    now = datetime.now(timezone.utc)
    lines = [f"# /search latency by mode ({manifest.index.ntotal:,} documents)", "",
             f"{now:%Y-%m-%d %H:%M} UTC. `python bench/search_modes_latency.py --root ROOT --seconds {a.seconds:g} "
             f"--rounds {a.rounds} --clients {a.clients}`: wrk, {a.clients} connection(s), top_k {a.top_k}, "
             f"{len(queries):,} of the version's evaluation queries cycled; median of {a.rounds} rounds, the modes' "
             f"order rotating per round. Server: `python -m service`, default settings"
             f"{'' if a.threads is None else f', STRATA_THREADS={a.threads}'}; 2 cores shared with other jobs.",
             "",
             f"Index {manifest.version}: {manifest.index.factory}, nprobe {manifest.index.nprobe}, "
             f"{manifest.model.pooling} pooling ({Path(manifest.model.dir).name}); lexical {lx.engine} "
             f"{lx.engine_version}, BM25 k1={lx.k1} b={lx.b}, stemmer {lx.stemmer}, stopwords {lx.stopwords}, "
             f"{lx.n_docs:,} documents, {lx.vocabulary:,} terms. Hybrid: the default fusion (convex, alpha 0.5) over "
             f"the top 100 of each. Load (1-min average) {load_start:.1f} at start, {os.getloadavg()[0]:.1f} at end.",
             "",
             "| mode | p50 ms | p95 ms | p99 ms | req/s | p50 / dense | failed | server stages (median ms) |",
             "|---|---|---|---|---|---|---|---|"]
    for m in MODES:
        st = ", ".join(f"{s.removesuffix('_ms')} {stages[m][s]:.3f}" for s in STAGES if stages[m][s] > 0)
        lines.append(f"| {m} | {med[m]['p50_ms']:.3f} | {med[m]['p95_ms']:.3f} | {med[m]['p99_ms']:.3f} | "
                     f"{med[m]['rps']:.0f} | {med[m]['p50_ms'] / med['dense']['p50_ms']:.2f} | {bad[m]} | {st} |")
    hyb = med["hybrid"]["p50_ms"]
    lines += ["", f"Hybrid p50 {hyb:.3f} ms against the target of {a.target_ms:g} ms: "
              f"{'met' if hyb <= a.target_ms else 'missed'}.", "",
              "Per round (p50 ms): " + "; ".join(f"{m} " + ", ".join(f"{x['p50_ms']:.3f}" for x in runs[m])
                                                 for m in MODES) + "."]
    text = "\n".join(lines) + "\n"
    print(text)
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / f"search-modes-{now:%Y%m%dT%H%M%SZ}.md"
    path.write_text(text)
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
