"""What the default calibration buys on a corpus with graded judgments: index-vs-exact nDCG@10 and ms/query of a
version built by plain `indexer build` (calibrated on query-like probes, `indexer.probes`), beside the same
index at the settings Strata used before — the fixed nprobe 20, and nprobe calibrated with the version's own
documents as queries (the first `--target-recall`) — and at every list probed.

    python bench/calibration_probes.py --root DIR --label scifact

DIR is an index root whose current version was built by `indexer build --data BEIR_DIR` (read, never changed).
Every setting searches the same IVF index (same training), so only nprobe differs. nDCG@10 and ANN recall@10
(index top 10 vs exact top 10) are `indexer.evaluate` on the version's evaluation queries, all searched exactly;
the recall on the build's probes is recomputed from the probes file the build kept. ms/query: single queries,
`--threads` FAISS threads, median of `--rounds` interleaved rounds, with the load printed.

Writes bench/results/calibration-probes-<label>-<stamp>.json and .md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.runlog import load, log  # noqa: E402
from indexer.calibrate import K, calibrate_index, tie_aware_recall, without_self  # noqa: E402
from indexer.compare import paired_bootstrap_ci  # noqa: E402
from indexer.evaluate import evaluate  # noqa: E402
from indexer.metrics import per_query  # noqa: E402
from indexer.probes import PROBES_FILE  # noqa: E402
from indexer.runtime.atomic import write_json_atomic  # noqa: E402
from indexer.runtime.faiss_index import DEFAULT_NPROBE  # noqa: E402
from indexer.runtime.layout import IndexRoot  # noqa: E402
from indexer.runtime.version import IndexVersion  # noqa: E402


def probe_recall(version: IndexVersion, probes: np.ndarray, self_ids: np.ndarray, nprobe: int) -> float:
    exact_scores, exact_ids = without_self(*version.ann.exact_search(probes, K + 1), self_ids, K)
    got_scores, got_ids = (without_self(*version.ann.search(probes, K + 1, search_params={"nprobe": nprobe}), self_ids,
                                        K))
    return tie_aware_recall(got_scores, got_ids, exact_scores, exact_ids)


def ndcg_ci(version: IndexVersion, nprobe: int) -> list[float]:
    """Paired bootstrap 95 % CI (10,000 resamples, queries resampled) of index − exact nDCG@10 at `nprobe`."""
    ev = version.store.graded_eval_set()
    qvecs = version.query_vectors()
    assert ev is not None and qvecs is not None
    self_docs = np.asarray(ev.self_docs, dtype=np.int64)
    _, ids = version.ann.search(qvecs, 11, search_params={"nprobe": nprobe})
    _, exact = version.ann.exact_search(qvecs, 11)
    got = per_query(without_self(ids.astype(np.float32), ids, self_docs, K)[1], ev.qrels)["ndcg_at_10"]
    ref = per_query(without_self(exact.astype(np.float32), exact, self_docs, K)[1], ev.qrels)["ndcg_at_10"]
    deltas = (got - ref)[~np.isnan(got)]
    return list(paired_bootstrap_ci(deltas, 10_000, 0))


def run(root: Path, *, rounds: int, threads: int, target: float) -> dict[str, Any]:
    version = IndexVersion(IndexRoot(root).current_dir())
    manifest = version.manifest
    cal = manifest.index.nprobe_calibration
    if manifest.index.kind != "ivf" or cal is None or cal.probes is None:
        raise SystemExit(f"{version.folder}: not an IVF version calibrated on probes (build it with a plain "
                         f"`indexer build`)")
    with np.load(version.folder / PROBES_FILE) as z:
        probes, self_ids = z["vectors"], z["self_ids"]
    old = calibrate_index(version.ann, target)  # documents as queries: the first --target-recall
    version.ann.set_default("nprobe", cal.nprobe)
    nlist = manifest.index.nlist or 1
    settings = [("fixed nprobe 20 (old default)", DEFAULT_NPROBE),
                (f"documents as probes, target {target} (old --target-recall)", old.nprobe),
                (f"query-like probes, target {cal.target_recall} (new default)", cal.nprobe),
                ("every list (exact over the fp16 codes)", nlist)]
    out: dict[str, Any] = {"root": str(version.folder), "version": manifest.version, "n_docs": manifest.index.ntotal,
                           "n_queries": manifest.data.n_queries, "nlist": nlist, "query_set": manifest.data.eval_source,
                           "probes": cal.probes.model_dump(), "calibration_seconds": cal.seconds,
                           "documents_calibration": old.model_dump(), "threads": threads, "rounds": rounds,
                           "load_start": load(), "rows": {}}
    times: dict[str, list[float]] = {}
    for r in range(rounds):
        for name, nprobe in settings:
            fig = evaluate(version, nprobe=nprobe, threads=threads, exact_budget=None)
            times.setdefault(name, []).append(fig.avg_retrieval_ms)
            if r == 0:
                out["rows"][name] = {
                    "nprobe": fig.nprobe, "ndcg_at_10": fig.ndcg_at_10, "exact_ndcg_at_10": fig.exact_ndcg_at_10,
                    "ndcg_at_10_vs_exact": fig.ndcg_at_10_vs_exact, "ann_recall_at_10": fig.ann_recall_at_10,
                    "probe_recall_at_10": probe_recall(version, probes, self_ids, nprobe),
                    "ndcg_delta_ci95": ndcg_ci(version, nprobe)}
            out["rows"][name]["ms_per_query"] = statistics.median(times[name])
            out["rows"][name]["ms_rounds"] = times[name]
            log(f"round {r + 1}/{rounds} {name}: nprobe {fig.nprobe}, nDCG@10 {fig.ndcg_at_10:.4f} (exact "
                f"{fig.exact_ndcg_at_10:.4f}), ANN recall {fig.ann_recall_at_10:.4f}, {fig.avg_retrieval_ms:.4f} ms; "
                f"load {load()}")
    version.close()
    out["load_end"] = load()
    return out


def render(res: dict[str, Any], label: str, command: str) -> str:
    p = res["probes"]
    lines = [f"# Default calibration on query-like probes: {label} ({res['measured_at']})", "",
             f"Command: `{command}`", "",
             f"Version {res['version']}: {res['n_docs']:,} documents, IVF{res['nlist']} (SQfp16), "
             f"{res['n_queries']} evaluation queries ({res['query_set']}), all searched exactly too. The build's "
             f"probes: {p['n_probes']} {p['source'].replace('_', ' ')} ({p['detail']}; sees the evaluation "
             f"queries: {p['sees_eval_queries']}), calibration {res['calibration_seconds']:.1f}s including their "
             f"encoding. ms/query: single queries, {res['threads']} FAISS thread(s), median of {res['rounds']} "
             f"interleaved rounds; load {res['load_start']} at the start, {res['load_end']} at the end (2 shared "
             f"cores).", "",
             "| nprobe setting | nprobe | top-10 recall on the probes | ANN recall@10 (eval queries) | nDCG@10 | "
             "index − exact nDCG@10 [paired bootstrap 95 % CI] | ms/query |", "|---|---|---|---|---|---|---|"]
    for name, row in res["rows"].items():
        lines.append(f"| {name} | {row['nprobe']} | {row['probe_recall_at_10']:.4f} | {row['ann_recall_at_10']:.4f} "
                     f"| {row['ndcg_at_10'] * 100:.2f} | {row['ndcg_at_10_vs_exact'] * 100:+.2f} "
                     f"[{row['ndcg_delta_ci95'][0] * 100:+.2f}, {row['ndcg_delta_ci95'][1] * 100:+.2f}] | "
                     f"{row['ms_per_query']:.4f} |")
    first = next(iter(res["rows"].values()))
    lines += ["", f"Exact search nDCG@10 on these vectors: {first['exact_ndcg_at_10'] * 100:.2f}.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", type=Path, required=True, help="an index root built by a plain `indexer build`")
    p.add_argument("--label", default="corpus", help="name in the results file (e.g. scifact)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds (median kept)")
    p.add_argument("--threads", type=int, default=1, help="FAISS threads while timing single queries")
    p.add_argument("--target", type=float, default=0.97, help="target of the documents-as-queries calibration")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args(argv)
    res = run(args.root, rounds=args.rounds, threads=args.threads, target=args.target)
    res["measured_at"] = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    command = "python bench/calibration_probes.py " + " ".join(sys.argv[1:] if argv is None else argv)
    text = render(res, args.label, command)
    args.out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out / f"calibration-probes-{args.label}-{stamp}.json", res)
    (args.out / f"calibration-probes-{args.label}-{stamp}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
