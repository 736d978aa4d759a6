"""What a served `/search` costs the server, by kind of request: CPU per request, one-connection p50, eight-connection
throughput, for two copies of the code side by side on one index.

For an index root (its current version, with an encoder and, for lexical and hybrid, a lexical index), each copy of
the code (`this` and every `--compare NAME=SRC`) is served by `python -m service` on 127.0.0.1, then in each round
(rounds interleaved, the order of servers and modes rotating, so drifting machine load hits every figure alike), for
every request kind:

- `vector`: `{"vector": [384 floats], "top_k": 10}` (dense, the query vector brought: nothing encoded; the vectors
  are the served encoder's own for the queries, L2-normalised, written with full float precision as a client's
  `json.dumps(vec.tolist())` writes them);
- `text`: `{"query": ..., "mode": "dense"}`; `lexical`; `hybrid` (the query text encoded and/or run through BM25);

wrk with one connection (p50) and with `--load-clients` connections (req/s), and over each run the server
process's CPU time (user + system, all threads, from /proc) divided by the requests answered: CPU ms per request,
which waiting for a core does not inflate (this machine is shared: its load is printed with every round).

Then (`--inproc N`, load-robust), each copy's app is called in a process of its own without a socket (the ASGI app,
its lifespan, the real engine; no uvicorn), N requests per kind cycled over the same bodies, interleaved over
`--inproc-reps`: that process's CPU ms per request (all threads). Without the socket, the server's other work (HTTP
parsing, waits for a core) is left out, so a change at the edge shows with less noise than in the served figures.

Before measuring, the copies must answer alike: for `--check` queries per kind, every copy returns the same ids in
the same order (scores within 1e-5), or the bench stops.

    python bench/request_path.py --root ROOT [--compare main=/work/main] [--rounds 3] [--seconds 5]

Results: bench/results/request-path-<UTC>.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.search_modes_latency import LUA, run_wrk  # noqa: E402
from bench.served_overhead import Server, queries_for  # noqa: E402
from indexer.runtime.encoder import OnnxEncoder  # noqa: E402
from indexer.runtime.layout import IndexRoot  # noqa: E402
from indexer.runtime.manifest import Manifest  # noqa: E402

KINDS = ("vector", "text", "lexical", "hybrid")


def bodies(kind: str, queries: list[str], vectors: np.ndarray, top_k: int) -> list[str]:
    if kind == "vector":
        return [json.dumps({"vector": [float(x) for x in v], "top_k": top_k}) for v in vectors]
    mode = "dense" if kind == "text" else kind
    return [json.dumps({"query": q, "top_k": top_k, "mode": mode}) for q in queries]


def lua(kind: str, texts: list[str], folder: Path) -> Path:
    path = folder / f"{kind}.lua"
    path.write_text(LUA % ", ".join("[==[" + b + "]==]" for b in texts))
    return path


def same_answers(servers: list[Server], kind_bodies: dict[str, list[str]], n: int) -> None:
    """Every copy answers the first `n` bodies of each kind with the same hits; SystemExit naming the first that
    does not."""
    for kind, texts in kind_bodies.items():
        for body in texts[:n]:
            answers = []
            for s in servers:
                r = httpx.post(f"{s.url}/search", content=body, headers={"content-type": "application/json"},
                               timeout=30)
                r.raise_for_status()
                answers.append([(h["id"], h["score"]) for h in r.json()["hits"]])
            for s, got in zip(servers[1:], answers[1:], strict=True):
                ids_same = [i for i, _ in got] == [i for i, _ in answers[0]]
                if not ids_same or any(abs(a[1] - b[1]) > 1e-5 for a, b in zip(got, answers[0], strict=True)):
                    raise SystemExit(f"{kind}: {s.name} answers {got[:3]}… where {servers[0].name} answers "
                                     f"{answers[0][:3]}… for {body[:80]}")


INPROC = r"""
import asyncio, json, sys, time
from pathlib import Path
sys.path.append(sys.argv[4])  # this tree's bench/: the helper whatever tree is measured
from asgi_post import post as asgi_post
from service.main import create_app
from service.settings import Settings
root, n, bodies_file = sys.argv[1], int(sys.argv[2]), sys.argv[3]
kinds = json.loads(Path(bodies_file).read_text())
app = create_app(Settings(index_root=root, watch_interval_s=0, log_level="warning", threads=1))

async def post(body):
    await asgi_post(app, body)

