"""`/search` latency across one version swap of a collection with many written documents, per source tree.

The collection's index root (`--root`, a scratch copy: its `current` link and serving record are rewritten) holds
a served version (`--from`), a write log with documents it does not hold (replayed into its overlay at startup:
the state of a busy collection before a compaction lands) and the version to swap to (`--to`). Each round, for each
`--variant NAME TREE` (interleaved): `python -m service` from TREE with automatic compaction off, wrk (one
connection, one-vector top-10 queries) for 2 × 5 s idle, then 3 s windows while `current` moves to `--to` and
`POST /admin/reload` runs, until it has answered, then 5 s after. Printed and written to
bench/results/swap-pause-<UTC>.md/.json: per window p50, p99 and max.

    python -m bench.swap_pause --root /tmp/c2/collections/bench --from V1 --to V2 \\
        --variant before /tmp/before-tree --variant after . --rounds 2
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.common import REPO, interleave, load, log, start_server, stop, wrk


def one_round(args: argparse.Namespace, tree: Path) -> dict[str, Any]:
    b, name = args.root, args.root.name
    current = b / "current"
    current.unlink(missing_ok=True)
    current.symlink_to(f"versions/{args.from_version}")
    (b / "serving.json").unlink(missing_ok=True)
    (b / "collection.json").write_text(json.dumps({"compaction": {"auto": False}}))
    env = {"STRATA_COLLECTIONS_DIR": str(b.parent), "STRATA_MODELS_DIR": str(args.models)}
    proc, url, _ = start_server(None, b.parent, env, ready="/health", checkout=tree)
    out: dict[str, Any] = {"load_start": load()}
    try:
        t0 = time.time()
        while not httpx.get(f"{url}/collections/{name}", timeout=600).json().get("ready"):
            time.sleep(1)  # the startup's replay of the written documents
        out["ready_s"] = round(time.time() - t0, 1)
        rng = np.random.default_rng(0)
        vecs = rng.standard_normal((200, args.dim)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        bodies = [{"vector": [round(float(x), 5) for x in v], "top_k": 10} for v in vecs]
        path, work = f"/collections/{name}/search", Path(tempfile.mkdtemp(prefix="swap-pause-"))
        out["idle"] = [wrk(url, bodies, 1, 5, work, path) for _ in range(2)]

        def swap() -> None:
            time.sleep(1.0)  # into the first window
            current.unlink()
            current.symlink_to(f"versions/{args.to}")
            t = time.time()
            r = httpx.post(f"{url}/collections/{name}/admin/reload", timeout=900)
            out["reload"] = {"status": r.status_code, "s": round(time.time() - t, 2), "outcome": r.json()}

        th = threading.Thread(target=swap)
        th.start()
        out["during"] = []
        while th.is_alive():
            out["during"].append(wrk(url, bodies, 1, 3, work, path))
        th.join()
        out["after"] = [wrk(url, bodies, 1, 5, work, path)]
        out["load_end"] = load()
    finally:
        stop(proc)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", type=Path, required=True, help="the collection's index root (a scratch copy)")
    p.add_argument("--models", type=Path, required=True, help="STRATA_MODELS_DIR: the encoder the versions name")
    p.add_argument("--from", dest="from_version", required=True, help="the version served at startup")
    p.add_argument("--to", required=True, help="the version swapped to")
    p.add_argument("--variant", nargs=2, action="append", metavar=("NAME", "TREE"), required=True)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--out-dir", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args()
    for v in (args.from_version, args.to):
        if not (args.root / "versions" / v).is_dir():
            p.error(f"{args.root / 'versions' / v} is not a version folder")
    runs: list[dict[str, Any]] = []
    for r, (name, tree) in interleave(args.variant, args.rounds):
        log(f"round {r}: {name} ({tree}), load {load()}")
        runs.append({"round": r, "variant": name} | one_round(args, Path(tree).resolve()))
    lines = [f"# Search across a swap: {args.root} from {args.from_version} to {args.to}", "",
             "| round | variant | load | window | requests | p50 ms | p99 ms | max ms |",
             "|---|---|---|---|---|---|---|---|"]
    for run in runs:
        for phase in ("idle", "during", "after"):
            for w in run[phase]:
                lines.append(f"| {run['round']} | {run['variant']} | {run['load_start']} | {phase} | {w['requests']} "
                             f"| {w['p50_ms']:.1f} | {w['p99_ms']:.1f} | {w['max_ms']:.1f} |")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%MZ")
    (args.out_dir / f"swap-pause-{stamp}.json").write_text(json.dumps(runs, indent=1))
    (args.out_dir / f"swap-pause-{stamp}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
