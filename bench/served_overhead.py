"""What serving adds to a search: the served `/search` beside the bare loop of the same stages, in one run.

For an index root, each round (rounds interleaved, so drifting machine load hits every figure alike):

- **bare**: in this process, the served encoder's folder opened as the server opens it (`OnnxEncoder`, the same
  `threads`: one intra-op thread by default) and the version's vector index (FAISS's own `search`, the served
  nprobe, `threads` OpenMP threads), for each of `--bare-queries` queries one at a time: the ONNX run alone on
  input ids tokenised beforehand (`onnx`), the encoder's whole call (`encode`: tokenise, pad, run, normalise)
  and the vector search of its vector (`faiss`, top_k);
- **served**: `python -m service` on 127.0.0.1 (default settings but for the flags below), wrk with one
  connection for `--seconds` per mode (dense, hybrid, lexical; the order rotating per round) and, for the
  throughput under load, dense with `--load-clients` connections;
- **stages**: the server's own figures, from the bodies of `--stage-queries` sequential requests per mode
  (`took_ms`, measured inside the route, and `stages`: encode, dense, lexical, fusion, lookup).

Then (`--layers`), in this process, the CPU each layer of the serving path adds per dense request (`layers`): a
load-robust breakdown of the gap by cause.

It prints and writes (bench/results/served-overhead-<UTC>.md and .json) the medians over rounds and the gap:
served dense p50 − (bare ONNX run + bare FAISS search), against the target of `--target-gap-ms` (0.5 ms).

`--compare NAME=SRC` serves a second copy of the code (SRC: a source tree, e.g. `git archive main | tar -x -C
/tmp/base`) on the same index in the same rounds, so a change's effect is a ratio measured side by side.

    python bench/served_overhead.py --root /tmp/quora [--rounds 3] [--seconds 5] [--compare main=/tmp/base]
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.search_latency import free_port  # noqa: E402
from bench.search_modes_latency import lua_script, run_wrk  # noqa: E402
from indexer.runtime.encoder import OnnxEncoder  # noqa: E402
from indexer.runtime.faiss_index import set_threads  # noqa: E402
from indexer.runtime.layout import IndexRoot  # noqa: E402
from indexer.runtime.manifest import Manifest  # noqa: E402
from indexer.runtime.store import STORE, Store  # noqa: E402
from indexer.runtime.version import IndexVersion  # noqa: E402

MODES = ("dense", "hybrid", "lexical")
STAGES = ("encode_ms", "dense_ms", "lexical_ms", "fusion_ms", "lookup_ms")


@dataclass
class Server:
    name: str
    src: Path
    proc: subprocess.Popen[bytes] | None = None
    url: str = ""

    def start(self, root: Path, threads: int, env_extra: dict[str, str]) -> None:
        port = free_port()
        env = os.environ | {"STRATA_INDEX_ROOT": str(root), "STRATA_PORT": str(port), "PYTHONPATH": str(self.src),
                            "STRATA_LOG_LEVEL": "warning", "STRATA_WATCH_INTERVAL_S": "0",
                            "STRATA_THREADS": str(threads), "STRATA_MAX_IN_FLIGHT": "256"} | env_extra
        self.proc = subprocess.Popen([sys.executable, "-m", "service"], cwd=self.src, env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/ready", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None:
                raise SystemExit(f"server {self.name} exited with status {self.proc.returncode}")
            time.sleep(0.2)
        self.stop()
        raise SystemExit(f"server {self.name} was not ready after 600 s")

    def cpu_s(self) -> float:
        """CPU seconds the server process has used so far, all its threads (user + system)."""
        assert self.proc is not None
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def wrk(self, script: Path, clients: int, seconds: float) -> dict[str, float]:
        """`run_wrk`, plus the server's CPU ms per request over the run (load-robust: time waiting for a core
        is not in it)."""
        c0 = self.cpu_s()
        res = run_wrk(self.url, script, clients, seconds)
        res["cpu_ms_per_request"] = (self.cpu_s() - c0) * 1000 / max(1, res["requests"])
        return res

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


def queries_for(folder: Path, n: int) -> list[str]:
    """The version's evaluation queries; without them, Quora questions (question1 of rows below 300,000) from
    the local copy under $STRATA_DATA_DIR."""
    store = Store(folder / STORE)
    _, queries, _ = store.eval_set()
    store.close()
    if queries:
        return queries[:n]
    data = Path(os.environ.get("STRATA_DATA_DIR", "/work/shared/data"))
    tsv = next(iter(sorted(data.glob("quora_duplicate_questions*.tsv*"))), None)
    if tsv is None:
        raise SystemExit(f"{folder} has no stored queries, and no Quora TSV under {data}")
    out: list[str] = []
    opener = gzip.open if tsv.suffix == ".gz" else open
    with opener(tsv, "rt", encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            if int(row["id"]) >= 300_000:
                break
            if row["question1"].strip():
                out.append(row["question1"])
            if len(out) >= n:
                break
    return out


def bare_round(encoder: OnnxEncoder, version: IndexVersion, queries: list[str], top_k: int) -> dict[str, float]:
    """p50 ms of the bare stages, one query at a time on this thread (the ONNX run on inputs tokenised
    beforehand), and the CPU ms of the encoder call + search (this thread's CPU time: load-robust)."""
    onnx, enc, faiss_ms, total, cpu = [], [], [], [], []
    index = version.index  # FAISS's own index object, its nprobe the served one
    feeds = [(b.input_ids, b.attention_mask) for b in (encoder.tokenize([q]) for q in queries)]
    for q, (ids, mask) in zip(queries, feeds, strict=True):
        t0 = time.perf_counter()
        encoder.session.run(None, {"input_ids": ids, "attention_mask": mask})
        t1, c1 = time.perf_counter(), time.thread_time()
        vec = encoder.encode_counted([q], batch_size=1).vectors
        t2 = time.perf_counter()
        index.search(vec, top_k)
        t3, c3 = time.perf_counter(), time.thread_time()
        onnx.append(t1 - t0)
        enc.append(t2 - t1)
        faiss_ms.append(t3 - t2)
        total.append(t3 - t1)
        cpu.append(c3 - c1)
    p50 = lambda xs: float(np.percentile(np.asarray(xs) * 1000, 50))  # noqa: E731
    return {"onnx_ms": p50(onnx), "encode_ms": p50(enc), "faiss_ms": p50(faiss_ms), "encode_faiss_ms": p50(total),
            "encode_faiss_cpu_ms": float(np.mean(cpu) * 1000)}


def layers(root: Path, queries: list[str], top_k: int, threads: int, reps: int = 3) -> dict[str, float]:
    """CPU ms per dense request of each layer of the serving path, in this process (process CPU time, all
    threads: load-robust), the layers interleaved over `reps`: the searcher's batch run alone (`run_batch`, on
    this thread), `Collection.search` (+ the scheduler's admission, the micro-batcher, the hand-off to an inference
    worker and back, the metrics), and the ASGI app called without a socket (+ the middleware, FastAPI's routing,
    dependencies and validation, the route, the JSON answer). The differences are what each layer adds."""
    import asyncio

    from bench.asgi_post import post as asgi_post
    from indexer.runtime.query import Query
    from service.main import create_app
    from service.settings import Settings

    app = create_app(Settings(index_root=root, watch_interval_s=0, log_level="warning", threads=threads))

    async def post(body: bytes) -> None:
        await asgi_post(app, body)

    async def run() -> dict[str, float]:
        out: dict[str, list[float]] = {"run_batch": [], "engine": [], "asgi": []}
        async with app.router.lifespan_context(app):
            collection = app.state.collections.default()
            searcher = collection.leases.current
            bodies = [json.dumps({"query": q, "top_k": top_k, "mode": "dense"}).encode() for q in queries]
            for body in bodies[:20]:  # warm-up
                await post(body)
            for _ in range(reps):
                for name in out:
                    c0 = time.process_time()
                    for q, body in zip(queries, bodies, strict=True):
                        if name == "run_batch":
                            searcher.run_batch([Query([q], top_k, mode="dense")])
                        elif name == "engine":
                            await collection.search(Query([q], top_k, mode="dense"))
                        else:
                            await post(body)
                    out[name].append((time.process_time() - c0) * 1000 / len(queries))
        return {k: statistics.median(v) for k, v in out.items()}

    return asyncio.run(run())


def stage_medians(url: str, queries: list[str], mode: str, top_k: int) -> dict[str, float]:
    rows: dict[str, list[float]] = {s: [] for s in (*STAGES, "took_ms")}
    with httpx.Client(base_url=url, timeout=30) as c:
        for q in queries:
            body = c.post("/search", json={"query": q, "top_k": top_k, "mode": mode}).json()
            for s in STAGES:
                rows[s].append(body["stages"][s])
            rows["took_ms"].append(body["took_ms"])
    return {s: statistics.median(v) for s, v in rows.items()}


def med(rows: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def main() -> int:  # noqa: C901, PLR0915 (one run's steps, in order)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", type=Path, required=True, help="index root (its current version; lexical for "
                   "hybrid and lexical)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=5.0, help="wrk duration per mode, server and round")
    p.add_argument("--load-clients", type=int, default=8, help="wrk connections of the throughput run (0: none)")
    p.add_argument("--bare-queries", type=int, default=300, help="queries of the bare loop per round")
    p.add_argument("--stage-queries", type=int, default=200, help="sequential requests per mode for the stages")
    p.add_argument("--queries", type=int, default=2000, help="queries cycled by wrk")
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument("--threads", type=int, default=1, help="STRATA_THREADS of the servers and the bare loop")
    p.add_argument("--compare", action="append", default=[], metavar="NAME=SRC",
                   help="also serve the code in source tree SRC, named NAME, in the same rounds")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="extra server environment")
    p.add_argument("--layers", type=int, default=200, help="queries per layer and rep of the in-process CPU "
                   "breakdown (0: none)")
    p.add_argument("--target-gap-ms", type=float, default=0.5)
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    a = p.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install -y wrk")

    folder = IndexRoot(a.root).current_dir()
    manifest = Manifest.load(folder)
    modes = MODES if manifest.lexical is not None else ("dense",)
    queries = queries_for(folder, max(a.queries, a.bare_queries, a.stage_queries))
    env_extra = dict(kv.split("=", 1) for kv in a.env)
    servers = [Server("this", REPO)] + [Server(n, Path(s).resolve()) for n, s in (c.split("=", 1) for c in a.compare)]

    set_threads(a.threads)
    encoder = OnnxEncoder(manifest.model.dir, threads=a.threads)
    version = IndexVersion(folder)
    nprobe = version.nprobe
    load = [os.getloadavg()[0]]
    bare: list[dict[str, float]] = []
    served: dict[str, dict[str, list[dict[str, float]]]] = {s.name: {m: [] for m in (*modes, "load")}
                                                            for s in servers}
    stages: dict[str, dict[str, dict[str, float]]] = {}
    try:
        for s in servers:
            s.start(a.root, a.threads, env_extra)
        with tempfile.TemporaryDirectory() as tmp:
            scripts = {m: lua_script(queries[: a.queries], m, a.top_k, Path(tmp)) for m in modes}
            bare_round(encoder, version, queries[:50], a.top_k)  # warm-up: the session's first runs, page cache
            for s in servers:
                for m in modes:
                    run_wrk(s.url, scripts[m], 1, 2)
            for r in range(a.rounds):
                bare.append(bare_round(encoder, version, queries[: a.bare_queries], a.top_k))
                print(f"round {r + 1}/{a.rounds} bare: " + ", ".join(f"{k} {v:.3f}" for k, v in bare[-1].items()),
                      file=sys.stderr, flush=True)
                order = servers[r % len(servers):] + servers[: r % len(servers)]
                for s in order:
                    for m in modes[r % len(modes):] + modes[: r % len(modes)]:
                        res = s.wrk(scripts[m], 1, a.seconds)
                        served[s.name][m].append(res)
                        print(f"round {r + 1}/{a.rounds} {s.name} {m:>7}: p50 {res['p50_ms']:.3f} ms", file=sys.stderr,
                              flush=True)
                    if a.load_clients:
                        res = s.wrk(scripts["dense"], a.load_clients, a.seconds)
                        served[s.name]["load"].append(res)
                        print(f"round {r + 1}/{a.rounds} {s.name} dense x{a.load_clients}: {res['rps']:.0f} req/s, "
                              f"p50 {res['p50_ms']:.3f} ms", file=sys.stderr, flush=True)
                load.append(os.getloadavg()[0])
        for s in servers:
            stages[s.name] = {m: stage_medians(s.url, queries[: a.stage_queries], m, a.top_k) for m in modes}
    finally:
        for s in servers:
            s.stop()
    cpu_layers = layers(a.root, queries[: a.layers], a.top_k, a.threads) if a.layers else None

    b = {k: med(bare, k) for k in bare[0]}
    now = datetime.now(UTC)
    cmd = "python bench/served_overhead.py " + " ".join(sys.argv[1:])
    lines = [f"# What serving adds to a search ({manifest.index.ntotal:,} documents)", "",
             f"{now:%Y-%m-%d %H:%M} UTC. `{cmd}`. Medians of {a.rounds} interleaved rounds; wrk -t1, "
             f"1 connection, {a.seconds:g} s per mode, top_k {a.top_k}; servers `python -m service`, "
             f"STRATA_THREADS={a.threads}{''.join(f', {k}={v}' for k, v in env_extra.items())}. Load (1-min "
             f"average) per round: {', '.join(f'{x:.2f}' for x in load)} ({os.cpu_count()} cores, shared).", "",
             f"Index {manifest.version}: {manifest.index.factory}, served nprobe {nprobe}; encoder "
             f"{Path(manifest.model.dir).name} ({manifest.model.pooling} pooling, "
             f"{encoder.meta.quantization or 'fp32'}).", "",
             "## Bare loop (this process, one query at a time, p50 ms)", "",
             "| ONNX run | encoder call (tokenise + run + normalise) | FAISS search | encoder call + search | "
             "its CPU ms (mean) |", "|---|---|---|---|---|",
             f"| {b['onnx_ms']:.3f} | {b['encode_ms']:.3f} | {b['faiss_ms']:.3f} | {b['encode_faiss_ms']:.3f} | "
             f"{b['encode_faiss_cpu_ms']:.3f} |", "",
             "## Served (wrk p50 ms) and the server's own figures (median ms)", "",
             "| server | mode | p50 | p95 | req/s | server CPU ms / request | took_ms (route) | stages |",
             "|---|---|---|---|---|---|---|---|"]
    summary: dict[str, dict[str, float]] = {}
    for s in servers:
        for m in modes:
            rows = served[s.name][m]
            st = stages[s.name][m]
            stxt = ", ".join(f"{k.removesuffix('_ms')} {st[k]:.3f}" for k in STAGES if st[k] > 0)
            lines.append(f"| {s.name} | {m} | {med(rows, 'p50_ms'):.3f} | {med(rows, 'p95_ms'):.3f} | "
                         f"{med(rows, 'rps'):.0f} | {med(rows, 'cpu_ms_per_request'):.3f} | {st['took_ms']:.3f} | "
                         f"{stxt} |")
        dense = med(served[s.name]["dense"], "p50_ms")
        cpu = med(served[s.name]["dense"], "cpu_ms_per_request")
        summary[s.name] = {"dense_p50_ms": dense, "gap_ms": dense - b["onnx_ms"] - b["faiss_ms"],
                           "gap_vs_encoder_call_ms": dense - b["encode_faiss_ms"],
                           "cpu_gap_ms": cpu - b["encode_faiss_cpu_ms"]}
        if a.load_clients:
            summary[s.name]["load_rps"] = med(served[s.name]["load"], "rps")
            summary[s.name]["load_p50_ms"] = med(served[s.name]["load"], "p50_ms")
    lines += ["", "## The gap", "",
              f"gap = served dense p50 − (bare ONNX run + bare FAISS search); target ≤ {a.target_gap_ms:g} ms.", "",
              "The CPU gap (load-robust) = the server's CPU ms per dense request − the bare encoder call + search's "
              "CPU ms.", "",
              "| server | dense p50 | gap | gap vs the encoder call + search | CPU gap | "
              + (f"dense x{a.load_clients} req/s | dense x{a.load_clients} p50 |" if a.load_clients else ""),
              "|---|---|---|---|---|" + ("---|---|" if a.load_clients else "")]
    for name, x in summary.items():
        lines.append(f"| {name} | {x['dense_p50_ms']:.3f} | {x['gap_ms']:.3f} "
                     f"({'met' if x['gap_ms'] <= a.target_gap_ms else 'missed'}) | {x['gap_vs_encoder_call_ms']:.3f} | "
                     f"{x['cpu_gap_ms']:.3f} | "
                     + (f"{x['load_rps']:.0f} | {x['load_p50_ms']:.3f} |" if a.load_clients else ""))
    if len(servers) > 1 and a.load_clients:
        other = servers[1].name
        base, this = summary[other], summary["this"]
        cpu = {n: med(served[n]["dense"], "cpu_ms_per_request") for n in ("this", other)}
        cpu_ratio = cpu["this"] / cpu[other]
        lines += ["", f"this / {other}: dense p50 {this['dense_p50_ms'] / base['dense_p50_ms']:.3f}, dense "
                  f"x{a.load_clients} req/s {this['load_rps'] / base['load_rps']:.3f}, server CPU ms per dense "
                  f"request {cpu_ratio:.3f}."]
    if cpu_layers:
        rb, en, asgi = cpu_layers["run_batch"], cpu_layers["engine"], cpu_layers["asgi"]
        lines += ["", "## Where the CPU goes (this code, in one process; CPU ms per dense request, all threads)", "",
                  "| encoder call + search (bare) | + plan, lookup, answers (`run_batch`) | + scheduler, batcher, "
                  "worker hand-off, metrics (`Collection.search`) | + middleware, FastAPI, route, JSON (ASGI app) |",
                  "|---|---|---|---|",
                  f"| {b['encode_faiss_cpu_ms']:.3f} | {rb:.3f} (+{rb - b['encode_faiss_cpu_ms']:.3f}) | {en:.3f} "
                  f"(+{en - rb:.3f}) | {asgi:.3f} (+{asgi - en:.3f}) |", "",
                  "What the served request adds beyond the ASGI app (uvicorn's HTTP parsing and socket writes, the "
                  "waits for the event loop and the worker threads) is the server's CPU per request above minus "
                  "the ASGI app's."]
    lines += ["", "Per round: bare " + "; ".join(", ".join(f"{k} {v:.3f}" for k, v in x.items()) for x in bare) + "."]
    for s in servers:
        lines.append(f"{s.name}: " + "; ".join(
            f"{m} " + ", ".join(f"{x['p50_ms']:.3f}" for x in served[s.name][m]) for m in modes)
            + ("; load req/s " + ", ".join(f"{x['rps']:.0f}" for x in served[s.name]["load"]) if a.load_clients
               else "") + ".")
    text = "\n".join(lines) + "\n"
    print(text)
    a.out.mkdir(parents=True, exist_ok=True)
    stem = a.out / f"served-overhead-{now:%Y%m%dT%H%M%SZ}"
    stem.with_suffix(".md").write_text(text)
    stem.with_suffix(".json").write_text(json.dumps(
        {"command": cmd, "load": load, "version": manifest.version, "ntotal": manifest.index.ntotal, "nprobe": nprobe,
         "bare_rounds": bare, "bare": b, "served": served, "stages": stages, "summary": summary,
         "cpu_layers": cpu_layers}, indent=1))
    print(f"wrote {stem}.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
