"""What collections cost in memory: the real service (`python -m service`, uvicorn on 127.0.0.1) serving 1, 2 and 3
collections from one STRATA_COLLECTIONS_DIR, against one server per collection.

Three index roots of the same size, built by `indexer build` from the first `--rows` Quora rows (each root its own
copy in memory):
`a` and `b` with the stock encoder (all-MiniLM-L6-v2, mean pooling: one encoder folder, loaded once for both), `c`
with the same checkpoint exported with CLS pooling (a second, distinct encoder: another ONNX file and session).
For each configuration the server is started, waited for, warmed with `--warm` searches per collection (so the
ONNX arenas and FAISS buffers are allocated, as in service), and its resident set (VmRSS of the process, from
/proc) read; the configurations are measured in turn for `--rounds` rounds (rotating the order, so drift in the
machine's load hits all alike), medians reported. The last column is what N separate one-root servers (the only
way before collections) cost together, measured the same way.

    python bench/collections_memory.py --work /tmp/collections-bench [--rows 3000] [--rounds 2]

Writes bench/results/collections-memory-<time>.md (and .json).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.search_latency import free_port  # noqa: E402
from indexer.runtime.paths import data_dir  # noqa: E402

QUORA = "quora_duplicate_questions.partial.tsv.gz"
QUERIES = ["How can I learn Python quickly?", "What is the best way to invest money in India?",
           "Why is the sky blue?", "How do I become a good guitarist?"]
CONFIGS = {"1 collection (a)": ["a"], "2 collections, one encoder (a, b)": ["a", "b"],
           "3 collections, two encoders (a, b, c)": ["a", "b", "c"]}


def run(*args: str) -> None:
    print("+", " ".join(args), flush=True)
    subprocess.run(args, cwd=REPO, check=True, env=os.environ | {"HF_HUB_OFFLINE": "1"})


def prepare(work: Path, rows: int) -> dict[str, Path]:
    """The two encoders and the three roots (reused when they exist)."""
    models = {"mean": work / "models" / "minilm-mean", "cls": work / "models" / "minilm-cls"}
    for pooling, out in models.items():
        if not (out / "encoder.json").is_file():
            run(sys.executable, "-m", "models.cli", "export", "--out", str(out), "--pooling", pooling,
                "--quantize", "none")
    data = data_dir() / QUORA
    roots = {}
    # a and c: the first `rows` rows; b: the same rows again (a root of its own: its own FAISS index and store
    # in memory, the same size as a's), built with a's encoder
    for name, model in (("a", "mean"), ("b", "mean"), ("c", "cls")):
        root = work / "roots" / name
        if not (root / "current").exists():
            run(sys.executable, "-m", "indexer.cli", "build", "--root", str(root), "--model", str(models[model]),
                "--data", str(data), "--rows", str(rows), "--no-eval", "--threads", "2")
        roots[name] = root
    return roots


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def serve_and_measure(env: dict[str, str], paths: list[str], warm: int) -> int:
    """Start `python -m service` with `env`, warm it with `warm` searches per path, return its VmRSS in KiB."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "service"], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL,
                            env=os.environ | {"STRATA_PORT": str(port), "STRATA_LOG_LEVEL": "warning",
                                              "STRATA_WATCH_INTERVAL_S": "0", "STRATA_WORKERS": "2",
                                              "STRATA_THREADS": "1", "HF_HUB_OFFLINE": "1"} | env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"the server exited with {proc.returncode}")
            try:
                if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("not ready after 300 s")
            time.sleep(0.3)
        with httpx.Client(base_url=url, timeout=60) as c:
            for path in paths:
                for i in range(warm):
                    r = c.post(path, json={"query": QUERIES[i % len(QUERIES)], "top_k": 10})
                    r.raise_for_status()
        time.sleep(0.5)
        return rss_kib(proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def measure_collections(work: Path, roots: dict[str, Path], names: list[str], warm: int) -> int:
    folder = work / "served" / "-".join(names)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for n in names:
        (folder / n).symlink_to(roots[n], target_is_directory=True)
    return serve_and_measure({"STRATA_COLLECTIONS_DIR": str(folder), "STRATA_DEFAULT_COLLECTION": names[0]},
                             [f"/collections/{n}/search" for n in names], warm)


def measure_separate(roots: dict[str, Path], name: str, warm: int) -> int:
    return serve_and_measure({"STRATA_INDEX_ROOT": str(roots[name])}, ["/search"], warm)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True, help="folder for the encoders and roots (reused)")
    ap.add_argument("--rows", type=int, default=3000, help="Quora rows per collection (default 3000)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--warm", type=int, default=20, help="searches per collection before reading RSS")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = ap.parse_args()
    roots = prepare(args.work, args.rows)
    one_process: dict[str, list[int]] = {k: [] for k in CONFIGS}
    separate: dict[str, list[int]] = {n: [] for n in "abc"}
    jobs = [("c", k) for k in CONFIGS] + [("s", n) for n in "abc"]
    for r in range(args.rounds):
        order = jobs[r % len(jobs):] + jobs[: r % len(jobs)]
        for kind, key in order:
            t0 = time.perf_counter()
            if kind == "c":
                one_process[key].append(measure_collections(args.work, roots, CONFIGS[key], args.warm))
            else:
                separate[key].append(measure_separate(roots, key, args.warm))
            got = one_process[key][-1] if kind == "c" else separate[key][-1]
            print(f"round {r + 1}/{args.rounds}: {key}: {got / 1024:.0f} MiB ({time.perf_counter() - t0:.0f} s)",
                  flush=True)
    med = {k: statistics.median(v) / 1024 for k, v in one_process.items()}
    sep = {k: statistics.median(v) / 1024 for k, v in separate.items()}
    names = list(CONFIGS)
    sep_sum = [sep["a"], sep["a"] + sep["b"], sep["a"] + sep["b"] + sep["c"]]
    index_mib = {n: sum(f.stat().st_size for f in (roots[n] / "current").resolve().rglob("*") if f.is_file()) / 2**20
                 for n in "abc"}
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    load = os.getloadavg()
    lines = [
        f"# Collections: resident memory of one server vs one server per collection ({stamp})", "",
        f"`python bench/collections_memory.py --work {args.work} --rows {args.rows} --rounds {args.rounds} "
        f"--warm {args.warm}`", "",
        f"Machine: {os.cpu_count()} cores, load average {load[0]:.1f} at the end (shared with other jobs); RSS is "
        f"VmRSS after {args.warm} searches per collection, median of {args.rounds} rounds. Collections a and b: "
        f"all-MiniLM-L6-v2, mean pooling (one encoder folder); c: the same checkpoint with CLS pooling (a second "
        f"encoder). Each root: the first {args.rows:,} Quora rows (b a second root of a's rows), default index "
        f"kind; version folders on disk: a {index_mib['a']:.1f} MiB, b {index_mib['b']:.1f} MiB, "
        f"c {index_mib['c']:.1f} MiB.", "",
        "| served | one process, N collections (MiB) | N one-root servers together (MiB) | ratio |",
        "|---|---:|---:|---:|",
    ]
    for name, s in zip(names, sep_sum, strict=True):
        lines.append(f"| {name} | {med[name]:.0f} | {s:.0f} | {med[name] / s:.2f} |")
    lines += ["", f"- one more collection on an encoder already loaded (b after a): "
              f"**+{med[names[1]] - med[names[0]]:.0f} MiB** (a second server for it: +{sep['b']:.0f} MiB)",
              f"- one more collection with an encoder of its own (c after a, b): "
              f"**+{med[names[2]] - med[names[1]]:.0f} MiB** (a third server: +{sep['c']:.0f} MiB)"]
    text = "\n".join(lines) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"collections-memory-{stamp}.md").write_text(text)
    (args.out / f"collections-memory-{stamp}.json").write_text(json.dumps(
        {"one_process_kib": one_process, "separate_kib": separate, "rows": args.rows, "rounds": args.rounds,
         "warm": args.warm, "index_mib": index_mib, "load": load}, indent=2))
    print(text)


if __name__ == "__main__":
    main()
