"""Time to a first search, stage by stage (issue 38): the own-corpus quickstart (`encoder export`, `indexer build
--data DOCS.jsonl`, `python -m service`, one search) and the demo's chain at `--rows N` (export, `indexer build`
of the Quora paper protocol, serve, one search).

Each stage runs as the README runs it, in a child process; its wall time and CPU time (user + sys of the child)
are recorded, with the load average. On a busy host the wall time says little: an idle 2-core machine's wall is
estimated as CPU / 2 for the builds (their time is encoding on both cores; their single-threaded parts make this
a lower bound) and as CPU for the export and the server (mostly one thread at a time: on an idle host the fp32
export's wall was 1.1x its CPU time). The documents of the own-corpus run are short Quora questions (rows
100,000-299,999, never the held-out rows >= 300,000), one JSON line each.

    python bench/first_search.py [--docs 10000] [--demo-rows 20000] [--work bench/work/first-search]

Writes bench/results/first-search-<stamp>.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def env(home: Path) -> dict[str, str]:
    return {**os.environ, "STRATA_HOME": str(home), "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1",
            "STRATA_LOG_FORMAT": "json"}


def timed(name: str, cmd: list[str], e: dict[str, str], parallel: int) -> dict[str, object]:
    before, t0 = os.times(), time.perf_counter()
    r = subprocess.run(cmd, env=e, capture_output=True, text=True, cwd=REPO)
    wall, after = time.perf_counter() - t0, os.times()
    if r.returncode != 0:
        raise SystemExit(f"{name}: exit {r.returncode}\n{r.stderr[-3000:]}")
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return {"stage": name, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "idle_2core_s": round(cpu / parallel, 1)}


def serve_and_search(root: Path, e: dict[str, str]) -> dict[str, object]:
    """Start the API on a free port, wait for /ready, run one search; the server's CPU from /proc."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    e = e | {"STRATA_INDEX_ROOT": str(root), "STRATA_PORT": str(port)}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "service"], env=e, cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"the API exited with {proc.returncode}")
            try:
                if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        hits = httpx.post(f"{url}/search", json={"query": "How do I learn Python quickly?", "top_k": 5},
                          timeout=60).json()["hits"]
        wall = time.perf_counter() - t0
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    finally:
        proc.terminate()
        proc.wait(30)
    return {"stage": "serve + first search", "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
            "idle_2core_s": round(cpu, 1), "hits": len(hits)}


def short_docs(n: int, out: Path) -> None:
    from models.data import EVAL_ROWS, HELD_OUT, QUORA, data_dir, quora_rows

    seen: set[int] = set()
    with out.open("w") as f:
        for rid, q1, q2, t1, t2, _ in quora_rows(data_dir() / QUORA):
            if rid >= HELD_OUT or len(seen) >= n:
                break
            if rid < EVAL_ROWS:
                continue
            for qid, text in ((q1, t1), (q2, t2)):
                if qid not in seen and text.strip() and len(seen) < n:
                    seen.add(qid)
                    f.write(json.dumps({"id": str(qid), "text": text.strip()}) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=10_000)
    ap.add_argument("--demo-rows", type=int, default=0, help="also the demo's chain at this many rows (0: not)")
    ap.add_argument("--pooling", default="mean", help="the quickstart's (the checkpoint's own: mean)")
    ap.add_argument("--work", type=Path, default=REPO / "bench" / "work" / "first-search")
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    load = [os.getloadavg()[0]]
    e = env(args.work / "home")
    docs = args.work / "docs.jsonl"
    short_docs(args.docs, docs)
    py = sys.executable
    model = args.work / "model"
    runs: dict[str, list[dict[str, object]]] = {}
    quick = [timed("encoder export (defaults)", [py, "-m", "models.cli", "export", "--out", str(model)], e, 1),
             timed(f"indexer build --data ({args.docs:,} docs)",
                   [py, "-m", "indexer.cli", "build", "--model", str(model), "--data", str(docs), "--root",
                    str(args.work / "docs-root")], e, 2)]
    quick.append(serve_and_search(args.work / "docs-root", e))
    runs[f"own corpus, {args.docs:,} short documents"] = quick
    load.append(os.getloadavg()[0])
    if args.demo_rows:
        from indexer.runtime.paths import DEFAULT_POOLING, default_quora_source

        demo_model = args.work / "demo-model"
        demo = [timed("encoder export --pooling layers:0,6 --quantize auto",
                      [py, "-m", "models.cli", "export", "--out", str(demo_model), "--pooling", DEFAULT_POOLING,
                       "--quantize", "auto"], e, 1),
                timed(f"indexer build (Quora paper protocol, {args.demo_rows:,} rows)",
                      [py, "-m", "indexer.cli", "build", "--root", str(args.work / "demo-root"), "--model",
                       str(demo_model), "--data", default_quora_source(), "--rows", str(args.demo_rows)], e, 2)]
        demo.append(serve_and_search(args.work / "demo-root", e))
        runs[f"demo chain, --rows {args.demo_rows:,}"] = demo
        load.append(os.getloadavg()[0])
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = REPO / "bench" / "results" / f"first-search-{stamp}"
    out.with_suffix(".json").write_text(json.dumps({"load": load, "cpus": os.cpu_count(), "runs": runs}, indent=1))
    lines = [f"# Time to a first search — {stamp}", "",
             f"{os.cpu_count()} cores; load average {', '.join(f'{x:.1f}' for x in load)} (start, after each run). "
             "Idle 2-core estimate: CPU / 2 for the builds (encoding on both cores), CPU for export and serving.", ""]
    for name, stages in runs.items():
        lines += [f"## {name}", "", "| stage | wall s (this host) | CPU s | idle 2-core estimate s |",
                  "|---|---|---|---|"]
        for s in stages:
            lines.append(f"| {s['stage']} | {s['wall_s']} | {s['cpu_s']} | {s['idle_2core_s']} |")
        total = sum(float(s["idle_2core_s"]) for s in stages)  # type: ignore[arg-type]
        lines += [f"| **total** | {sum(float(s['wall_s']) for s in stages):.1f} | "  # type: ignore[arg-type]
                  f"{sum(float(s['cpu_s']) for s in stages):.1f} | **{total:.1f}** |", ""]  # type: ignore[arg-type]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out.with_suffix('.md').relative_to(REPO)}")


if __name__ == "__main__":
    main()
