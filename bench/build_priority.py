"""`/search` throughput and p99 beside a build: alone, beside `indexer build` at the API's priority
(STRATA_BUILD_PRIORITY=normal, what builds ran at before issue 35), and beside the same build at its default lowered
priority (nice 19 + best-effort IO 7: `indexer.runtime.priority`).

One server (`python -m service` on `--root`, watch off) answers `wrk` (`--clients` connections, one thread, the
index's own evaluation queries, top_k 10) for `--seconds` per measurement. For a build condition, `indexer build`
of `--build-rows` Quora rows runs into a scratch root (never the served one) and the measurement starts once it is
encoding (its staging folder exists); the build is stopped (SIGTERM) after it. The three conditions rotate their
order from round to round, so a drift of the machine's load hits all alike; the 1-minute load average is recorded
around every measurement. Printed and written to bench/results/build-priority-<UTC>.md/.json: per condition the
medians over rounds of requests/s, p50 and p99, and the per-round ratios to "alone" (median).

    python bench/build_priority.py --root ~/.strata/indexes/quora --model DIR --data quora.tsv[.gz] \\
        [--rounds 3] [--seconds 15] [--clients 4] [--build-rows 60000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.search_under_writes import LUA, Variant, start_server, wrk  # noqa: E402
from indexer.runtime.layout import BUILDING_PREFIX, IndexRoot  # noqa: E402
from indexer.runtime.store import STORE, Store  # noqa: E402

CONDITIONS = ("alone", "build, normal priority", "build, lowered priority (default)")
BUILD_ENV = {"build, normal priority": "normal", "build, lowered priority (default)": "low"}


def start_build(args: argparse.Namespace, scratch: Path, priority: str) -> subprocess.Popen[bytes]:
    shutil.rmtree(scratch, ignore_errors=True)
    env = os.environ | {"PYTHONPATH": str(REPO), "STRATA_BUILD_PRIORITY": priority, "STRATA_LOG_LEVEL": "warning"}
    proc = subprocess.Popen([sys.executable, "-m", "indexer.cli", "build", "--root", str(scratch), "--model",
                             str(args.model), "--data", str(args.data), "--rows", str(args.build_rows), "--no-eval"],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not list(scratch.glob(f"{BUILDING_PREFIX}*")):  # it is encoding: the expensive part
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"bench/build_priority.py: the build never started encoding (status {proc.poll()})")
        time.sleep(0.05)
    return proc


def stop_build(proc: subprocess.Popen[bytes]) -> bool:
    """Stop the build; False when it had finished before the measurement did (the figure is then too kind)."""
    finished = proc.poll() is not None
    if not finished:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return not finished


def summarise(rows: list[dict[str, object]]) -> dict[str, dict[str, float]]:
    out = {}
    alone = {r["round"]: r for r in rows if r["condition"] == "alone"}
    for cond in CONDITIONS:
        mine = [r for r in rows if r["condition"] == cond]
        out[cond] = {
            "rps": statistics.median(float(r["rps"]) for r in mine),
            "p50_ms": statistics.median(float(r["p50_ms"]) for r in mine),
            "p99_ms": statistics.median(float(r["p99_ms"]) for r in mine),
            "rps_ratio": statistics.median(float(r["rps"]) / float(alone[r["round"]]["rps"]) for r in mine),
            "p99_ratio": statistics.median(float(r["p99_ms"]) / float(alone[r["round"]]["p99_ms"]) for r in mine),
            "errors": sum(int(r["errors"]) for r in mine),
        }
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", type=Path, required=True, help="the served index root (with stored queries)")
    p.add_argument("--model", type=Path, required=True, help="exported encoder for the background build")
    p.add_argument("--data", type=Path, required=True, help="Quora TSV[.gz] for the background build")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=15.0, help="wrk duration per measurement")
    p.add_argument("--clients", type=int, default=4, help="wrk connections")
    p.add_argument("--build-rows", type=int, default=60_000, help="rows the background build encodes")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("bench/build_priority.py: wrk not found (apt-get install -y wrk)")
    store = Store(IndexRoot(args.root).current_dir() / STORE)
    _, queries, _ = store.eval_set()
    store.close()
    tmp = Path(tempfile.mkdtemp(prefix="strata-bench-build-priority-"))
    rows: list[dict[str, object]] = []
    loads = [os.getloadavg()]
    server = None
    try:
        bodies = tmp / "bodies.lua"
        bodies.write_text("return {\n" + "".join(f"[==[{json.dumps({'query': q, 'top_k': 10})}]==],\n"
                                                  for q in queries[:2000]) + "}\n")
        script = tmp / "search.lua"
        script.write_text(LUA % {"bodies": str(bodies)})
        server, url = start_server(Variant("this", REPO, {}), args.root)
        wrk(url, script, args.clients, 3)  # warm-up
        for rnd in range(args.rounds):
            order = CONDITIONS[rnd % 3:] + CONDITIONS[:rnd % 3]
            for cond in order:
                load_before = os.getloadavg()[0]
                build = start_build(args, tmp / "scratch", BUILD_ENV[cond]) if cond in BUILD_ENV else None
                r = wrk(url, script, args.clients, args.seconds)
                ran_throughout = stop_build(build) if build is not None else None
                row = {"round": rnd, "condition": cond, **r, "load_before": load_before,
                       "load_after": os.getloadavg()[0], "build_ran_throughout": ran_throughout}
                rows.append(row)
                print(json.dumps(row), flush=True)
            loads.append(os.getloadavg())
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)
    med = summarise(rows)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    head = (f"# /search beside a build ({stamp})\n\nIndex {IndexRoot(args.root).current_version()}; wrk, "
            f"{args.clients} connections, {args.seconds:.0f} s per measurement, {args.rounds} rounds (conditions "
            f"rotated); background `indexer build --rows {args.build_rows}` into a scratch root; {os.cpu_count()} "
            f"cores; 1-min load average from {loads[0][0]:.1f} to {loads[-1][0]:.1f} "
            f"(per measurement in the JSON).\n\n| condition | requests/s | p50 ms | p99 ms | requests/s ÷ alone | "
            f"p99 ÷ alone | errors |\n|---|---|---|---|---|---|---|\n")
    table = "".join(f"| {c} | {m['rps']:.1f} | {m['p50_ms']:.1f} | {m['p99_ms']:.1f} | {m['rps_ratio']:.2f}× | "
                    f"{m['p99_ratio']:.2f}× | {m['errors']} |\n" for c, m in med.items())
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"build-priority-{stamp}.md").write_text(head + table)
    (args.out / f"build-priority-{stamp}.json").write_text(json.dumps({"rows": rows, "medians": med,
                                                                      "loads": loads}, indent=1))
    print(head + table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