async def main():
    out = {}
    async with app.router.lifespan_context(app):
        for kind, texts in kinds.items():
            bodies = [t.encode() for t in texts]
            for b in bodies[:20]:
                await post(b)
            c0 = time.process_time()
            for i in range(n):
                await post(bodies[i % len(bodies)])
            out[kind] = (time.process_time() - c0) * 1000 / n
    print("INPROC " + json.dumps(out))

asyncio.run(main())
"""


def inproc(servers: list[Server], root: Path, kind_bodies: dict[str, list[str]], n: int, reps: int,
           folder: Path) -> dict[str, dict[str, list[float]]]:
    """Per server, per kind: CPU ms per request of the ASGI app called in process, one value per rep."""
    bodies_file = folder / "bodies.json"
    bodies_file.write_text(json.dumps(kind_bodies))
    out: dict[str, dict[str, list[float]]] = {s.name: {k: [] for k in kind_bodies} for s in servers}
    for r in range(reps):
        for s in servers[r % len(servers):] + servers[: r % len(servers)]:
            env = os.environ | {"PYTHONPATH": str(s.src), "STRATA_LOG_LEVEL": "warning"}
            run = subprocess.run([sys.executable, "-c", INPROC, str(root), str(n), str(bodies_file),
                                  str(Path(__file__).resolve().parent)], cwd=s.src,
                                 env=env, capture_output=True, text=True, check=True)
            got = json.loads(run.stdout.split("INPROC ", 1)[1])
            for k, v in got.items():
                out[s.name][k].append(v)
            print(f"in process, rep {r + 1}/{reps} {s.name}: " + ", ".join(f"{k} {v:.3f}" for k, v in got.items())
                  + f" CPU ms/req, load {os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
    return out


def measure(servers: list[Server], scripts: dict[str, Path], rounds: int, seconds: float,
            load_clients: int) -> tuple[dict[str, dict[str, list[dict[str, float]]]], list[float]]:
    """Per server, per `<kind>@<connections>`: one wrk result (with the server's CPU ms per request) per round."""
    out: dict[str, dict[str, list[dict[str, float]]]] = {s.name: {} for s in servers}
    load = [os.getloadavg()[0]]
    kinds = list(scripts)
    for r in range(rounds):
        for s in servers[r % len(servers):] + servers[: r % len(servers)]:
            for kind in kinds[r % len(kinds):] + kinds[: r % len(kinds)]:
                for conns in (1, load_clients):
                    res = s.wrk(scripts[kind], conns, seconds) | {"load": os.getloadavg()[0]}
                    out[s.name].setdefault(f"{kind}@{conns}", []).append(res)
                    print(f"round {r + 1}/{rounds} {s.name} {kind} x{conns}: p50 {res['p50_ms']:.2f} ms, "
                          f"{res['rps']:.0f} req/s, CPU {res['cpu_ms_per_request']:.3f} ms/req, "
                          f"non-2xx {res['non2xx']}, load {res['load']:.2f}", file=sys.stderr, flush=True)
        load.append(os.getloadavg()[0])
    return out, load


def report(servers: list[Server], res: dict[str, Any], load: list[float], manifest: Manifest, cmd: str,
           args: argparse.Namespace, local: dict[str, dict[str, list[float]]] | None = None) -> str:
    med = lambda rows, k: statistics.median(x[k] for x in rows)  # noqa: E731
    lc = args.load_clients
    lines = [f"# The served `/search` request path ({manifest.index.ntotal:,} documents)", "",
             f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC. `{cmd}`. Medians of {args.rounds} interleaved rounds, wrk -t1, "
             f"{args.seconds:g} s per run, top_k {args.top_k}; servers `python -m service`, STRATA_THREADS="
             f"{args.threads}. Load (1-min average) per round: {', '.join(f'{x:.2f}' for x in load)} "
             f"({os.cpu_count()} cores, shared with other jobs).", "",
             f"Index {manifest.version}: {manifest.index.factory}, {manifest.index.ntotal:,} documents; encoder "
             f"{Path(manifest.model.dir).name}.", "",
             f"| kind | server | CPU ms / request (x1) | CPU ms / request (x{lc}) | p50 ms (x1) | req/s (x1) | "
             f"req/s (x{lc}) | p50 ms (x{lc}) |", "|---|---|---|---|---|---|---|---|"]
    for kind in KINDS:
        for s in servers:
            one, many = res[s.name].get(f"{kind}@1"), res[s.name].get(f"{kind}@{lc}")
            if not one:
                continue
            lines.append(f"| {kind} | {s.name} | {med(one, 'cpu_ms_per_request'):.3f} | "
                         f"{med(many, 'cpu_ms_per_request'):.3f} | {med(one, 'p50_ms'):.2f} | {med(one, 'rps'):.0f} | "
                         f"{med(many, 'rps'):.0f} | {med(many, 'p50_ms'):.2f} |")
    if len(servers) > 1:
        a, b = servers[0].name, servers[1].name
        lines += ["", f"{a} / {b} (median ratios):", ""]
        for kind in KINDS:
            if f"{kind}@1" not in res[a]:
                continue
            r = {k: med(res[a][f"{kind}@{c}"], k) / med(res[b][f"{kind}@{c}"], k)
                 for k, c in (("cpu_ms_per_request", 1), ("p50_ms", 1))}
            rps = med(res[a][f"{kind}@{lc}"], "rps") / med(res[b][f"{kind}@{lc}"], "rps")
            lines.append(f"- {kind}: CPU per request {r['cpu_ms_per_request']:.2f}, p50 (x1) {r['p50_ms']:.2f}, "
                         f"req/s (x{lc}) {rps:.2f}")
    if local:
        lines += ["", f"In process (the ASGI app without a socket; CPU ms per request, median of {args.inproc_reps} "
                  f"reps of {args.inproc} requests per kind):", "", "| kind | " + " | ".join(s.name for s in servers)
                  + (f" | {servers[0].name} / {servers[1].name} |" if len(servers) > 1 else " |"),
                  "|---|" + "---|" * (len(servers) + (len(servers) > 1))]
        for kind in local[servers[0].name]:
            v = [statistics.median(local[s.name][kind]) for s in servers]
            lines.append(f"| {kind} | " + " | ".join(f"{x:.3f}" for x in v)
                         + (f" | {v[0] / v[1]:.2f} |" if len(v) > 1 else " |"))
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", type=Path, required=True)
    p.add_argument("--compare", action="append", default=[], metavar="NAME=SRC")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--load-clients", type=int, default=8)
    p.add_argument("--queries", type=int, default=200, help="queries cycled by wrk")
    p.add_argument("--check", type=int, default=20, help="queries per kind whose answers must agree")
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--inproc", type=int, default=0, help="requests per kind of the in-process run (0: none)")
    p.add_argument("--inproc-reps", type=int, default=3)
    p.add_argument("--served", type=int, default=1, help="0: the in-process run only (no wrk)")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    a = p.parse_args()
    folder = IndexRoot(a.root).current_dir()
    manifest = Manifest.load(folder)
    kinds = [k for k in a.kinds.split(",") if k in ("vector", "text") or manifest.lexical is not None]
    queries = queries_for(folder, a.queries)
    vectors = OnnxEncoder(manifest.model.dir, threads=a.threads).encode_counted(queries, batch_size=32).vectors
    kind_bodies = {k: bodies(k, queries, vectors, a.top_k) for k in kinds}
    servers = [Server("this", REPO)] + [Server(n, Path(s).resolve()) for n, s in (c.split("=", 1) for c in a.compare)]
    res: dict[str, Any] = {s.name: {} for s in servers}
    load: list[float] = [os.getloadavg()[0]]
    try:
        for s in servers:
            s.start(a.root, a.threads, {})
        same_answers(servers, kind_bodies, a.check)
        with tempfile.TemporaryDirectory() as tmp:
            scripts = {k: lua(k, b, Path(tmp)) for k, b in kind_bodies.items()}
            for s in servers if a.served else []:  # warm-up: first runs, page cache
                for k in kinds:
                    run_wrk(s.url, scripts[k], 1, 1)
            if a.served:
                res, load = measure(servers, scripts, a.rounds, a.seconds, a.load_clients)
    finally:
        for s in servers:
            s.stop()
    local = None
    if a.inproc:
        with tempfile.TemporaryDirectory() as tmp:
            local = inproc(servers, a.root, kind_bodies, a.inproc, a.inproc_reps, Path(tmp))
        load.append(os.getloadavg()[0])
    cmd = "python bench/request_path.py " + " ".join(sys.argv[1:])
    text = report(servers, res, load, manifest, cmd, a, local)
    print(text)
    a.out.mkdir(parents=True, exist_ok=True)
    stem = a.out / f"request-path-{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    stem.with_suffix(".md").write_text(text)
    stem.with_suffix(".json").write_text(json.dumps({"command": cmd, "load": load, "results": res, "inproc": local},
                                                   indent=1))
    print(f"wrote {stem}.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
