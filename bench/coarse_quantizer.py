"""An IVF index's coarse quantizer, flat against HNSW over the same centroids: what a dense query pays to find its
lists at each size, and what the approximate search of the lists costs in recall.

    nice -n 5 python bench/coarse_quantizer.py [--root ~/.cache/strata-scale/work/root-10000000 ...]
        [--queries 200] [--exact-queries 100] [--ef 16,32,64]

For each served version given (`bench/scale.py`'s roots; its current version's index.faiss memory-mapped as
served, one FAISS thread as served), with the version's own calibration probes as queries (held-apart questions'
vectors, `calibration_probes.npz`): an HNSW graph (M 32, efConstruction `--ef-construction`) is built over the
quantizer's centroids in their order, so list i is the same list either way, and, rounds interleaved:

- the quantizer alone: ms per query to find the `nprobe` lists (the version's calibrated nprobe), flat and HNSW
  at each efSearch, and the share of the lists HNSW finds that the flat one finds;
- the whole search (k = 10): ms per query, flat and HNSW quantizer;
- recall@10 against exact search (`faiss_index.exact_search` over the stored vectors, `--exact-queries` of the
  queries) at the version's nprobe and at nprobe + 1, 2: what the calibration would have to add.

Results: bench/results/coarse-quantizer-<stamp>.md and .json, with the load average at start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import faiss  # noqa: E402  (a bench: it measures FAISS itself)

from indexer.runtime.faiss_index import exact_search, read_index  # noqa: E402
from indexer.runtime.layout import IndexRoot  # noqa: E402
from indexer.runtime.manifest import Manifest  # noqa: E402

CACHE = Path.home() / ".cache" / "strata-scale" / "work"


def per_query_ms(fn: object, queries: np.ndarray) -> float:
    t0 = time.perf_counter()
    for q in queries:
        fn(q[None])  # type: ignore[operator]
    return (time.perf_counter() - t0) * 1000 / len(queries)


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(t)) / len(t) for f, t in zip(found.tolist(), truth.tolist(), strict=True)]))


def one_version(root: Path, n_queries: int, n_exact: int, efs: list[int], ef_construction: int, rounds: int
                ) -> dict[str, object]:
    folder = IndexRoot(root).current_dir()
    manifest = Manifest.load(folder)
    index = read_index(folder / "index.faiss", mmap=True)
    ivf = faiss.extract_index_ivf(index)
    nprobe = int(manifest.index.nprobe or ivf.nprobe)
    flat = ivf.quantizer
    centroids = flat.reconstruct_n(0, flat.ntotal)
    queries = np.ascontiguousarray(np.load(folder / "calibration_probes.npz")["vectors"][:n_queries], np.float32)
    t0 = time.perf_counter()
    hnsw = faiss.IndexHNSWFlat(centroids.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
    hnsw.hnsw.efConstruction = ef_construction
    hnsw.add(centroids)
    build_s = time.perf_counter() - t0
    _, flat_lists = flat.search(queries, nprobe)
    same: dict[int, float] = {}
    for ef in efs:
        hnsw.hnsw.efSearch = ef
        _, lists = hnsw.search(queries, nprobe)
        same[ef] = float(np.mean([len(set(a) & set(b)) / nprobe for a, b in zip(lists.tolist(), flat_lists.tolist(),
                                                                                 strict=True)]))
    times: dict[str, list[float]] = {}

    def timed(name: str, fn: object) -> None:
        times.setdefault(name, []).append(per_query_ms(fn, queries))

    ivf.nprobe = nprobe
    for r in range(rounds):  # interleaved, the order turned each round
        sides = ["flat", *efs] if r % 2 == 0 else [*efs, "flat"]
        for side in sides:
            if side == "flat":
                ivf.quantizer = flat
                timed("quantizer flat", lambda q: flat.search(q, nprobe))
                timed("search flat", lambda q: index.search(q, 10))
            else:
                hnsw.hnsw.efSearch = side
                ivf.quantizer = hnsw
                timed(f"quantizer hnsw ef{side}", lambda q: hnsw.search(q, nprobe))
                timed(f"search hnsw ef{side}", lambda q: index.search(q, 10))
    exact = queries[:n_exact]
    t0 = time.perf_counter()
    _, truth = exact_search(index, exact, 10)
    exact_s = time.perf_counter() - t0
    recalls: dict[str, dict[int, float]] = {}
    for side in ["flat", *efs]:
        if side == "flat":
            ivf.quantizer = flat
        else:
            ivf.quantizer, hnsw.hnsw.efSearch = hnsw, side
        name = "flat" if side == "flat" else f"hnsw ef{side}"
        recalls[name] = {}
        for p in (nprobe, nprobe + 1, nprobe + 2):
            ivf.nprobe = p
            recalls[name][p] = round(recall(index.search(exact, 10)[1], truth), 4)
    ivf.quantizer, ivf.nprobe = flat, nprobe
    return {"root": str(root), "version": folder.name, "ntotal": int(index.ntotal), "nlist": int(ivf.nlist),
            "nprobe": nprobe, "factory": manifest.index.factory, "queries": len(queries), "exact_queries": len(exact),
            "hnsw_build_s": round(build_s, 2), "exact_s": round(exact_s, 1),
            "same_lists": {f"ef{k}": round(v, 4) for k, v in same.items()},
            "ms": {k: {"median": round(statistics.median(v), 3), "rounds": [round(x, 3) for x in v]}
                   for k, v in times.items()},
            "recall_at_10": recalls}


def render(report: dict[str, object]) -> str:
    lines = [f"# Coarse quantizer: flat against HNSW over the same centroids ({report['stamp']})", "",
             f"`{report['command']}`; load average (1/5/15 min) at start {report['load_start']}, at end "
             f"{report['load_end']} on {os.cpu_count()} cores; one FAISS thread, lists memory-mapped as served. "
             "ms per query, medians over interleaved rounds (compare the sides: the machine's load weighs on both).",
             ""]
    for v in report["versions"]:  # type: ignore[union-attr]
        lines += [f"## {v['ntotal']:,} vectors, {v['factory']}, nprobe {v['nprobe']}", "",
                  f"Version `{v['version']}` of `{v['root']}`; {v['queries']} queries (its calibration probes); the "
                  f"HNSW graph over {v['nlist']:,} centroids built in {v['hnsw_build_s']} s.", "",
                  "| quantizer | find the lists, ms | whole search (k=10), ms | lists as flat finds them | "
                  + " | ".join(f"recall@10 nprobe {p}" for p in v["recall_at_10"]["flat"]) + " |",
                  "|---|---|---|---|" + "---|" * len(v["recall_at_10"]["flat"])]
        for name, rec in v["recall_at_10"].items():
            same = "1.0" if name == "flat" else v["same_lists"][name.split()[-1]]
            lines.append(f"| {name} | {v['ms'][f'quantizer {name}']['median']} | {v['ms'][f'search {name}']['median']} "
                         f"| {same} | " + " | ".join(str(x) for x in rec.values()) + " |")
        lines += ["", f"Recall against exact search over the stored vectors for {v['exact_queries']} queries "
                  f"({v['exact_s']} s).", ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, action="append", help="a served root (repeatable; default: bench/scale.py's "
                    "1M and 10M roots)")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--exact-queries", type=int, default=100)
    ap.add_argument("--ef", default="16,32,64", help="HNSW efSearch values")
    ap.add_argument("--ef-construction", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results")
    a = ap.parse_args()
    faiss.omp_set_num_threads(1)
    roots = a.root or [CACHE / "root-1000000", CACHE / "root-10000000"]
    report: dict[str, object] = {"command": "python bench/coarse_quantizer.py " + " ".join(sys.argv[1:]),
                                 "load_start": "/".join(f"{x:.2f}" for x in os.getloadavg()), "versions": []}
    for root in roots:
        print(f"{root} ...", file=sys.stderr, flush=True)
        report["versions"].append(one_version(root, a.queries, a.exact_queries, [int(e) for e in a.ef.split(",")],  # type: ignore[union-attr]
                                              a.ef_construction, a.rounds))
    report["load_end"] = "/".join(f"{x:.2f}" for x in os.getloadavg())
    report["stamp"] = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    text = render(report)
    print(text)
    a.out.mkdir(parents=True, exist_ok=True)
    stem = a.out / f"coarse-quantizer-{report['stamp']}"
    stem.with_suffix(".md").write_text(text)
    stem.with_suffix(".json").write_text(json.dumps(report, indent=1))
    print(f"wrote {stem}.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
