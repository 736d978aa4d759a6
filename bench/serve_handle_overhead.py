"""What one call to a shard costs on Ray before any search runs: a Ray Serve deployment handle (what the sharded
backend calls, `service/engine/sharded.py`) against a plain Ray actor, both with a no-op `search` of the shard's
shape (one 384-d query vector in, (1, 10) arrays out), called from a thread as the API process calls them.

    PYTHONPATH=$PWD python -m bench.serve_handle_overhead [--calls 400] [--rounds 3]

A local Ray with 2 CPUs, Serve without its HTTP proxy; rounds alternate the two ways so that the machine's load
weighs on both alike. Results: bench/results/serve-handle-overhead-STAMP.md.
"""

from __future__ import annotations

import argparse
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


class NoopShard:
    def search(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return vectors[:, :k], vectors[:, :k].astype(np.int64)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=400)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    import ray
    from ray import serve

    from bench.runlog import load

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _system_config={"worker_niceness": 0})
    serve.start(proxy_location="Disabled")
    handle = serve.run(serve.deployment(ray_actor_options={"num_cpus": 0.25})(NoopShard).bind(), name="noop",
                       route_prefix=None)
    actor = ray.remote(num_cpus=0.25)(NoopShard).remote()
    vector = np.random.default_rng(0).random((1, 384), dtype=np.float32)
    ways = {"Serve handle": lambda: handle.search.remote(vector, 10).result(),
            "Ray actor": lambda: ray.get(actor.search.remote(vector, 10))}
    rows = []
    for rnd in range(args.rounds):
        for name, call in ways.items():
            for _ in range(50):  # warm-up
                call()
            took = []
            for _ in range(args.calls):
                t0 = time.perf_counter()
                call()
                took.append(time.perf_counter() - t0)
            rows.append((rnd + 1, name, np.percentile(took, 50) * 1e3, np.percentile(took, 99) * 1e3, load()))
    serve.shutdown()
    ray.shutdown()
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%MZ")
    lines = [f"# One call to a shard on Ray: Serve handle vs plain actor ({stamp})", "",
             f"`PYTHONPATH=$PWD python -m bench.serve_handle_overhead --calls {args.calls} --rounds {args.rounds}`: "
             "a no-op search (1 × 384 in, 1 × 10 out) called from a thread, local Ray with 2 CPUs.", "",
             "| round | way | p50 ms | p99 ms | load |", "|---|---|---|---|---|"]
    lines += [f"| {r} | {n} | {a:.2f} | {b:.2f} | {ld} |" for r, n, a, b, ld in rows]
    text = "\n".join(lines) + "\n"
    (RESULTS / f"serve-handle-overhead-{stamp}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
