"""The same N documents served by one process and as N shards on Ray, side by side: parity and cost; and writes.

    PYTHONPATH=$PWD STRATA_DATA_DIR=../shared/data python -m bench.sharded_scale 10000000 --shards 2 4
    PYTHONPATH=$PWD nice python -m bench.sharded_scale 20000 --writes 12  # write throughput, 2 shards vs one process

For a size `bench/scale.py` has built (its root in the scale cache), its newest unsharded version is split with
`indexer shard --shards S` (timed; reused if it exists) and served from roots of their own (the version hard-linked)
by `python -m service` (memory-mapped, STRATA_THREADS=1) and `python -m service sharded` (its own local Ray, one
replica per shard holding it in memory). For each: startup until `/ready`, memory (API, replicas, whole tree;
anonymous and file-backed), wrk latency at 1 and 8 connections for dense, lexical and hybrid with and without the
1 % filter (`bench/scale.py`'s bodies), and **parity**: the share of 100 queries whose ranked ids are identical, the
largest score difference. `--writes B`: an IVF version of the first N rows of the 1M scale corpus (its vectors), split
in 2; both servers up at once (compaction off); in interleaved rounds, B batches of 256 documents with vectors (2 PUTs
of 128) from 4 writers to each: docs/s side by side. Results: `bench/results/sharded-*.{md,json}`. On 2 cores shards,
API and load generator share them: the sharded latency is the fan-out's cost, not a speed-up."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil

from bench import scale_corpus as sc
from bench.common import interleave, load, log, median, rss, safe_ratio, stop
from bench.scale import FILTER, REPO, RESULTS, _env, latencies, search_bodies, start
from indexer.runtime.layout import IndexRoot
from indexer.runtime.manifest import Manifest
from indexer.runtime.paths import data_dir
from service.schemas.documents import MAX_WRITE_DOCS

CONFIGS = [(mode, filtered) for mode in ("dense", "lexical", "hybrid") for filtered in (False, True)]


def unsharded_version(root: Path) -> str:
    """The newest version of the root kept as one index file (what `indexer shard` splits)."""
    ir = IndexRoot(root)
    for name in reversed(ir.versions()):
        if not Manifest.load(ir.version_dir(name)).index.shards:
            return name
    raise SystemExit(f"{root} has no unsharded version: build it with `python -m bench.scale N` first")


def sharded_version(root: Path, parent: str, shards: int) -> tuple[str, dict[str, object]]:
    """The version splitting `parent` into `shards` (made by `indexer shard`, timed, unless it exists)."""
    ir = IndexRoot(root)
    for name in ir.versions():
        m = Manifest.load(ir.version_dir(name))
        if m.parent_version == parent and len(m.index.shards) == shards:
            return name, {"reused": True}
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "indexer.cli", "shard", "--root", str(root), "--version",
           parent, "--shards", str(shards), "--keep", "10"]
    log(f"splitting {parent} into {shards} shards ({' '.join(cmd[2:])}), load {load()}")
    t0, r = time.perf_counter(), subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-3000:])
    peak = next(int(ln.split(":")[1]) for ln in r.stderr.splitlines() if "Maximum resident set size" in ln)
    name = next(n for n in reversed(ir.versions()) if Manifest.load(ir.version_dir(n)).parent_version == parent)
    return name, {"wall_s": round(wall, 1), "peak_rss_mib": round(peak / 1024), "load": load(),
                  "said": r.stdout.strip()}


def serving_root(work: Path, root: Path, version: str) -> Path:
    """A root of its own serving `version`: its folder hard-linked (no copy), `current` pointing at it."""
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
    out = dict.fromkeys([f"{a}_{b}" for a in ("api", "replicas", "tree") for b in ("total", "anon")] + ["replicas"], 0)
    for proc in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
        try:
            mem, replica = rss(proc.pid), any("ServeReplica" in part for part in proc.cmdline())
        except (OSError, psutil.Error):
            continue
        out["replicas"] += replica
        for part in ["tree", *(["api"] if proc.pid == pid else []), *(["replicas"] if replica else [])]:
            out[f"{part}_total"], out[f"{part}_anon"] = out[f"{part}_total"] + mem.total, out[f"{part}_anon"] + mem.anon
    return {k: (v if k == "replicas" else round(v / 2**20)) for k, v in out.items()}


def answers(url: str, qvecs: np.ndarray, qtexts: list[str]) -> dict[str, list[list[tuple[int, float]]]]:
    """The hits of 100 queries in every configuration, one request each."""
    with httpx.Client(base_url=url, timeout=120) as c:
        return {f"{mode}{' 1 %' if filtered else ''}": [[(h["id"], h["score"]) for h in c.post(
            "/search", json={**body, "mode": mode}).raise_for_status().json()["hits"]] for body in search_bodies(
            mode, qvecs, qtexts, (lambda i: FILTER) if filtered else (lambda i: None))] for mode, filtered in CONFIGS}


def serve(label: str, root: Path, tmp: Path, qvecs: np.ndarray, qtexts: list[str], args: tuple[str, ...]
          ) -> dict[str, object]:
    log(f"{label}: starting, load {load()}")
    proc, url, startup = start(root, tmp, {"STRATA_MMAP": "1", "STRATA_THREADS": "1"}, args)
    try:
        for q in qvecs[:200]:  # warm-up, as bench/scale.py
            httpx.post(f"{url}/search", json={"vector": q.tolist(), "top_k": 10}, timeout=60)
        out: dict[str, object] = {"startup_s": round(startup, 2), "memory_mib_steady": tree_memory(proc.pid)}
        log(f"{label}: up in {startup:.1f}s, {out['memory_mib_steady']}")
        out |= {"answers": answers(url, qvecs, qtexts), "search": latencies(url, qvecs, qtexts, tmp)}
        return out | {"memory_mib_after": tree_memory(proc.pid)}
    finally:
        stop(proc, 90)  # the sharded service takes its Ray deployments down first


def parity(a: dict[str, list[list[tuple[int, float]]]], b: dict[str, list[list[tuple[int, float]]]]
           ) -> dict[str, dict[str, float]]:
    out = {}
    for key in a:
        same = [[i for i, _ in x] == [i for i, _ in y] for x, y in zip(a[key], b[key], strict=True)]
        diffs = [abs(s - t) for x, y in zip(a[key], b[key], strict=True) for (_, s), (_, t) in zip(x, y, strict=False)]
        out[key] = {"identical_ranked_lists": round(float(np.mean(same)), 4), "queries": len(same),
                    "max_score_diff": float(max(diffs, default=0.0)), "hits": sum(len(x) for x in a[key])}
    return out


def report(res: dict[str, Any]) -> str:
    lines = [f"# {res['n_docs']:,} documents: one process and Ray shards ({res['stamp']})", "",
             f"`PYTHONPATH=$PWD STRATA_DATA_DIR=../shared/data python -m bench.sharded_scale {res['n_docs']} --shards "
             f"{' '.join(str(s) for s in res['shard_counts'])}` — version {res['parent']} "
             f"({res['index']}), served memory-mapped with STRATA_THREADS=1; the shards, the API and wrk share this "
             f"machine's 2 cores.", ""]
    for label, r in res["runs"].items():
        lines += [f"## {label}", "", f"- version: {r.get('version')}, split: {r.get('split')}",
                  f"- startup {r['startup_s']} s; memory MiB, steady: {r['memory_mib_steady']}; after the runs: "
                  f"{r['memory_mib_after']}", "", *(["| parity with one process | identical ranked lists | queries | "
                  "hits | max score diff |", "|---|---|---|---|---|"] if "parity" in r else []),
                  *(f"| {key} | {p['identical_ranked_lists']} | {p['queries']} | {p['hits']} | "
                    f"{p['max_score_diff']:.2g} |" for key, p in r.get("parity", {}).items()),
                  "", "| mode | filter | conns | p50 ms | p99 ms | req/s | errors | first request ms | load |",
                  "|---|---|---|---|---|---|---|---|---|",
                  *(f"| {s['mode']} | {s['filter']} | {s['conns']} | {s['p50_ms']} | {s['p99_ms']} | {s['rps']} | "
                    f"{s['errors']} | {s.get('first_request_ms') or ''} | {s['load']} |" for s in r["search"]), ""]
    return "\n".join(lines)


def write_rounds(quora: Path, n: int, batches: int, work: Path, rounds: int = 5, writers: int = 4) -> dict[str, Any]:
    """Batches of 256 documents with vectors, the same to one process and to 2 shards, interleaved; then a search."""
    root = work / f"writes-{n}"
    if not (root / "current").exists():  # IVF at any N (sharding needs it), no lexical index: the write path alone
        subprocess.run([sys.executable, "-m", "indexer.cli", "build", "--model", str(sc.encoder_dir()), "--data",
                        str(sc.corpus(quora, 1_000_000)), "--rows", str(n), "--root", str(root), "--index", "ivf",
                        "--no-eval", "--no-lexical", "--threads", "2"], cwd=REPO, env=_env(), check=True)
    env, parent = {"STRATA_COMPACT_INTERVAL_S": "0", "STRATA_MMAP": "1", "STRATA_THREADS": "1"}, unsharded_version(root)
    servers = {name: start(serving_root(work, root, v), work, env, args) for name, v, args in
               (("one process", parent, ()), ("2 shards", sharded_version(root, parent, 2)[0], ("sharded",)))}
    out: dict[str, Any] = {"n_docs": n, "writers": writers, "load_before": load(), "rounds": []}
    try:
        for r, name in interleave(list(servers), rounds):
            vecs = np.random.default_rng(r).normal(size=(batches * 256, 384)).astype(np.float32)  # a round's data
            docs = [{"id": n + r * batches * 256 + i, "text": f"written {r} {i}", "metadata": {"bucket": i % 100},
                     "vector": v.tolist()} for i, v in enumerate(vecs)]  # a batch: 2 PUTs of MAX_WRITE_DOCS (128)
            with httpx.Client(base_url=servers[name][1], timeout=120) as c, ThreadPoolExecutor(writers) as pool:
                t0 = time.perf_counter()
                list(pool.map(lambda batch: [c.put("/documents", json={"documents": batch[i : i + MAX_WRITE_DOCS]})  # noqa: B023
                                             .raise_for_status() for i in range(0, 256, MAX_WRITE_DOCS)],
                              [docs[b : b + 256] for b in range(0, len(docs), 256)]))
                rate, t0 = round(batches * 256 / (time.perf_counter() - t0)), time.perf_counter()
                c.post("/search", json={"vector": vecs[0].tolist(), "top_k": 10}).raise_for_status()  # shards catch up
                out["rounds"].append({"round": r, "system": name, "docs_per_s": rate, "load": load(),
                                      "search_after_ms": round((time.perf_counter() - t0) * 1000, 1)})
    finally:
        list(map(lambda s: stop(s[0], 90), servers.values()))  # the sharded one takes its Ray deployments down
    per = {s: median(x["docs_per_s"] for x in out["rounds"] if x["system"] == s) for s in servers}
    return out | {"median_docs_per_s": per, "sharded_over_one": safe_ratio(per["2 shards"], per["one process"])}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("n", type=int, help="the size bench/scale.py built")
    p.add_argument("--shards", type=int, nargs="+", default=[2])
    p.add_argument("--work", type=Path, default=sc.cache_dir() / "work")
    p.add_argument("--writes", type=int, metavar="B", help="write throughput instead: B batches a round")
    args = p.parse_args()
    quora, stamp = data_dir() / "quora_duplicate_questions.partial.tsv.gz", f"{datetime.now(timezone.utc):%Y%m%dT%H%MZ}"
    if args.writes:
        w = write_rounds(quora, args.n, args.writes, args.work)
        md = "\n".join([f"# Writes: one process and 2 Ray shards, {args.n:,} documents served ({stamp})", "",
                        f"`PYTHONPATH=$PWD nice python -m bench.sharded_scale {args.n} --writes {args.writes}`: per "
                        f"round and system {args.writes} batches of 256 documents with vectors (2 PUTs of 128), "
                        f"{w['writers']} writers, compaction off; load before: {w['load_before']}", "",
                        "| round | system | docs/s | first search after, ms | load after |", "|---|---|---|---|---|",
                        *(f"| {x['round']} | {x['system']} | {x['docs_per_s']} | {x['search_after_ms']} | {x['load']} |"
                          for x in w["rounds"]),
                        "", f"Median docs/s: {w['median_docs_per_s']}; 2 shards / one process: "
                        f"{w['sharded_over_one']}", ""])
        (RESULTS / f"sharded-writes-{args.n}-{stamp}.json").write_text(json.dumps(w, indent=1))
        (RESULTS / f"sharded-writes-{args.n}-{stamp}.md").write_text(md)
        return print(md)
    parent = unsharded_version(root := args.work / f"root-{args.n}")
    manifest = Manifest.load(root / "versions" / parent)
    qvecs, qtexts = sc.queries(quora), sc.query_texts(quora)
    (tmp := args.work / "tmp").mkdir(exist_ok=True)
    res: dict[str, Any] = {"n_docs": manifest.index.ntotal, "stamp": stamp, "parent": parent,
                           "index": manifest.index.factory, "shard_counts": args.shards, "runs": {}}
    name, first = f"sharded-scale-{manifest.index.ntotal}-{stamp}", None
    for shards in [1, *args.shards]:  # one process first: the shards' parity is with its answers
        version, split = (parent, None) if shards == 1 else sharded_version(root, parent, shards)
        label = "one process" if shards == 1 else f"{shards} shards on Ray"
        r = serve(label, serving_root(args.work, root, version), tmp, qvecs, qtexts, ("sharded",) if shards > 1 else ())
        got, r["version"], r["split"] = r.pop("answers"), version, split
        r |= {} if first is None else {"parity": parity(first, got)}  # type: ignore[arg-type]
        first = first or got
        res["runs"][label] = r
        (RESULTS / f"{name}.json").write_text(json.dumps(res, indent=1))
        (RESULTS / f"{name}.md").write_text(report(res))
    print(report(res))
    os.sync()


if __name__ == "__main__":
    main()
