"""Does `indexer build --target-recall` give each encoder the nprobe it needs? Built versions, compared at the
default nprobe and at the nprobe calibrated for each target, on their own evaluation queries.

For each `--root LABEL=DIR` (an index root built by `indexer build`; its current version is used, read-only):
1. `indexer.calibrate.calibrate_nprobe` at every `--target` — label-free, on 2,000 of the version's own
   documents as queries, exactly what a build with `--target-recall` stores;
2. `indexer.evaluate.evaluate` at the default nprobe and at each calibrated nprobe — MRR@10, the ANN recall@10 of
   the *evaluation* queries against exact search (a check the calibration never saw), and single-query
   retrieval time with `--threads` FAISS threads. The rounds are interleaved across roots, `--rounds` times,
   and the median time is kept, since a training run may share the cores (the load is printed).

    python bench/nprobe_calibration.py --root "stock mean=DIR1" --root "trained mean=DIR2" --target 0.9 0.95

Writes bench/results/nprobe-calibration-<stamp>.json and .md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.runlog import load, log  # noqa: E402
from indexer.calibrate import calibrate_nprobe  # noqa: E402
from indexer.cli import recall_target  # noqa: E402
from indexer.evaluate import evaluate  # noqa: E402
from indexer.runtime.atomic import write_json_atomic  # noqa: E402
from indexer.runtime.faiss_index import DEFAULT_NPROBE, set_nprobe  # noqa: E402
from indexer.runtime.layout import IndexRoot, LayoutError  # noqa: E402
from indexer.runtime.version import IndexLoadError, IndexVersion  # noqa: E402


def parse_root(value: str) -> tuple[str, Path]:
    label, sep, folder = value.rpartition("=")
    if not sep or not label:
        raise argparse.ArgumentTypeError(f"expected LABEL=DIR, not {value!r}")
    return label, Path(folder)


def run(roots: list[tuple[str, Path]], targets: list[float], *, rounds: int, threads: int, sample: int
        ) -> dict[str, Any]:
    opened: dict[str, IndexVersion] = {}
    for label, folder in roots:
        try:
            opened[label] = IndexVersion(IndexRoot(folder).current_dir())
        except (LayoutError, IndexLoadError) as exc:
            raise SystemExit(f"--root {label}={folder}: {exc}") from exc
    out: dict[str, Any] = {"roots": {}, "targets": targets, "threads": threads, "rounds": rounds,
                           "calibration_sample": sample, "load_start": load()}
    settings: dict[str, list[tuple[str, int]]] = {}
    for label, version in opened.items():
        manifest = version.manifest
        cals = []
        for target in targets:
            cal = calibrate_nprobe(version.index, target, sample=sample)
            cals.append(cal.model_dump())
            log(f"{label}: target {target}: nprobe {cal.nprobe} ({cal.recall_at_10:.4f} on {cal.sample_queries} "
                f"documents, {cal.seconds:.1f}s)")
        set_nprobe(version.index, version.nprobe)
        out["roots"][label] = {"root": str(version.folder), "version": manifest.version,
                               "pooling": manifest.model.pooling,
                               "onnx_sha256": manifest.model.onnx_sha256, "n_docs": manifest.index.ntotal,
                               "n_queries": manifest.data.n_queries, "protocol": manifest.data.protocol,
                               "nlist": manifest.index.nlist,
                               "calibrations": cals, "rows": {}}
        settings[label] = [("default", DEFAULT_NPROBE)] + [(f"target {c['target_recall']}", c["nprobe"])
                                                           for c in cals]
    times: dict[tuple[str, str], list[float]] = {}
    for r in range(rounds):
        for label, version in opened.items():
            for name, nprobe in settings[label]:
                # the figures come from round 1 (every query also searched exactly); later rounds only re-time
                # the IVF search (exact search on a single query)
                fig = evaluate(version, nprobe=nprobe, threads=threads,
                               exact_budget=None if r == 0 else version.ntotal)
                times.setdefault((label, name), []).append(fig.avg_retrieval_ms)
                rows = out["roots"][label]["rows"]
                if r > 0:
                    rows[name]["ms_per_query"] = statistics.median(times[(label, name)])
                    rows[name]["ms_rounds"] = times[(label, name)]
                    continue
                rows[name] = {
                    "nprobe": fig.nprobe, "mrr_at_10": fig.mrr_at_10, "exact_mrr_at_10": fig.exact_mrr_at_10,
                    "ann_recall_at_10": fig.ann_recall_at_10, "exact_n_queries": fig.exact_n_queries,
                    "ms_per_query": statistics.median(times[(label, name)]), "ms_rounds": times[(label, name)]}
                log(f"round {r + 1}/{rounds} {label} {name} (nprobe {fig.nprobe}): MRR@10 {fig.mrr_at_10:.4f} "
                    f"(exact {fig.exact_mrr_at_10:.4f}), ANN recall {fig.ann_recall_at_10:.4f}, "
                    f"{fig.avg_retrieval_ms:.4f} ms; load {load()}")
    for version in opened.values():
        version.close()
    out["load_end"] = load()
    return out


def render(res: dict[str, Any], command: str) -> str:
    lines = [f"# nprobe per encoder: default vs `--target-recall` ({res['measured_at']})", "",
             f"Command: `{command}`", "",
             f"Calibration: {res['calibration_sample']} of each version's own documents as queries, label-free "
             f"(`indexer.calibrate`). MRR@10, ANN recall@10 (IVF top 10 vs exact top 10) and ms/query are "
             f"`indexer.evaluate` on the version's evaluation queries, single queries, {res['threads']} FAISS "
             f"thread(s), median of {res['rounds']} interleaved rounds. Load {res['load_start']} at the start, "
             f"{res['load_end']} at the end.", "",
             "| encoder (root) | nprobe setting | nprobe | calibration recall (documents) | MRR@10 | exact MRR@10 | "
             "IVF − exact | ANN recall@10 (eval queries) | ms/query |",
             "|---|---|---|---|---|---|---|---|---|"]
    for label, r in res["roots"].items():
        cal_of = {f"target {c['target_recall']}": c for c in r["calibrations"]}
        for name, row in r["rows"].items():
            cal = cal_of.get(name)
            lines.append(
                f"| {label} | {name} | {row['nprobe']} | "
                f"{'–' if cal is None else format(cal['recall_at_10'], '.4f')} | {row['mrr_at_10'] * 100:.2f} | "
                f"{row['exact_mrr_at_10'] * 100:.2f} | {(row['mrr_at_10'] - row['exact_mrr_at_10']) * 100:+.2f} | "
                f"{row['ann_recall_at_10']:.4f} | {row['ms_per_query']:.4f} |")
    lines += ["", "Versions: " + "; ".join(f"{label}: {r['version']} ({r['pooling']}, {r['protocol']}, "
                                            f"{r['n_docs']:,} documents, {r['n_queries']:,} queries, IVF{r['nlist']})"
                                            for label, r in res["roots"].items()), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", type=parse_root, action="append", required=True, metavar="LABEL=DIR",
                   help="an index root built by `indexer build` (its current version is read, never changed)")
    p.add_argument("--target", type=recall_target, nargs="+", default=[0.95],
                   help="target ANN recall@10, in (0, 1] (default 0.95)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds (median kept)")
    p.add_argument("--threads", type=int, default=1, help="FAISS threads while timing single queries")
    p.add_argument("--sample", type=int, default=2000, help="documents used as calibration queries")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args(argv)
    res = run(args.root, args.target, rounds=args.rounds, threads=args.threads, sample=args.sample)
    res["measured_at"] = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    command = "python bench/nprobe_calibration.py " + " ".join(
        [f'--root "{label}={folder}"' for label, folder in args.root]
        + ["--target", *map(str, args.target), "--rounds", str(args.rounds), "--threads", str(args.threads)])
    args.out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out / f"nprobe-calibration-{stamp}.json", {**res, "command": command})
    md = render(res, command)
    (args.out / f"nprobe-calibration-{stamp}.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
