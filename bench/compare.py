"""Strata against what a user would otherwise run, side by side in one run on this machine, same weights
(all-MiniLM-L6-v2, mean pooling), same Quora paper protocol. One command, four parts:

1. encoding: sentence-transformers `encode` (torch fp32) vs Strata ONNX fp32 vs Strata ONNX int8, sentences/s at
   batch 64 and batch 1, single-query p50/p99;
2. retrieval: FAISS `IndexFlatIP` (exact) vs Strata's default IVF vs the paper's IVF1024/nprobe 5 on the built
   index's own vectors and queries: ms per single query (1 FAISS thread), MRR@10, Recall@10 vs exact, memory;
3. `/search` over HTTP on 127.0.0.1 at 1, 8 and 32 concurrent clients for --seconds each: Strata's service vs a
   minimal FastAPI + sentence-transformers + FAISS flat server (`bench/baseline_server.py`): p50/p95/p99, req/s;
4. `indexer build` wall time and peak memory (the child's max RSS) for the paper protocol and the full file.

Every part prints Strata/baseline ratios next to the figures (ratios survive a noisy shared machine), and the
run writes `bench/results/compare-<UTC stamp>.json` and `.md`.

    python bench/compare.py                       # everything (≈ 45 min on 2 idle cores, most of it the builds)
    python bench/compare.py --rows 20000 --seconds 5 --skip-full-build     # a smoke run (≈ 3 min)

Models are exported into --work unless --fp32/--int8 point at existing `encoder export` folders.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from bench.encoders import format_rows, measure_encoders, sentences  # noqa: E402
from bench.search_latency import free_port, load, wait_ready  # noqa: E402
from bench.search_latency import start as start_strata  # noqa: E402
from indexer.runtime.layout import IndexRoot  # noqa: E402
from indexer.runtime.manifest import Manifest  # noqa: E402
from indexer.runtime.store import STORE, Store  # noqa: E402
from indexer.runtime.version import IndexVersion, vectors_by_id  # noqa: E402
from indexer.tune import Candidate, TuneRow, sweep  # noqa: E402

PAPER = Candidate("IVF1024,Flat", [("nprobe", 5)])


def log(msg: str) -> None:
    print(f"[{datetime.now():%H:%M:%S}] {msg}", flush=True)


def run_measured(cmd: list[str], env: dict[str, str] | None = None) -> dict[str, float]:
    """Run a command to completion; its wall time and peak resident memory (max RSS, from wait4)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed with status {proc.returncode}")
    return {"wall_s": round(wall, 1), "peak_rss_gb": round(usage.ru_maxrss / 1024**2, 3),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 1)}


def ensure_models(args: argparse.Namespace) -> tuple[Path, Path]:
    fp32 = args.fp32 or args.work / "models" / "minilm-mean-fp32"
    int8 = args.int8 or args.work / "models" / "minilm-mean-int8"
    encoder = [sys.executable, "-m", "models.cli", "export", "--pooling", "mean"]
    if not (fp32 / "encoder.json").is_file():
        log(f"exporting fp32 to {fp32}")
        subprocess.run([*encoder, "--out", str(fp32), "--quantize", "none"], cwd=REPO, check=True)
    if not (int8 / "encoder.json").is_file():
        log(f"exporting static int8 (with its batch-invariance check and quality gate) to {int8}")
        subprocess.run([*encoder, "--out", str(int8), "--quantize", "int8"], cwd=REPO, check=True)
    return fp32, int8


def build_index(model: Path, root: Path, protocol: str, rows: int | None, data: str | None) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "indexer.cli", "build", "--model", str(model), "--root", str(root),
           "--protocol", protocol, "--keep", "1"]
    if rows:
        cmd += ["--rows", str(rows)]
    if data:
        cmd += ["--data", data]
    figures = run_measured(cmd)
    manifest = Manifest.load(IndexRoot(root).current_dir())
    return {"protocol": protocol, "rows": manifest.data.rows_read, "docs": manifest.data.n_docs,
            "queries": manifest.data.n_queries, "index": manifest.index.factory, "nprobe": manifest.index.nprobe,
            **figures, "stages_s": manifest.build_seconds.model_dump(),
            "mrr_at_10": manifest.eval.mrr_at_10 if manifest.eval else None}


