"""`encoder export --quantize none` vs `encoder export` (defaults: static int8 behind its gates) side by side, one
machine, one run (issue 38's target: the default within 2x of fp32).

Each round runs, in a rotated order: fp32 (`--quantize none`); the default with a cold cache (a fresh
`STRATA_HOME`: the gate measures its fp32 reference); the default with a warm cache (the same `STRATA_HOME` again:
the reference is read back, as on any later export of the same checkpoint and pooling). Wall time and the CPU
time (user + sys) of each child process are recorded; on a shared host the CPU time moves less than the wall
time, and on an idle 2-core machine wall is about CPU / (cores the step uses). The children's log shows each step's
time (`Working`'s "done in" lines), summarised per run.

    python bench/export_time.py [--pooling layers:0,6] [--rounds 1] [--work bench/work/export-time]

Writes bench/results/export-time-<stamp>.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUNS = ("fp32 (--quantize none)", "default, cold cache", "default, warm cache")


def run(kind: str, out: Path, home: Path, pooling: str) -> dict[str, object]:
    cmd = [sys.executable, "-m", "models.cli", "export", "--out", str(out), "--pooling", pooling, "--force"]
    if kind.startswith("fp32"):
        cmd += ["--quantize", "none"]
    env = {**os.environ, "STRATA_HOME": str(home), "STRATA_LOG_FORMAT": "text", "PYTHONPATH": str(REPO),
           "HF_HUB_OFFLINE": "1"}
    before = os.times()
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - t0
    after = os.times()
    if r.returncode != 0:
        raise SystemExit(f"{kind}: exit {r.returncode}\n{r.stderr[-3000:]}")
    steps = re.findall(r"INFO [\w.]+: (.+): done in (\S+(?: \S+s)?)$", r.stderr, flags=re.M)
    gate = next((line for line in r.stdout.splitlines() if line.startswith("int8 quality gate")), None)
    return {"run": kind, "wall_s": round(wall, 1),
            "cpu_s": round((after.children_user - before.children_user)
                           + (after.children_system - before.children_system), 1),
            "steps": [{"step": s, "took": t} for s, t in steps], "gate": gate}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pooling", default="layers:0,6", help="the demo's (default) or mean")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--work", type=Path, default=REPO / "bench" / "work" / "export-time")
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    load = [os.getloadavg()[0]]
    results = []
    for k in range(args.rounds):
        home = args.work / f"home-{k}"  # fresh per round: its first default export is the cold one
        order = RUNS if k % 2 == 0 else (*RUNS[1:], RUNS[0])  # the cold default always before the warm one
        for kind in order:
            res = run(kind, args.work / "m", home, args.pooling) | {"round": k}
            results.append(res)
            print(f"[{time.strftime('%H:%M:%S')}] {res['run']}: wall {res['wall_s']} s, CPU {res['cpu_s']} s",
                  flush=True)
        load.append(os.getloadavg()[0])
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = REPO / "bench" / "results" / f"export-time-{stamp}"
    out.with_suffix(".json").write_text(json.dumps({"load": load, "cpus": os.cpu_count(), "pooling": args.pooling,
                                                    "results": results}, indent=1))
    out.with_suffix(".md").write_text(markdown(stamp, load, args.pooling, results))
    print(f"wrote {out.with_suffix('.md').relative_to(REPO)}")


def markdown(stamp: str, load: list[float], pooling: str, results: list[dict]) -> str:
    def median(kind: str, key: str) -> float:
        xs = sorted(float(r[key]) for r in results if r["run"] == kind)
        return xs[len(xs) // 2] if xs else float("nan")

    base_w, base_c = median(RUNS[0], "wall_s"), median(RUNS[0], "cpu_s")
    lines = [f"# encoder export: fp32 vs the default — {stamp}", "",
             f"all-MiniLM-L6-v2, --pooling {pooling}, {os.cpu_count()} cores; load average "
             f"{', '.join(f'{x:.1f}' for x in load)} (start, after each round). Medians over rounds.", "",
             "| run | wall s | × fp32 (wall) | CPU s | × fp32 (CPU) |", "|---|---|---|---|---|"]
    for kind in RUNS:
        w, c = median(kind, "wall_s"), median(kind, "cpu_s")
        lines.append(f"| {kind} | {w} | {w / base_w:.2f} | {c} | {c / base_c:.2f} |")
    lines += ["", "Steps of each run (from its log):", ""]
    for r in results:
        steps = "; ".join(f"{s['step']}: {s['took']}" for s in r["steps"])
        lines.append(f"- round {r['round']}, {r['run']}: {steps}" + (f" — {r['gate']}" if r["gate"] else ""))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
