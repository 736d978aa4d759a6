"""How long the sharded backend takes to put a version's shards up and to take them down, the two ways side by side
on one local Ray: one `serve.run` per shard with Serve's default 2 s drain loop (before), and one `serve.run_many`
for all shards with the 0.2 s drain loop `service/engine/sharded.py` now sets (after). Alternated `--rounds` times,
so that both see the same load.

    python -m bench.shard_deploy --shards 2 --rounds 3 --out bench/results/shard_deploy.json

Figures: bench/results/shard_deploy.txt.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def shard_files(folder: Path, shards: int) -> list[Path]:
    from indexer.runtime.faiss_index import train_empty_ivf, write_index

    docs = np.random.default_rng(0).standard_normal((2000, 64)).astype("float32")
    paths = []
    for i in range(shards):
        index = train_empty_ivf(docs, 16, 4, seed=1)
        index.add_with_ids(docs[i::shards], np.arange(i, len(docs), shards).astype("int64"))
        paths.append(folder / f"shard-{i}.faiss")
        write_index(index, paths[-1])
    return paths


def one_round(way: str, paths: list[Path], tag: str) -> tuple[float, float]:
    from ray import serve

    from service.engine.sharded import ShardSearcher

    names = [f"bench-{tag}-{i}" for i in range(len(paths))]
    t0 = time.monotonic()
    if way == "before":
        apps = [ShardSearcher.options(graceful_shutdown_wait_loop_s=2.0).bind(str(p), 4, 1) for p in paths]
        handles = [serve.run(app, name=name, route_prefix=None) for app, name in zip(apps, names, strict=True)]
    else:
        apps = [ShardSearcher.bind(str(p), 4, 1) for p in paths]
        handles = serve.run_many([serve.RunTarget(app, name=name, route_prefix=None)
                                  for app, name in zip(apps, names, strict=True)])
    assert [h.info.remote().result()[0] for h in handles] == [2000 // len(paths)] * len(paths)
    up = time.monotonic() - t0
    t0 = time.monotonic()
    for name in names:
        serve.delete(name)
    return up, time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    import ray
    from ray import serve

    folder = Path(tempfile.mkdtemp(prefix="shard-deploy-"))
    paths = shard_files(folder, args.shards)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    serve.start(proxy_location="Disabled")
    one_round("after", paths, "warm")  # the controller and a first worker up before anything is timed
    times: dict[str, dict[str, list[float]]] = {w: {"up_s": [], "down_s": []} for w in ("before", "after")}
    for r in range(args.rounds):
        for way in ("before", "after") if r % 2 == 0 else ("after", "before"):
            up, down = one_round(way, paths, f"{way}-{r}")
            times[way]["up_s"].append(round(up, 2))
            times[way]["down_s"].append(round(down, 2))
            print(f"round {r} {way}: up {up:.1f} s, down {down:.1f} s", flush=True)
    serve.shutdown()
    ray.shutdown()
    result = {"shards": args.shards, "rounds": args.rounds, "loadavg_at_end": [round(x, 1) for x in os.getloadavg()],
              "median": {w: {k: statistics.median(v) for k, v in t.items()} for w, t in times.items()},
              "times": times}
    print(json.dumps(result["median"]))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