def retrieval(root: Path) -> list[dict[str, Any]]:
    version = IndexVersion(IndexRoot(root).current_dir())
    m = version.manifest
    chosen = Candidate(m.index.factory, [("nprobe", m.index.nprobe)])
    rows: list[TuneRow] = []
    try:
        for label, cand in (("FAISS IndexFlatIP (exact)", Candidate("Flat", [("", 0)])),
                            (f"Strata default {m.index.factory} nprobe {m.index.nprobe}", chosen),
                            ("paper IVF1024,Flat nprobe 5", PAPER)):
            for row in sweep(version, [cand], max_queries=10**9, threads=1):
                rows.append(row)
                row.factory = label
    finally:
        version.close()
    exact = rows[0]
    return [{"index": r.factory, "ms_per_query": r.ms_per_query, "mrr_at_10": round(r.mrr_at_10 * 100, 2),
             "mrr_vs_exact": round((r.mrr_at_10 - exact.mrr_at_10) * 100, 2),
             "recall_vs_exact": round(r.recall_vs_exact * 100, 2), "memory_mb": r.memory_mb,
             "speedup_vs_exact": round(exact.ms_per_query / r.ms_per_query, 1)} for r in rows]


def write_baseline_corpus(root: Path, out: Path) -> list[str]:
    """The same documents (ids, texts, vectors) for the baseline server, and the eval queries to send."""
    folder = IndexRoot(root).current_dir()
    ids, vecs = vectors_by_id(folder)
    store = Store(folder / STORE)
    try:
        by_id: dict[int, str] = {}
        for start in range(0, len(ids), 10_000):  # SQLite caps the variables of one statement
            by_id.update(store.texts(ids[start : start + 10_000].tolist()))
        texts = [by_id[i] for i in ids.tolist()]
        _, queries, _ = store.eval_set()
    finally:
        store.close()
    np.savez(out, ids=ids, vectors=vecs, texts=np.asarray(texts))
    return queries


def start_baseline(corpus: Path, threads: int) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = os.environ | {"STRATA_BASELINE_CORPUS": str(corpus), "STRATA_BASELINE_MODEL": str(default_model()),
                        "OMP_NUM_THREADS": str(threads)}
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "bench.baseline_server:app", "--host", "127.0.0.1",
                             "--port", str(port), "--log-level", "warning"], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, wait_ready(proc, f"http://127.0.0.1:{port}", "baseline server", 120)


def default_model() -> Path:
    from models.checkpoint import default_checkpoint

    return default_checkpoint()


def peak_rss_gb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024**2, 3)
    return float("nan")


def http_load(root: Path, corpus: Path, queries: list[str], clients: list[int], seconds: float, threads: int
              ) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name, starter in (("Strata service", lambda: start_strata(root, None)),
                          ("FastAPI + sentence-transformers + FAISS flat", lambda: start_baseline(corpus, threads))):
        proc, url = starter()
        try:
            for c in clients:
                log(f"{name}: {c} client(s) for {seconds:.0f} s")
                rows.append({"server": name, **asyncio.run(load(url, queries, c, seconds, 10))})
            rss = peak_rss_gb(proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        for r in rows:
            r.setdefault("server_peak_rss_gb", rss)
    base = {r["clients"]: r for r in rows if r["server"] != "Strata service"}
    for r in rows:
        b = base[r["clients"]]
        r["rps_ratio"] = round(r["rps"] / b["rps"], 2)
        r["p50_speedup"] = round(b["p50_ms"] / r["p50_ms"], 2)
    return rows


def table(head: list[str], rows: list[list[Any]]) -> str:
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
                      *("| " + " | ".join(str(c) for c in r) + " |" for r in rows)])


