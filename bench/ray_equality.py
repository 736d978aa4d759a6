"""Equality of the distributed build with the single-machine build on the same Quora rows (issue 7's proof).

    nice python bench/ray_equality.py --model /tmp/m_mean --rows 20000 [--workers 2] [--shards 2]

Builds the first `--rows` Quora rows (paper protocol) twice — `indexer.build.build` and `build_on_ray` with
`--workers` encoding actors on a local Ray instance of that many CPUs — and prints: whether the ids are equal,
the minimum and mean cosine between the two builds' vectors of each id, MRR@10 (and recall) of each build, and
both builds' timings. Exits 1 when the issue's criteria (same ids, cosine >= 0.9999, |dMRR@10| <= 0.002) fail.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def main() -> int:
    from indexer.runtime.paths import default_model_dir, default_quora_source

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, default=default_model_dir())
    p.add_argument("--data", default=default_quora_source())
    p.add_argument("--rows", type=int, default=20000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--shards", type=int, default=1, help="shards of the Ray build (1: one merged index)")
    p.add_argument("--threads", type=int, default=2, help="threads of the single-machine build")
    p.add_argument("--root", type=Path, default=None, help="keep both index roots here (default: a temp dir)")
    args = p.parse_args()

    import ray

    from indexer.build import BuildConfig, build
    from indexer.ray_build import RayOptions, build_on_ray, summary
    from indexer.runtime.layout import IndexRoot

    repo = Path(__file__).resolve().parents[1]
    tmp = None
    if args.root is None:
        tmp = tempfile.TemporaryDirectory()
        base = Path(tmp.name)
    else:
        base = args.root
    print(f"{args.rows} rows of {args.data}, model {args.model}; load average {os.getloadavg()[0]:.2f}", flush=True)

    t0 = time.perf_counter()
    single = build(BuildConfig(model_dir=args.model, data=str(args.data), root=base / "single", rows=args.rows,
                               threads=args.threads))
    single_s = time.perf_counter() - t0
    assert single.eval is not None
    print(f"single-machine build: {single.index.ntotal} vectors, {single_s:.1f}s, MRR@10 "
          f"{single.eval.mrr_at_10:.4f}; load average {os.getloadavg()[0]:.2f}", flush=True)

    ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(repo), "HF_HUB_OFFLINE": "1"}})
    try:
        t0 = time.perf_counter()
        dist = build_on_ray(BuildConfig(model_dir=args.model, data=str(args.data), root=base / "ray",
                                        rows=args.rows, threads=args.threads),
                            RayOptions(workers=args.workers, shards=args.shards, block_rows=512))
        ray_s = time.perf_counter() - t0
    finally:
        ray.shutdown()
    print(summary(dist), flush=True)

    from indexer.runtime.version import vectors_by_id

    ids_s, vecs_s = vectors_by_id(IndexRoot(base / "single").current_dir())
    ids_r, vecs_r = vectors_by_id(IndexRoot(base / "ray").current_dir())
    ids_equal = bool(np.array_equal(ids_s, ids_r))
    cosine = np.full(1, np.nan)
    if ids_equal:
        cosine = (vecs_s * vecs_r).sum(1) / np.linalg.norm(vecs_s, axis=1) / np.linalg.norm(vecs_r, axis=1)
    assert dist.eval is not None
    d_mrr = dist.eval.mrr_at_10 - single.eval.mrr_at_10
    print(f"rows {args.rows}: documents single {len(ids_s)} ray {len(ids_r)}, ids equal: {ids_equal}")
    print(f"vector cosine min {cosine.min():.7f} mean {cosine.mean():.7f}")
    print(f"MRR@10 single {single.eval.mrr_at_10:.4f} ray {dist.eval.mrr_at_10:.4f} (diff {d_mrr:+.4f}); "
          f"queries {single.data.n_queries} vs {dist.data.n_queries}")
    print(f"wall: single {single_s:.1f}s, ray ({args.workers} workers, {args.shards} shard(s)) {ray_s:.1f}s; "
          f"load average {os.getloadavg()[0]:.2f}")
    ok = ids_equal and cosine.min() >= 0.9999 and abs(d_mrr) <= 0.002
    print("PASS" if ok else "FAIL", flush=True)
    if tmp is not None:
        tmp.cleanup()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
