"""The serving code's own CPU per dense request, layer by layer, side by side with another copy of the code.

In one process per source tree (this one, and each `--compare NAME=SRC`, e.g. `git archive main | tar -x -C
/tmp/base`), on one index root: the served encoder's ONNX run and the vector index's search answer from a cache of
their real answers (filled by a warm-up pass over the same queries), so what is left is the CPU of everything else
— the tokenizer, the searcher's plan, lookup and answers, the scheduler, the batcher, the hand-off to an inference
worker and back, the metrics, the middleware, FastAPI and the route. The ONNX run and the search cost the same
in every tree and, on a loaded machine, vary by more than the whole rest: taking them out leaves a figure a change
to the rest can be read from. (`bench/served_overhead.py --layers` measures the same layers with them in.)

Layers, each the one before plus what it adds (process CPU time per request, all threads; one query, top_k 10,
mode dense, one at a time): `bare` (the encoder call and the search, as the bare loop of served_overhead),
`run_batch` (`Searcher.run_batch` on the calling thread), `worker` (the same batch on an inference worker, through
the scheduler's pool), `scheduler` (`Scheduler.call`: admission, micro-batcher, timeout), `collection`
(`Collection.search`: the collection's config, metrics), `asgi` (the app called without a socket: middleware,
FastAPI, the route, JSON). The layers are interleaved over `--reps`; the trees run at the same time, in `--rounds`
rounds, so the machine's load weighs on both alike; the tables give medians over rounds of each round's median.

    python bench/serving_cpu.py --root /tmp/demo-home/indexes/quora --compare main=/tmp/base [--rounds 3]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
LAYERS = ("bare", "run_batch", "worker", "scheduler", "collection", "asgi")


class _CachedSession:
    """An ONNX session whose runs answer from the real answers already seen (keyed by the input ids)."""

    def __init__(self, session: Any) -> None:  # noqa: ANN401
        self.session, self.cache = session, {}

    def __getattr__(self, name: str) -> Any:  # noqa: ANN401
        return getattr(self.session, name)

    def run(self, outputs: Any, feeds: dict[str, Any], *args: Any) -> Any:  # noqa: ANN401
        key = feeds["input_ids"].tobytes()
        if key not in self.cache:
            self.cache[key] = self.session.run(outputs, feeds, *args)
        return self.cache[key]


def _cached_search(search: Any) -> Any:  # noqa: ANN401
    cache: dict[tuple[bytes, int], Any] = {}

    def run(vectors: Any, k: int, *args: Any, **kwargs: Any) -> Any:  # noqa: ANN401
        key = (vectors.tobytes(), k)
        if key not in cache:
            cache[key] = search(vectors, k, *args, **kwargs)
        scores, ids = cache[key]
        return scores.copy(), ids.copy()

    return run


def child(root: Path, n: int, reps: int) -> dict[str, float]:
    """In a process whose sys.path starts with the tree measured: CPU ms per request of each layer (medians)."""
    from asgi_post import post as asgi_post  # this tree's (sys.path[0]); `bench` may be the compared tree's

    from bench.served_overhead import queries_for
    from indexer.runtime.faiss_index import set_threads
    from indexer.runtime.layout import IndexRoot
    from indexer.runtime.query import Query
    from service.main import create_app
    from service.settings import Settings

    queries = queries_for(IndexRoot(root).current_dir(), n)
    app = create_app(Settings(index_root=root, watch_interval_s=0, log_level="warning", threads=1))

    async def post(body: bytes) -> None:
        await asgi_post(app, body)

    async def run() -> dict[str, float]:
        set_threads(1)
        out: dict[str, list[float]] = {name: [] for name in LAYERS}
        async with app.router.lifespan_context(app):
            collection = app.state.collections.default()
            searcher = collection.leases.current
            searcher.encoder.session = _CachedSession(searcher.encoder.session)
            ann = searcher.index.base.ann  # the version's vector index (under the write overlay)
            ann.search = _cached_search(ann.search)
            scheduler = collection.scheduler
            bodies = [json.dumps({"query": q, "top_k": 10, "mode": "dense"}).encode() for q in queries]
            for body in bodies:  # fills the caches with the real answers
                await post(body)

            async def layer(name: str, some: int) -> None:
                for q, body in zip(queries[:some], bodies, strict=False):
                    query = Query([q], 10, mode="dense")
                    if name == "bare":
                        ann.search(searcher.encoder.encode_counted([q], batch_size=1).vectors, 10)
                    elif name == "run_batch":
                        searcher.run_batch([query])
                    elif name == "worker":
                        await scheduler.pool.run(searcher.run_batch, [query])
                    elif name == "scheduler":
                        await scheduler.call(collection, query)
                    elif name == "collection":
                        await collection.search(query)
                    else:
                        await post(body)

            for _ in range(reps):
                for name in LAYERS:
                    c0 = time.process_time()
                    await layer(name, len(queries))
                    out[name].append((time.process_time() - c0) * 1000 / len(queries))
            calls = {}
            for name in LAYERS:  # function calls on this (the event loop's) thread
                profile = cProfile.Profile()
                profile.enable()
                await layer(name, 50)
                profile.disable()
                calls[f"{name}_calls"] = sum(nc for _, nc, _, _, _ in pstats.Stats(profile).stats.values()) / 50
                if name not in ("bare", "run_batch"):  # the batch on the worker thread: as counted on this one
                    calls[f"{name}_calls"] += calls["run_batch_calls"]
        return {name: statistics.median(v) for name, v in out.items()} | calls

    import uvloop  # the loop uvicorn serves with

    return uvloop.run(run())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", type=Path, required=True, help="index root (its current version)")
    p.add_argument("--compare", action="append", default=[], metavar="NAME=SRC", help="another source tree")
    p.add_argument("--queries", type=int, default=200, help="queries per layer and rep")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    p.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)  # the tree to measure, in a child
    a = p.parse_args()
    if a.child is not None:
        sys.path.insert(0, str(a.child))
        print(json.dumps(child(a.root, a.queries, a.reps)))
        return 0
    trees = {"this": REPO} | {n: Path(s).resolve() for n, s in (c.split("=", 1) for c in a.compare)}
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    load = [os.getloadavg()[0]]
    for r in range(a.rounds):
        procs = {name: subprocess.Popen(  # at the same time: the same load on every tree
            [sys.executable, __file__, "--child", str(tree), "--root", str(a.root), "--queries", str(a.queries),
             "--reps", str(a.reps)], cwd=tree, env=os.environ | {"PYTHONPATH": str(tree)},
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) for name, tree in trees.items()}
        for name, proc in procs.items():
            got, _ = proc.communicate()
            if proc.returncode:
                raise SystemExit(f"the {name} tree's child exited with status {proc.returncode}")
            rounds[name].append(json.loads(got))
            print(f"round {r + 1}/{a.rounds} {name}: " + ", ".join(f"{k} {v:.3f}" for k, v in rounds[name][-1].items()),
                  file=sys.stderr, flush=True)
        load.append(os.getloadavg()[0])
    med = {name: {k: statistics.median(x[k] for x in rs) for k in LAYERS} for name, rs in rounds.items()}
    now = datetime.now(UTC)
    cmd = "python bench/serving_cpu.py " + " ".join(sys.argv[1:])
    lines = ["# The serving code's own CPU per dense request (ONNX run and vector search answered from a cache)", "",
             f"{now:%Y-%m-%d %H:%M} UTC. `{cmd}`. {a.queries} queries x {a.reps} reps per layer, the trees measured "
             f"at the same time, {a.rounds} rounds (medians). Load (1-min average) before and after each round: "
             f"{', '.join(f'{x:.2f}' for x in load)} ({os.cpu_count()} cores, shared).", "",
             "CPU ms per request, all threads; in brackets, what the layer adds to the one before.", "",
             "| tree | " + " | ".join(LAYERS) + " |", "|---|" + "---|" * len(LAYERS)]
    for name, m in med.items():
        cells = [f"{m[k]:.3f}" + (f" (+{m[k] - m[LAYERS[i - 1]]:.3f})" if i else "") for i, k in enumerate(LAYERS)]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "Python and C function calls per request, counted by cProfile on the event loop's thread, the "
              "batch's on the worker counted as `run_batch` counts it on this thread (the worker's own wrapper, "
              "`run_routed` and the leases, not counted): exact, whatever the load.", "",
              "| tree | " + " | ".join(LAYERS) + " |", "|---|" + "---|" * len(LAYERS)]
    for name, rs in rounds.items():
        lines.append(f"| {name} | " + " | ".join(f"{rs[0][k + '_calls']:.0f}" for k in LAYERS) + " |")
    for other in list(trees)[1:]:
        ratios = [statistics.median(t[k] / o[k] for t, o in zip(rounds["this"], rounds[other], strict=True))
                  for k in LAYERS]
        lines += ["", f"this / {other} (median over rounds of each round's ratio): "
                  + ", ".join(f"{k} {x:.3f}" for k, x in zip(LAYERS, ratios, strict=True)) + "."]
    lines += ["", "Per round: " + "; ".join(f"{name} " + " / ".join(f"{x['asgi']:.3f}" for x in rs)
                                            for name, rs in rounds.items()) + " (asgi)."]
    text = "\n".join(lines) + "\n"
    print(text)
    a.out.mkdir(parents=True, exist_ok=True)
    stem = a.out / f"serving-cpu-{now:%Y%m%dT%H%M%SZ}"
    stem.with_suffix(".md").write_text(text)
    stem.with_suffix(".json").write_text(json.dumps({"command": cmd, "load": load, "rounds": rounds, "medians": med},
                                                    indent=1))
    print(f"wrote {stem}.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
