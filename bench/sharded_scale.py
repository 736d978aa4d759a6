"""The same N documents served by one process and as N shards on Ray, side by side: parity and cost.

    PYTHONPATH=$PWD STRATA_DATA_DIR=../shared/data python -m bench.sharded_scale 10000000 --shards 2 4

For a size `bench/scale.py` has built (its root under the scale cache), the newest unsharded version there is split
with `indexer shard --shards S` (timed; a split that exists already is reused), then served two ways in turn, each
from a root of its own whose version folder is hard-linked (no second copy on disk):

- **one process**: `python -m service` (the local backend, memory-mapped, STRATA_THREADS=1), as `bench/scale.py`
  serves it;
- **S shards**: `python -m service sharded` (its own local Ray; one replica per shard holding its shard in memory;
  the API process encodes, runs the lexical side and fuses).

For each: startup until `/ready`, memory (the API process, the shard replicas, the whole process tree; anonymous
and file-backed apart), wrk latency at 1 and 8 connections for dense, lexical and hybrid with and without the 1 %
filter (`bench/scale.py`'s bodies), and the answers to 100 queries of every configuration. **Parity**: the share of
queries whose ranked ids are identical between the two, and the largest score difference. Results:
`bench/results/sharded-scale-N-STAMP.{md,json}`.

On this 2-core machine the shards, the API and the load generator share the same two cores: the latency of the
sharded service here is the cost of its fan-out (Ray handle calls, serialisation, the merge), not a speed-up, which
needs the shards on machines of their own.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx
import numpy as np
import psutil

from bench import scale_corpus as sc
from bench.common import load, log, rss, stop
from bench.scale import FILTER, REPO, RESULTS, _env, latencies, search_bodies, start

CONFIGS = [(mode, filtered) for mode in ("dense", "lexical", "hybrid") for filtered in (False, True)]


def unsharded_version(root: Path) -> str:
    """The newest version of the root kept as one index file (what `indexer shard` splits)."""
    from indexer.runtime.layout import IndexRoot
    from indexer.runtime.manifest import Manifest

    ir = IndexRoot(root)
    for name in reversed(ir.versions()):
        if not Manifest.load(ir.version_dir(name)).index.shards:
            return name
    raise SystemExit(f"{root} has no unsharded version: build it with `python -m bench.scale N` first")


def sharded_version(root: Path, parent: str, shards: int) -> tuple[str, dict[str, object]]:
    """The version splitting `parent` into `shards` (made by `indexer shard`, timed, unless it exists)."""
    from indexer.runtime.layout import IndexRoot
    from indexer.runtime.manifest import Manifest

    ir = IndexRoot(root)
    for name in ir.versions():
        m = Manifest.load(ir.version_dir(name))
        if m.parent_version == parent and len(m.index.shards) == shards:
            return name, {"reused": True}
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "indexer.cli", "shard", "--root", str(root), "--version",
           parent, "--shards", str(shards), "--keep", "10"]
    log(f"splitting {parent} into {shards} shards ({' '.join(cmd[2:])}), load {load()}")
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-3000:])
    wall = time.perf_counter() - t0
    peak = next(int(ln.split(":")[1]) for ln in r.stderr.splitlines() if "Maximum resident set size" in ln)
    name = next(n for n in reversed(ir.versions()) if Manifest.load(ir.version_dir(n)).parent_version == parent)
    return name, {"wall_s": round(wall, 1), "peak_rss_mib": round(peak / 1024), "load": load(),
                  "said": r.stdout.strip()}


def serving_root(work: Path, root: Path, version: str) -> Path:
    """A root of its own serving `version`: its folder hard-linked (no copy), `current` pointing at it."""
    from indexer.runtime.layout import IndexRoot

    out = work / f"serve-{version}"
    ir = IndexRoot(out)
    if not ir.version_dir(version).is_dir():
        ir.versions_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-al", str(IndexRoot(root).version_dir(version)), str(ir.version_dir(version))],
                       check=True)
    ir.set_current(version)
    shutil.rmtree(out / "writes", ignore_errors=True)
    return out


def tree_memory(pid: int) -> dict[str, float]:
    """MiB resident in the server's process tree: the API process, the shard replicas (Serve's replica actors),
    everything (Ray's own processes included); anonymous memory (the processes' own) and total."""
    api = rss(pid)
    out = {"api_total": api.total, "api_anon": api.anon, "replicas_total": 0, "replicas_anon": 0,
           "tree_total": api.total, "tree_anon": api.anon, "replicas": 0}
    for child in psutil.Process(pid).children(recursive=True):
        try:
            mem = rss(child.pid)
            replica = any("ServeReplica" in part for part in child.cmdline())
        except (OSError, psutil.Error):
            continue
        out["tree_total"] += mem.total
        out["tree_anon"] += mem.anon
        if replica:
            out["replicas"] += 1
            out["replicas_total"] += mem.total
            out["replicas_anon"] += mem.anon
    return {k: (v if k == "replicas" else round(v / 2**20)) for k, v in out.items()}


def answers(url: str, qvecs: np.ndarray, qtexts: list[str]) -> dict[str, list[list[tuple[int, float]]]]:
    """The hits of 100 queries in every configuration, one request each."""
    out: dict[str, list[list[tuple[int, float]]]] = {}
    with httpx.Client(base_url=url, timeout=120) as c:
        for mode, filtered in CONFIGS:
            rows = []
            for body in search_bodies(mode, qvecs, qtexts, (lambda i: FILTER) if filtered else (lambda i: None)):
                r = c.post("/search", json={**body, "mode": mode})
                r.raise_for_status()
                rows.append([(h["id"], h["score"]) for h in r.json()["hits"]])
            out[f"{mode}{' 1 %' if filtered else ''}"] = rows
    return out


def serve(label: str, root: Path, tmp: Path, qvecs: np.ndarray, qtexts: list[str], args: tuple[str, ...],
          env: dict[str, str]) -> dict[str, object]:
    log(f"{label}: starting, load {load()}")
    proc, url, startup = start(root, tmp, {"STRATA_MMAP": "1", "STRATA_THREADS": "1"} | env, args)
    try:
        out: dict[str, object] = {"startup_s": round(startup, 2)}
        for q in qvecs[:200]:  # warm-up, as bench/scale.py
            httpx.post(f"{url}/search", json={"vector": q.tolist(), "top_k": 10}, timeout=60)
        out["memory_mib_steady"] = tree_memory(proc.pid)
        log(f"{label}: up in {startup:.1f}s, {out['memory_mib_steady']}")
        out["answers"] = answers(url, qvecs, qtexts)
        out["search"] = latencies(url, qvecs, qtexts, tmp)
        out["memory_mib_after"] = tree_memory(proc.pid)
        return out
    finally:
        stop(proc, 90)  # the sharded service takes its Ray deployments down first


def parity(a: dict[str, list[list[tuple[int, float]]]], b: dict[str, list[list[tuple[int, float]]]]
           ) -> dict[str, dict[str, float]]:
    out = {}
    for key in a:
        same = [[i for i, _ in x] == [i for i, _ in y] for x, y in zip(a[key], b[key], strict=True)]
        diffs = [abs(s - t) for x, y in zip(a[key], b[key], strict=True) for (_, s), (_, t) in zip(x, y, strict=False)]
        out[key] = {"identical_ranked_lists": round(float(np.mean(same)), 4), "queries": len(same),
                    "max_score_diff": float(max(diffs, default=0.0)),
                    "hits": sum(len(x) for x in a[key])}
    return out


def report(res: dict[str, object]) -> str:
    lines = [f"# {res['n_docs']:,} documents: one process and Ray shards ({res['stamp']})", "",
             f"`PYTHONPATH=$PWD STRATA_DATA_DIR=../shared/data python -m bench.sharded_scale {res['n_docs']} --shards "
             f"{' '.join(str(s) for s in res['shard_counts'])}` — version {res['parent']} "
             f"({res['index']}), served memory-mapped with STRATA_THREADS=1; the shards, the API and wrk share this "
             f"machine's 2 cores.", ""]
    runs: dict[str, dict[str, object]] = res["runs"]  # type: ignore[assignment]
    for label, r in runs.items():
        lines += [f"## {label}", "", f"- version: {r.get('version')}, split: {r.get('split')}",
                  f"- startup {r['startup_s']} s; memory MiB, steady: {r['memory_mib_steady']}; after the runs: "
                  f"{r['memory_mib_after']}"]
        if "parity" in r:
            lines += ["", "| parity with one process | identical ranked lists | queries | hits | max score diff |",
                      "|---|---|---|---|---|"]
            for key, p in r["parity"].items():  # type: ignore[union-attr]
                lines.append(f"| {key} | {p['identical_ranked_lists']} | {p['queries']} | {p['hits']} | "
                             f"{p['max_score_diff']:.2g} |")
        lines += ["", "| mode | filter | conns | p50 ms | p99 ms | req/s | errors | first request ms | load |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for s in r["search"]:  # type: ignore[union-attr]
            lines.append(f"| {s['mode']} | {s['filter']} | {s['conns']} | {s['p50_ms']} | {s['p99_ms']} | {s['rps']} | "
                         f"{s['errors']} | {s.get('first_request_ms') or ''} | {s['load']} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("n", type=int, help="the size bench/scale.py built")
    p.add_argument("--shards", type=int, nargs="+", default=[2])
    p.add_argument("--work", type=Path, default=sc.cache_dir() / "work")
    args = p.parse_args()
    from indexer.runtime.manifest import Manifest
    from indexer.runtime.paths import data_dir

    quora = data_dir() / "quora_duplicate_questions.partial.tsv.gz"
    root = args.work / f"root-{args.n}"
    parent = unsharded_version(root)
    manifest = Manifest.load(root / "versions" / parent)
    qvecs, qtexts = sc.queries(quora), sc.query_texts(quora)
    tmp = args.work / "tmp"
    tmp.mkdir(exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%MZ")
    res: dict[str, object] = {"n_docs": manifest.index.ntotal, "stamp": stamp, "parent": parent,
                              "index": manifest.index.factory, "shard_counts": args.shards, "runs": {}}
    runs: dict[str, dict[str, object]] = res["runs"]  # type: ignore[assignment]
    name = f"sharded-scale-{manifest.index.ntotal}-{stamp}"

    def save() -> None:
        (RESULTS / f"{name}.json").write_text(json.dumps(res, indent=1))
        (RESULTS / f"{name}.md").write_text(report(res))

    single = serve("one process", serving_root(args.work, root, parent), tmp, qvecs, qtexts, (), {})
    single["version"] = parent
    single_answers = single.pop("answers")
    runs["one process"] = single
    save()
    for shards in args.shards:
        version, split = sharded_version(root, parent, shards)
        r = serve(f"{shards} shards", serving_root(args.work, root, version), tmp, qvecs, qtexts, ("sharded",), {})
        r |= {"version": version, "split": split,
              "parity": parity(single_answers, r.pop("answers"))}  # type: ignore[arg-type]
        runs[f"{shards} shards on Ray"] = r
        save()
    print(report(res))
    os.sync()


if __name__ == "__main__":
    main()
