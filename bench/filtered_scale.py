"""Filtered `/search` at scale, two code trees side by side: the served latency (wrk, 1 connection) and the
engine's own stage times of dense, lexical and hybrid searches with a 10 %, 1 % and 0.1 % filter, next to
unfiltered, plus the dense recall@10 of the filtered search against exact filtered search.

Serves one built root (e.g. bench/scale.py's `root-1000000`, whose metadata holds `bucket` 0..99, `year`
2000..2025 and `lang`, 40 % "en") with `python -m service` from each code tree (`--code NAME=DIR`, e.g. the branch
before and after a change), both servers up at once on hard-linked copies of the root, and measures them in
interleaved turns (each condition on A, then on B), so that the shared machine's load hits both alike:
- `repeat` rows: the same filter on every request (what the per-version filter cache serves after the first);
- the `1 % fresh` row: every request's filter is new (`{"bucket": {"in": [7, -1 - i]}}`), so its ids are found
  in the store and prepared for the index on every request.
Recall: in this process, for each filter, the served filtered search (`IndexVersion.search`) of 100 query vectors
against exact search over the matching documents (every list holding a match probed with the selector: every
matching vector scored).

    PYTHONPATH=$PWD python -m bench.filtered_scale --root ROOT --code before=/tmp/before --code after=$PWD
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import numpy as np

from bench import scale_corpus as sc
from bench.runlog import load, log
from bench.scale import search_bodies, wrk

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
FILTERS: dict[str, dict[str, object] | None] = {
    "none": None, "10 %": {"bucket": {"lt": 10}}, "1 %": {"bucket": 7}, "0.1 %": {"bucket": 7, "lang": "de"}}


def serve(code: Path, root: Path, log_file: Path) -> tuple[subprocess.Popen[bytes], str]:
    from tests.conftest import free_port

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = os.environ | {"PYTHONPATH": str(code), "HF_HUB_OFFLINE": "1", "STRATA_INDEX_ROOT": str(root),
                        "STRATA_PORT": str(port), "STRATA_HOST": "127.0.0.1", "STRATA_WATCH_INTERVAL_S": "0",
                        "STRATA_LOG_LEVEL": "warning", "STRATA_MMAP": "1", "STRATA_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "service"], cwd=code, env=env, stdout=log_file.open("wb"),
                            stderr=subprocess.STDOUT)
    while True:
        if proc.poll() is not None:
            raise RuntimeError(log_file.read_text()[-3000:])
        try:
            if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.2)


def bodies(mode: str, flt: dict[str, object] | None, qvecs: np.ndarray, qtexts: list[str], fresh: bool = False
           ) -> list[dict[str, object]]:
    """`bench.scale.search_bodies` with `flt`, or (`fresh`) a filter of its own per query, new to the cache."""
    def filter_of(i: int) -> dict[str, object] | None:
        if flt is None:
            return None
        return {"bucket": {"in": [7, -1 - i]}} if fresh else flt

    return search_bodies(mode, qvecs, qtexts, filter_of)


def stages(url: str, reqs: list[dict[str, object]], fresh: bool, salt: int) -> dict[str, float]:
    """Median server-side stage ms of the requests (a fresh filter made new again by `salt`)."""
    got: dict[str, list[float]] = {"took_ms": [], "dense_ms": [], "lexical_ms": []}
    for i, body in enumerate(reqs[:40]):
        if fresh:
            body = body | {"filter": {"bucket": {"in": [7, -1_000_000 * salt - i]}}}
        r = httpx.post(f"{url}/search", json=body, timeout=120).json()
        got["took_ms"].append(r["took_ms"])
        for k in ("dense_ms", "lexical_ms"):
            got[k].append(r["stages"][k])
    return {k: round(statistics.median(v), 2) for k, v in got.items()}


def recall(folder: Path, qvecs: np.ndarray) -> dict[str, dict[str, float]]:
    from indexer.runtime import faiss_index as fi
    from indexer.runtime.version import IndexVersion

    version = IndexVersion(folder, mmap=True)
    out = {}
    try:
        for name, flt in FILTERS.items():
            if flt is None:
                continue
            version.match(flt)
            match = version.match(flt)  # used again: what a repeated filter is served with (codes gathered)
            got = version.search(qvecs[:100], 10, match)[1]
            every_list = dataclasses.replace(match.prepared, gathered=None)  # not the gathered codes: the lists'
            ref = fi.filtered_search(version.index, qvecs[:100], 10, every_list, probe=version.nlist)[1]
            hits = [len(set(g[g >= 0]) & set(r[r >= 0])) / max(1, (r >= 0).sum()) for g, r in zip(got, ref,
                                                                                                   strict=True)]
            out[name] = {"matches": len(match.ids), "recall@10": round(float(np.mean(hits)), 4),
                         "gathered": match.prepared.gathered is not None}
    finally:
        version.close()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", type=Path, required=True, help="a built root (read only: served from hard links)")
    p.add_argument("--code", action="append", required=True, help="NAME=DIR: a code tree to serve (two)")
    p.add_argument("--work", type=Path, default=Path("/tmp/filtered-scale"))
    p.add_argument("--seconds", type=int, default=5)
    p.add_argument("--quora", type=Path, default=Path(os.environ.get("STRATA_DATA_DIR", "/work/shared/data"))
                   / "quora_duplicate_questions.tsv")
    args = p.parse_args()
    os.environ["STRATA_SCALE_WRK_S"] = str(args.seconds)
    import bench.scale as scale

    scale.WRK_SECONDS = args.seconds
    codes = dict(c.split("=", 1) for c in args.code)
    folder = (args.root / "current").resolve()
    qvecs, qtexts = sc.queries(args.quora), sc.query_texts(args.quora)
    results: dict[str, object] = {"load_start": load(), "root": str(args.root), "version": folder.name,
                                  "codes": codes, "rows": []}
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    servers = {}
    try:
        for name, code in codes.items():
            root = args.work / f"root-{name}"
            (root / "versions").mkdir(parents=True)
            subprocess.run(["cp", "-al", str(folder), str(root / "versions" / folder.name)], check=True)
            (root / "current").symlink_to(Path("versions") / folder.name)
            servers[name] = serve(Path(code), root, args.work / f"server-{name}.log")
        for _, url in servers.values():  # warm-up: the pages an unfiltered search touches
            for q in qvecs[:100]:
                httpx.post(f"{url}/search", json={"vector": q.tolist(), "top_k": 10}, timeout=60)
        conditions = [(m, f, False) for m in ("dense", "lexical", "hybrid") for f in FILTERS] + [("dense", "1 %", True)]
        for salt, (mode, fname, fresh) in enumerate(conditions, start=1):
            reqs = bodies(mode, FILTERS[fname], qvecs, qtexts, fresh)
            for name, (_, url) in servers.items():
                st = stages(url, reqs, fresh, salt)  # also the first request of a repeated filter (cache filled)
                row = {"code": name, "mode": mode, "filter": fname + (" fresh" if fresh else ""), **st,
                       **wrk(url, reqs, 1, args.work), "load": load()}
                log(f"  {row}")
                results["rows"].append(row)  # type: ignore[attr-defined]
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=30)
    results["recall_this_tree"] = recall(folder, qvecs)
    results["load_end"] = load()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%MZ")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"filtered-scale-{stamp}.json"
    out.write_text(json.dumps(results, indent=1))
    log(f"wrote {out}")
    shutil.rmtree(args.work, ignore_errors=True)


if __name__ == "__main__":
    main()
