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
import os
import shutil
import statistics
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import start_server, stop, wrk  # noqa: E402
from indexer.runtime.layout import IndexRoot  # noqa: E402
from indexer.runtime.manifest import Manifest  # noqa: E402
from indexer.runtime.store import STORE, Store  # noqa: E402

MODES = ("dense", "lexical", "hybrid")
STAGES = ("encode_ms", "dense_ms", "lexical_ms", "fusion_ms", "lookup_ms")

def mode_bodies(queries: list[str], mode: str, top_k: int) -> list[dict[str, object]]:
    return [{"query": q, "top_k": top_k, "mode": mode} for q in queries]


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
    runs: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        env = {} if a.threads is None else {"STRATA_THREADS": str(a.threads)}
        proc, url, _ = start_server(a.root, Path(tmp), env)
        try:
            bodies = {m: mode_bodies(queries, m, a.top_k) for m in MODES}
            for m in MODES:  # warm-up: ONNX Runtime's first runs, the store's hot documents
                wrk(url, bodies[m], 1, 2, Path(tmp))
            for r in range(a.rounds):
                for m in MODES[r % 3:] + MODES[: r % 3]:
                    res = wrk(url, bodies[m], a.clients, a.seconds, Path(tmp))
                    print(f"round {r + 1}/{a.rounds} {m:>7}: p50 {res['p50_ms']:.3f} ms, {res['rps']:.0f} req/s",
                          file=sys.stderr, flush=True)
                    runs[m].append(res)
            stages = {m: stage_medians(url, queries, m, a.top_k) for m in MODES}
        finally:
            stop(proc)

    med = {m: {k: statistics.median(x[k] for x in runs[m]) for k in ("p50_ms", "p95_ms", "p99_ms", "rps")}
           for m in MODES}
    bad = {m: sum(x["errors"] for x in runs[m]) for m in MODES}
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
