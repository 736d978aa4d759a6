"""The sharded backend's filtered search, two code revisions side by side on the same sharded version: the filter's
ids sent with every request (before) against sent once into Ray's object store and prepared once per shard (after).

    PYTHONPATH=$PWD STRATA_DATA_DIR=../shared/data python -m bench.sharded_filter_ab 10000000 --before f4f1dbe

The version is the newest 2-shard one `bench/sharded_scale.py` served (its hard-linked root). Each revision is served
by `python -m service sharded` from its own checkout (`--before`: a git worktree of that commit; after: this tree),
one at a time (two Ray instances with 7.8 GB of shards each do not fit beside each other), alternated `--rounds`
times so the machine's load weighs on both alike; per round, wrk at 1 and 8 connections for dense and hybrid with
the 1 % filter and dense without one (the control: unchanged code). Results:
`bench/results/sharded-filter-ab-STAMP.{md,json}`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import httpx

from bench import scale_corpus as sc
from bench.runlog import load, log
from bench.scale import FILTER, REPO, RESULTS, search_bodies, start, wrk


def serve(checkout: Path, root: Path, tmp: Path) -> tuple[subprocess.Popen[bytes], str, float]:
    return start(root, tmp, {"STRATA_MMAP": "1", "STRATA_THREADS": "1"}, ("sharded",), checkout)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("n", type=int)
    p.add_argument("--before", required=True, help="the git revision of the before side")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--work", type=Path, default=sc.cache_dir() / "work")
    args = p.parse_args()
    from indexer.runtime.manifest import Manifest
    from indexer.runtime.paths import data_dir

    roots = sorted(args.work.glob("serve-*"), key=lambda r: r.name)
    root = next(r for r in reversed(roots) if (r / "current").exists()
                and len(Manifest.load(r / "current").index.shards) == 2
                and Manifest.load(r / "current").index.ntotal >= args.n)
    before = Path(f"/tmp/strata-ab-{args.before}")
    if not before.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(before), args.before], cwd=REPO, check=True)
    quora = data_dir() / "quora_duplicate_questions.partial.tsv.gz"
    qvecs, qtexts = sc.queries(quora), sc.query_texts(quora)
    configs = {"dense 1 %": search_bodies("dense", qvecs, qtexts, lambda i: FILTER),
               "hybrid 1 %": search_bodies("hybrid", qvecs, qtexts, lambda i: FILTER),
               "dense (control)": search_bodies("dense", qvecs, qtexts)}
    tmp = args.work / "tmp"
    tmp.mkdir(exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%MZ")
    rows: list[dict[str, object]] = []
    for rnd in range(args.rounds):
        for side, checkout in (("before", before), ("after", REPO)):
            proc, url, startup = serve(checkout, root, tmp)
            try:
                for q in qvecs[:200]:
                    httpx.post(f"{url}/search", json={"vector": q.tolist(), "top_k": 10}, timeout=60)
                for name, bodies in configs.items():
                    httpx.post(f"{url}/search", json=bodies[0], timeout=120).raise_for_status()  # the filter's 1st use
                    for conns in (1, 8):
                        r = wrk(url, bodies, conns, tmp)
                        row = {"round": rnd + 1, "side": side, "config": name, "conns": conns, **r, "load": load(),
                               "startup_s": round(startup, 1)}
                        log(str(row))
                        rows.append(row)
            finally:
                proc.terminate()
                proc.wait(timeout=90)
    out = {"stamp": stamp, "n": args.n, "root": str(root), "before": args.before,
           "after": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                   text=True).stdout.strip(), "rows": rows}
    name = f"sharded-filter-ab-{stamp}"
    (RESULTS / f"{name}.json").write_text(json.dumps(out, indent=1))
    lines = [f"# Sharded filtered search, before ({args.before}) and after ({out['after']}), {args.n:,} documents, "
             f"2 shards ({stamp})", "", f"`PYTHONPATH=$PWD STRATA_DATA_DIR=../shared/data python -m "
             f"bench.sharded_filter_ab {args.n} --before {args.before} --rounds {args.rounds}`: version in {root}, "
             "revisions served one at a time and alternated; wrk "
             "p50/p99 ms and req/s; the shards, the API and wrk share 2 cores.", "",
             "| config | conns | side | round | p50 ms | p99 ms | req/s | errors | load |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (str(r["config"]), r["conns"], r["side"] != "before", r["round"])):
        lines.append(f"| {r['config']} | {r['conns']} | {r['side']} | {r['round']} | {r['p50_ms']} | {r['p99_ms']} | "
                     f"{r['rps']} | {r['errors']} | {r['load']} |")
    (RESULTS / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
