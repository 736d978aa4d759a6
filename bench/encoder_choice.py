"""Which exported encoder should Strata serve? A paired, per-query comparison on the Quora protocols.

Each `--model LABEL=DIR` (an `encoder export` folder, as it would serve: int8 or fp32) is indexed with
`indexer build --protocol P --no-eval` for every protocol (default: `paper`, the first 100,000 rows, and
`heldout`, rows >= 300,000 that nothing in Strata trains or tunes on), exactly as a user builds it. Then every
evaluation query's reciprocal rank at 10 is computed twice per model, with the default IVF index at its nprobe and
with exact search over the same vectors (`indexer.evaluate.query_ranks`: the same rankings `indexer eval`
averages, every query searched exactly). The models answer the same queries, so each one is compared with the
first (the baseline) query by query:

- Δ MRR@10 × 100 with a 95 % paired bootstrap interval (queries resampled with replacement, --bootstrap times);
- the share of queries each side ranks better (most queries tie: both rank the gold first);
- two-sided p of a paired sign-flip permutation test on the per-query differences.
A difference whose interval excludes 0 on every protocol is one the queries support; an aggregate lead alone is
not. Build time and documents/s come from each version's manifest (the same encoder path the service runs).

    python bench/encoder_choice.py --model "stock mean int8=DIR1" --model "BERT-LC int8=DIR2" [--rows N]

Index roots are kept under --work and reused when they were built from the same ONNX file (sha256), so a second
run only re-does the statistics. Writes bench/results/encoder-choice-<stamp>.json and .md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench.runlog import load, log  # noqa: E402
from indexer.calibrate import calibrate_nprobe  # noqa: E402
from indexer.cli import recall_target  # noqa: E402
from indexer.evaluate import QueryRanks, query_ranks  # noqa: E402
from indexer.runtime.atomic import write_json_atomic  # noqa: E402
from indexer.runtime.encoder import ENCODER_META, EncoderMeta  # noqa: E402
from indexer.runtime.layout import IndexRoot  # noqa: E402
from indexer.runtime.manifest import Manifest  # noqa: E402
from indexer.runtime.version import IndexVersion  # noqa: E402


@dataclass
class Model:
    label: str
    folder: Path
    meta: EncoderMeta


def parse_model(spec: str) -> Model:
    label, sep, folder = spec.partition("=")
    if not sep or not label.strip() or not folder:
        raise argparse.ArgumentTypeError(f"--model wants LABEL=DIR, got {spec!r}")
    path = Path(folder).expanduser()
    if not (path / ENCODER_META).is_file():
        raise argparse.ArgumentTypeError(f"{path} has no {ENCODER_META} (make one with `encoder export`)")
    return Model(label.strip(), path, EncoderMeta.model_validate_json((path / ENCODER_META).read_text()))


# -- statistics on paired per-query values -----------------------------------------------------------------------
def paired_bootstrap(diff: np.ndarray, resamples: int, seed: int) -> tuple[float, float]:
    """95 % percentile interval of the mean of `diff` over queries resampled with replacement."""
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    chunk = max(1, 2_000_000 // max(len(diff), 1))  # bounded memory: ~16 MB of indices at a time
    for start in range(0, resamples, chunk):
        n = min(chunk, resamples - start)
        means[start : start + n] = diff[rng.integers(0, len(diff), size=(n, len(diff)))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(lo), float(hi)


def sign_flip_p(diff: np.ndarray, resamples: int, seed: int) -> float:
    """Two-sided p of the paired permutation test: how often randomly swapping each query's two values gives a
    mean difference at least as large as the observed one (with the +1 correction, never 0)."""
    nonzero = diff[diff != 0]
    if not len(nonzero):
        return 1.0
    observed = abs(nonzero.mean())
    rng = np.random.default_rng(seed)
    hits = 0
    chunk = max(1, 2_000_000 // len(nonzero))
    for start in range(0, resamples, chunk):
        n = min(chunk, resamples - start)
        signs = rng.integers(0, 2, size=(n, len(nonzero)), dtype=np.int8) * 2 - 1
        hits += int((np.abs((signs * nonzero).mean(axis=1)) >= observed - 1e-15).sum())
    return (hits + 1) / (resamples + 1)


def compare(base: np.ndarray, other: np.ndarray, resamples: int, seed: int) -> dict[str, float]:
    diff = (other - base) * 100
    lo, hi = paired_bootstrap(diff, resamples, seed)
    return {
        "delta": float(diff.mean()), "ci_low": lo, "ci_high": hi,
        "better_share": float((diff > 0).mean()), "worse_share": float((diff < 0).mean()),
        "p_sign_flip": sign_flip_p(diff, resamples, seed + 1),
    }


# -- builds ------------------------------------------------------------------------------------------------------
def built_root(model: Model, protocol: str, args: argparse.Namespace) -> Path:
    """An index root of `model` on `protocol`, reused when its served version was built from the same ONNX file
    and rows."""
    slug = "".join(c if c.isalnum() else "-" for c in model.label.lower())
    rows = args.rows
    root = args.work / f"{slug}-{protocol}{f'-rows{rows}' if rows else ''}"
    if IndexRoot(root).current_version():
        manifest = Manifest.load(IndexRoot(root).current_dir())
        if manifest.model.onnx_sha256 == model.meta.onnx_sha256 and manifest.data.protocol == protocol:
            log(f"{model.label} / {protocol}: reusing {root}")
            return root
    cmd = [sys.executable, "-m", "indexer.cli", "build", "--model", str(model.folder), "--root", str(root),
           "--protocol", protocol, "--no-eval", "--keep", "1", "--index", "ivf",  # the IVF index is what it compares
           *(["--data", args.data] if args.data else []), *(["--threads", str(args.threads)] if args.threads else []),
           *(["--rows", str(rows)] if rows else [])]
    log(f"{model.label} / {protocol}: {' '.join(cmd[1:])} (load {load()})")
    if subprocess.run(cmd, cwd=REPO, check=False).returncode:
        raise SystemExit(f"encoder_choice: `indexer build` failed for {model.label} on {protocol} (see above)")
    return root


def measure(model: Model, root: Path, target_recall: float | None = None) -> tuple[QueryRanks, dict[str, Any]]:
    """Per-query ranks of `model`'s version at its manifest's nprobe, or — with `target_recall` — at the nprobe
    `indexer build --target-recall` would choose for it (label-free, on its own documents), so that every model
    is compared at the same ANN recall."""
    version = IndexVersion(IndexRoot(root).current_dir())
    try:
        calibration = None if target_recall is None else calibrate_nprobe(version.index, target_recall)
        nprobe = version.nprobe if calibration is None else calibration.nprobe
        ranks = query_ranks(version, nprobe=nprobe)
        manifest = version.manifest
        t = manifest.build_seconds
        info = {
            "version": manifest.version, "factory": manifest.index.factory, "nprobe": nprobe,
            "n_docs": manifest.index.ntotal,
            "calibration_recall": None if calibration is None else calibration.recall_at_10,
            "n_queries": len(ranks.query_ids), "mrr_ivf": float(ranks.ivf_rr.mean() * 100),
            "mrr_exact": float(ranks.exact_rr.mean() * 100), "encode_docs_s": t.encode_docs_s,
            "docs_per_s": manifest.index.ntotal / t.encode_docs_s if t.encode_docs_s else None,
        }
    finally:
        version.close()
    return ranks, info


# -- report ------------------------------------------------------------------------------------------------------
def markdown(res: dict[str, Any]) -> str:
    models = res["models"]
    lines = [
        f"# Which encoder to serve: paired per-query comparison on Quora ({res['finished_at']})", "",
        f"Command: `{res['command']}`  ",
        f"Load (1/5/15 min) at start {res['load_start']}, at end {res['load_end']}. Baseline: **{models[0]['label']}**."
        f" Δ = MRR@10 × 100 minus the baseline's on the same queries; 95 % paired bootstrap interval over queries "
        f"({res['bootstrap']:,} resamples); p = two-sided paired sign-flip permutation test.", "",
        "| model | pooling | quantized | sha256 |", "|---|---|---|---|",
    ]
    lines += [f"| {m['label']} | {m['pooling']} | {m['quantization']} | `{m['sha256'][:12]}` |" for m in models]
    for protocol, per in res["protocols"].items():
        first = per[models[0]["label"]]
        target = res.get("target_recall")
        probes = (f"nprobe {first['nprobe']}" if target is None else
                  f"nprobe per model for ANN recall@10 >= {target} on its own documents (`--target-recall`)")
        lines += ["", f"## {protocol} ({first['n_docs']:,} documents, {first['n_queries']:,} queries, "
                  f"{first['factory']}, {probes})", "",
                  "| model | nprobe | MRR@10 IVF | MRR@10 exact | Δ IVF [95 % CI] | Δ exact [95 % CI] | queries better "
                  "/ worse (exact) | p (exact) | docs/s encoding |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for m in models:
            r = per[m["label"]]
            rate = f"{r['docs_per_s']:.0f}" if r.get("docs_per_s") else "–"
            if "vs_baseline" not in r:
                lines.append(f"| {m['label']} | {r['nprobe']} | {r['mrr_ivf']:.2f} | {r['mrr_exact']:.2f} | – | – | – "
                             f"| – | {rate} |")
                continue
            iv, ex = r["vs_baseline"]["ivf"], r["vs_baseline"]["exact"]
            lines.append(
                f"| {m['label']} | {r['nprobe']} | {r['mrr_ivf']:.2f} | {r['mrr_exact']:.2f} | {iv['delta']:+.2f} "
                f"[{iv['ci_low']:+.2f}, {iv['ci_high']:+.2f}] | {ex['delta']:+.2f} [{ex['ci_low']:+.2f}, "
                f"{ex['ci_high']:+.2f}] | {ex['better_share']:.1%} / {ex['worse_share']:.1%} | "
                f"{ex['p_sign_flip']:.3g} | {rate} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=parse_model, action="append", required=True, metavar="LABEL=DIR",
                   help="an exported encoder folder; give two or more, the first is the baseline")
    p.add_argument("--protocols", nargs="+", default=["paper", "heldout"], choices=["paper", "full", "heldout"])
    p.add_argument("--data", help="the Quora TSV (default: `indexer build`'s, the shared data file)")
    p.add_argument("--rows", type=int, help="only the first N rows of each protocol (smoke runs)")
    p.add_argument("--threads", type=int, help="ONNX Runtime / FAISS threads for the builds (default: cores)")
    p.add_argument("--target-recall", type=recall_target, default=None, metavar="R",
                   help="compare the IVF columns at equal ANN recall: each model at the nprobe `indexer build "
                        "--target-recall R` would choose for it (default: every model at its build's nprobe, 20)")
    p.add_argument("--bootstrap", type=int, default=10_000, help="resamples (default 10000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work", type=Path, default=REPO / "bench" / "work" / "encoder-choice")
    p.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args(argv)
    if len(args.model) < 2:
        p.error("give at least two --model LABEL=DIR (the first is the baseline)")
    if len({m.label for m in args.model}) != len(args.model):
        p.error("--model labels must differ")
    if args.bootstrap < 100:
        p.error("--bootstrap must be at least 100")
    command = "python bench/encoder_choice.py " + " ".join(
        f"'{a}'" if " " in a else a for a in (argv if argv is not None else sys.argv[1:]))

    res: dict[str, Any] = {
        "command": command, "load_start": load(), "bootstrap": args.bootstrap, "rows": args.rows,
        "target_recall": args.target_recall,
        "models": [{"label": m.label, "folder": str(m.folder), "pooling": m.meta.pooling,
                    "quantization": m.meta.quantization or "none", "sha256": m.meta.onnx_sha256} for m in args.model],
        "protocols": {},
    }
    t0 = time.perf_counter()
    for protocol in args.protocols:
        per: dict[str, Any] = {}
        ranks: dict[str, QueryRanks] = {}
        for m in args.model:
            ranks[m.label], per[m.label] = measure(m, built_root(m, protocol, args), args.target_recall)
        base = args.model[0].label
        for m in args.model[1:]:
            if not np.array_equal(ranks[m.label].query_ids, ranks[base].query_ids):
                raise SystemExit(f"encoder_choice: {m.label} and {base} were evaluated on different queries "
                                 f"({protocol}); rebuild both from the same data")
            per[m.label]["vs_baseline"] = {
                kind: compare(getattr(ranks[base], f"{kind}_rr"), getattr(ranks[m.label], f"{kind}_rr"),
                              args.bootstrap, args.seed)
                for kind in ("ivf", "exact")}
        res["protocols"][protocol] = per
        log(f"{protocol}: " + "; ".join(f"{k} {v['mrr_exact']:.2f} exact" for k, v in per.items()))
    res["seconds"] = round(time.perf_counter() - t0, 1)
    res["load_end"] = load()
    res["finished_at"] = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    args.results.mkdir(parents=True, exist_ok=True)
    stem = args.results / f"encoder-choice-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}"
    write_json_atomic(stem.with_suffix(".json"), res)
    text = markdown(res)
    stem.with_suffix(".md").write_text(text)
    print(text)
    log(f"wrote {stem}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
