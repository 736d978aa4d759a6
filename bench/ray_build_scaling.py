"""Distributed build throughput with 1 vs 2 Ray encoding actors (one thread each) on the same corpus.

    python bench/ray_build_scaling.py --model ~/.strata/models/all-MiniLM-L6-v2-mean --rows 3000

Prints vectors/s of the embedding stage (wall time of the Ray Data pipeline) per worker count, the ratio, and
the machine's load average, because on shared cores the ratio says as much about the neighbours as about Ray.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import ray

from indexer.build import BuildConfig
from indexer.ray_build import RayOptions, build_on_ray
from indexer.runtime.paths import default_model_dir, default_quora_source


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, default=default_model_dir())
    p.add_argument("--data", default=default_quora_source())
    p.add_argument("--rows", type=int, default=3000)
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = p.parse_args()
    ray.init(num_cpus=max(args.workers), include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).resolve().parents[1])}})
    rates: dict[int, float] = {}
    for workers in args.workers:
        with tempfile.TemporaryDirectory() as tmp:
            load_before = os.getloadavg()[0]
            cfg = BuildConfig(model_dir=args.model, data=args.data, root=Path(tmp), rows=args.rows, evaluate=False,
                              threads=1)
            manifest = build_on_ray(cfg, RayOptions(workers=workers, block_rows=256))
            d = manifest.distributed
            assert d is not None
            rates[workers] = manifest.index.ntotal / d.embed_wall_s
            per_actor = ", ".join(f"{a.vectors_per_s:.1f}" for a in d.actors)
            print(f"{workers} worker(s): {manifest.index.ntotal} vectors in {d.embed_wall_s:.1f}s = "
                  f"{rates[workers]:.1f} "
                  f"vectors/s (per actor busy rate: {per_actor}); load average before {load_before:.2f}, after "
                  f"{os.getloadavg()[0]:.2f}", flush=True)
    base = min(rates)
    for w, r in rates.items():
        print(f"speed-up {w} vs {base} worker(s): {r / rates[base]:.2f}x")
    ray.shutdown()


if __name__ == "__main__":
    main()