def render(res: dict[str, Any]) -> str:
    enc, ret, http, builds = res["encoding"], res["retrieval"], res["http"], res["builds"]
    int8 = next(r for r in enc if "int8" in r["encoder"])
    strata = {r["clients"]: r for r in http if r["server"] == "Strata service"}
    lines = [
        f"# Strata vs the usual stack, {res['finished_at']}",
        "",
        f"Command: `{res['command']}`  ",
        f"Machine: {res['cores']} cores, load average {res['loadavg_start']} at start, {res['loadavg_end']} at end. "
        f"Models: {res['models']['fp32']} (fp32) and {res['models']['int8']} (int8), mean pooling.",
        "",
        "## 1. Encoding (Quora questions, "
        f"{res['threads']} threads)",
        "",
        table(["encoder", "sent/s b64", "× ST", "sent/s b1", "× ST", "p50 ms b1", "p99 ms b1", "min cos vs ST"],
              [[r["encoder"], r["sentences_per_s_b64"], r["throughput_ratio"], r["sentences_per_s_b1"],
                r["throughput_ratio_b1"], r["single_p50_ms"], r["single_p99_ms"], r["min_cosine_vs_st"]]
               for r in enc]),
        "",
        f"## 2. Retrieval ({ret[0]['index']} vs IVF; single queries, 1 FAISS thread)",
        "",
        table(["index", "ms/query", "× faster than exact", "MRR@10", "Δ vs exact", "Recall@10 vs exact", "MB"],
              [[r["index"], r["ms_per_query"], r["speedup_vs_exact"], r["mrr_at_10"], r["mrr_vs_exact"],
                r["recall_vs_exact"], r["memory_mb"]] for r in ret]),
        "",
        f"## 3. `/search` over HTTP, 127.0.0.1, {res['seconds']:.0f} s per level (the load generator shares the "
        "cores)",
        "",
        table(["server", "clients", "requests", "failed", "req/s", "× baseline", "p50 ms", "p95 ms", "p99 ms",
               "p50 × faster", "peak RSS GB"],
              [[r["server"], r["clients"], r["requests"], r["failed"], r["rps"], r["rps_ratio"], r["p50_ms"],
                r["p95_ms"], r["p99_ms"], r["p50_speedup"], r["server_peak_rss_gb"]] for r in http]),
        "",
        "Strata req/s as a share of the int8 encoder's own batch-64 throughput "
        f"({int8['sentences_per_s_b64']} sent/s): "
        + ", ".join(f"{c} clients {strata[c]['rps'] / int8['sentences_per_s_b64'] * 100:.0f}%" for c in sorted(strata)),
        "",
        "## 4. `indexer build` (int8 model, default index)",
        "",
        table(["protocol", "rows", "docs", "queries", "index", "wall s", "wall min", "peak RSS GB", "CPU s",
               "MRR@10"],
              [[b["protocol"], b["rows"], b["docs"], b["queries"], f"{b['index']} nprobe {b['nprobe']}", b["wall_s"],
                round(b["wall_s"] / 60, 1), b["peak_rss_gb"], b["cpu_s"],
                round(b["mrr_at_10"] * 100, 2) if b["mrr_at_10"] is not None else "–"] for b in builds]),
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=100_000, help="paper-protocol rows (100,000 = the paper's)")
    p.add_argument("--data", help="Quora TSV (default: STRATA_DATA_DIR / the official URL)")
    p.add_argument("--fp32", type=Path, help="existing fp32 export (mean pooling)")
    p.add_argument("--int8", type=Path, help="existing int8 export (mean pooling)")
    p.add_argument("--sentences", type=int, default=4096, help="encoding benchmark sentences")
    p.add_argument("--single", type=int, default=300, help="single-query calls per encoder")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--seconds", type=float, default=30.0, help="HTTP load per concurrency level")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--skip-full-build", action="store_true", help="skip the full 404k-row build (≈ 10+ min)")
    p.add_argument("--work", type=Path, default=REPO / "bench" / "work" / "compare")
    p.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args()

    args.work.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {"command": "python bench/compare.py " + " ".join(sys.argv[1:]),
                           "cores": os.cpu_count(), "threads": args.threads, "seconds": args.seconds,
                           "loadavg_start": round(os.getloadavg()[0], 2)}
    fp32, int8 = ensure_models(args)
    res["models"] = {"fp32": str(fp32), "int8": str(int8)}

    log("1/4 encoding")
    res["encoding"] = measure_encoders(fp32, int8, sentences(args.sentences), args.single, args.threads)
    print(format_rows(res["encoding"]), flush=True)

    log(f"4/4 (first) indexer build, paper protocol, {args.rows:,} rows")
    paper_root = args.work / "paper"
    res["builds"] = [build_index(int8, paper_root, "paper", args.rows, args.data)]
    print(res["builds"][-1], flush=True)

    log("2/4 retrieval")
    res["retrieval"] = retrieval(paper_root)
    for r in res["retrieval"]:
        print(r, flush=True)

    log("3/4 HTTP /search")
    corpus = args.work / "baseline-corpus.npz"
    queries = write_baseline_corpus(paper_root, corpus)
    res["http"] = http_load(paper_root, corpus, queries, args.clients, args.seconds, args.threads)
    for r in res["http"]:
        print(r, flush=True)

    if not args.skip_full_build:
        log("4/4 indexer build, full protocol, every row")
        res["builds"].append(build_index(int8, args.work / "full", "full", None, args.data))
        print(res["builds"][-1], flush=True)

    res["loadavg_end"] = round(os.getloadavg()[0], 2)
    res["finished_at"] = f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC"
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    args.results.mkdir(parents=True, exist_ok=True)
    md = render(res)
    (args.results / f"compare-{stamp}.json").write_text(json.dumps(res, indent=2, default=str))
    (args.results / f"compare-{stamp}.md").write_text(md)
    print("\n" + md)
    log(f"wrote {args.results / f'compare-{stamp}.md'} and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
