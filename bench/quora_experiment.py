"""Does a layer-trained last-layer [CLS] beat the stock encoder on Quora? A paired, resumable experiment.

Every trained arm starts from the stock all-MiniLM-L6-v2 and sees the same data in the same order for a given
seed: supervised contrastive learning (in-batch negatives + one hard negative per pair mined with Strata's own
index, `encoder mine`) on Quora training pairs (rows 100,000–295,999 minus every qid of the evaluation rows
< 100,000 and of the dev rows 296,000–299,999), with a linear warm-up/decay schedule and checkpoint selection
every --eval-every steps on MRR@10 of the Quora dev split (rows 296,000–299,999) computed with the arm's own
served vector. Rows ≥ 300,000 are never read by training, mining or selection.

Arms (the served vector is what gets exported to ONNX and indexed):
  core, every seed   stock mean · stock CLS (no training) · control (CLS + MLP head, SimCSE's baseline; serves
                     the [CLS] before the MLP) · LayerAtt (Oh et al. 2022 pooler, paper recipe; serves the
                     detached [CLS]) · mean (trained and served with token-mean pooling)
  secondary, seed 1  SG-OPT (serves [CLS]) · S2Sent with the selector kept (serves the selector's token mean)
                     · S2Sent→CLS (selector detached, serves [CLS]) · BERT-LC (no training; layer subset found
                     on STS-B dev, served as `--pooling layers:…`)
Each arm is evaluated through its exported ONNX graph: STS12–16/STS-B/SICK-R, the paper protocol on the first
100,000 rows and the `heldout` protocol (rows ≥ 300,000), each with the default IVF index and exact search.

  nice -n 19 python bench/quora_experiment.py --mined /path/mined.tsv          # the full run (hours on 2 cores)
  nice -n 19 python bench/quora_experiment.py --mined … --resume bench/results/quora-experiment-….jsonl
  python bench/quora_experiment.py --render bench/results/quora-experiment-….jsonl  # table from the rows
Every stage of every (arm, seed) is cached in --work, and training resumes from its last checkpoint, so an
interrupted run loses at most --save-every steps.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from bench.runlog import load  # noqa: E402


@dataclass
class Arm:
    label: str
    served: str  # `encoder export --pooling` value
    pooler: str | None = None  # None: no training
    objective: str = "sup_hardneg"
    eval_mode: str = "cls"
    options: dict[str, Any] = field(default_factory=dict)
    core: bool = True

    @property
    def slug(self) -> str:
        return "".join(c if c.isalnum() else "-" for c in self.label.lower()).strip("-")


ARMS = [
    Arm("stock mean", "mean"),
    Arm("stock CLS", "cls"),
    Arm("control CLS+MLP", "cls", "cls_mlp"),
    Arm("LayerAtt→CLS", "cls", "layer_att"),
    Arm("mean→mean", "mean", "avg_last", eval_mode="mean"),
    Arm("SG-OPT→CLS", "cls", "sgopt_head", objective="sgopt", core=False),
    Arm("S2Sent kept (mean)", "pooler", "s2sent", eval_mode="pooler",
        options={"last_k": 3, "freq_groups": 4, "reduction": 16, "output": "mean"}, core=False),
    Arm("S2Sent→CLS", "cls", "s2sent", options={"last_k": 3, "freq_groups": 4, "reduction": 16, "output": "cls"},
        core=False),
    Arm("BERT-LC", "layers", core=False),
]
CONTROL, STOCK, STOCK_CLS = "control CLS+MLP", "stock mean", "stock CLS"
METRICS = ["paper_exact", "paper_ivf", "heldout_exact", "heldout_ivf", "stsb", "sts_avg"]


def log(msg: str) -> None:
    print(f"[{datetime.now():%H:%M:%S}] {msg}", flush=True)


def cached(path: Path, compute) -> dict[str, Any]:
    """A stage's result, computed once and kept as JSON (an interrupted stage is recomputed)."""
    if path.is_file():
        return json.loads(path.read_text())
    result = compute()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=2))
    tmp.replace(path)
    return result


def indexer_figures(model_dir: Path, root: Path, protocol: str, threads: int, rows: int | None) -> dict[str, Any]:
    """`indexer build` with its default index and evaluation, as a user runs it; figures from the manifest."""
    shutil.rmtree(root, ignore_errors=True)
    cmd = [sys.executable, "-m", "indexer.cli", "build", "--model", str(model_dir), "--protocol", protocol,
           "--root", str(root), "--threads", str(threads), *(["--rows", str(rows)] if rows else [])]
    t0 = time.perf_counter()
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if run.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{run.stderr[-2000:]}")
    manifest = json.loads((root / "current" / "manifest.json").read_text())
    ev = manifest["eval"]
    out = {
        "mrr10": ev["mrr_at_10"] * 100,
        "exact_mrr10": ev["exact_mrr_at_10"] * 100,
        "recall10": ev["recall_at_10"] * 100,
        "nprobe": ev["nprobe"],
        "factory": manifest["index"]["factory"],
        "n_queries": ev["n_queries"],
        "n_docs": ev["n_docs"],
        "exact_n_queries": ev.get("exact_n_queries"),
        "build_seconds": round(time.perf_counter() - t0, 1),
    }
    shutil.rmtree(root, ignore_errors=True)  # ~100-200 MB each; the figures are what we keep
    return out


def evaluate_served(ckpt: Path, served: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    from indexer.runtime.encoder import OnnxEncoder
    from models.export import export_encoder
    from models.sts import TASKS, evaluate_tasks

    onnx_dir = work / "onnx"
    if not (work / "export.json").is_file():
        meta = export_encoder(ckpt, onnx_dir, pooling=served, force=True)
        (work / "export.json").write_text(json.dumps({"parity_min_cosine": meta.parity_min_cosine}))
    export = json.loads((work / "export.json").read_text())

    def sts() -> dict[str, Any]:
        runtime = OnnxEncoder(onnx_dir, threads=args.threads)
        scores = evaluate_tasks(runtime.encode, TASKS, max_pairs=args.sts_pairs)
        return {"stsb": scores["STSB"], "sts_avg": scores["avg"], **{f"sts_{k}": v for k, v in scores.items()}}

    row: dict[str, Any] = {"served": served, **export}
    row.update(cached(work / "sts.json", sts))
    for protocol in ("paper", "heldout"):
        t0 = time.perf_counter()
        figs = cached(work / f"{protocol}.json",
                      lambda p=protocol: indexer_figures(onnx_dir, work / f"index-{p}", p, args.threads,
                                                         args.quora_rows))
        row[f"{protocol}_ivf"], row[f"{protocol}_exact"] = figs["mrr10"], figs["exact_mrr10"]
        row[f"{protocol}_detail"] = figs
        log(f"  {protocol}: MRR@10 {figs['mrr10']:.2f} (exact {figs['exact_mrr10']:.2f}) "
            f"[{time.perf_counter() - t0:.0f}s]")
    return row


def train_arm(arm: Arm, seed: int, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from models.data import quora_dev
    from models.train_config import TrainConfig
    from models.trainer import Trainer

    def run() -> dict[str, Any]:
        cfg = TrainConfig(
            out=work / "train",
            pooler=arm.pooler,
            pooler_options=arm.options,
            objective=arm.objective,
            data=str(args.sgopt_data if arm.objective == "sgopt" else args.mined),
            batch_size=args.batch_size,
            max_length=args.max_length,
            lr=args.lr,
            max_steps=args.steps,
            warmup_ratio=args.warmup_ratio,
            eval_every=args.eval_every,
            eval_on="quora",
            eval_mode=arm.eval_mode,
            eval_at_start=False,
            seed=seed,
            resume=True,
            device="cpu",
            threads=args.threads,
            progress=not args.no_progress,
        )
        load_before = load()
        result = Trainer(cfg, dev=quora_dev(dev_rows=tuple(args.dev_rows))).train()
        log_rows = [json.loads(x) for x in (work / "train" / "log.jsonl").read_text().splitlines()]
        curve = [(r["step"], r["dev"]) for r in log_rows if "dev" in r]
        return {
            "best_step": result.best_step,
            "dev_mrr10": result.best_dev,
            "dev_curve": curve,
            "train_seconds": round(result.seconds, 1),
            "s_per_1k_steps": round(result.seconds_per_1k_steps, 1),
            "load_before": load_before,
            "load_after": load(),
            "lr": args.lr,
            "steps": args.steps,
            "batch_size": args.batch_size,
            "max_length": args.max_length,
            "temperature": cfg.temperature,
        }

    return cached(work / "train.json", run)


def bert_lc_checkpoint(work: Path) -> tuple[Path, dict[str, Any]]:
    from models.checkpoint import default_checkpoint
    from models.layer_search import search_layers
    from models.sentence_model import SentenceModel
    from models.sts import load_task

    def run() -> dict[str, Any]:
        model = SentenceModel.from_checkpoint(default_checkpoint(), max_length=128)
        found = search_layers(model, load_task("STSB-dev"), max_layers=4, beam=5)
        return {"layers": found.layers, "stsb_dev": found.dev_spearman, "subsets_scored": found.evaluated}

    info = cached(work / "layers.json", run)
    return default_checkpoint(), info


def run_arm(arm: Arm, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    from models.checkpoint import default_checkpoint

    work = args.work / f"{arm.slug}-s{seed}"
    work.mkdir(parents=True, exist_ok=True)
    row: dict[str, Any] = {"arm": arm.label, "seed": seed, "core": arm.core}
    served = arm.served
    if arm.label == "BERT-LC":
        ckpt, info = bert_lc_checkpoint(work)
        served = "layers:" + ",".join(map(str, info["layers"]))
        row.update(info)
    elif arm.pooler is None:
        ckpt = default_checkpoint()
    else:
        row.update(train_arm(arm, seed, args, work))
        ckpt = work / "train" / "best"
    row.update(evaluate_served(ckpt, served, work, args))
    row["finished_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    row["load_at_finish"] = load()
    return row


# -- the table ---------------------------------------------------------------------------------------------------
def paired(rows: list[dict[str, Any]], arm: str, base: str, metric: str) -> list[float]:
    a = {r["seed"]: r[metric] for r in rows if r["arm"] == arm and metric in r}
    b = {r["seed"]: r[metric] for r in rows if r["arm"] == base and metric in r}
    if base.startswith("stock"):  # untrained arms have one row (seed 0): pair it with every seed
        b = {s: next(iter(b.values())) for s in a} if b else {}
    return [a[s] - b[s] for s in sorted(a.keys() & b.keys())]


class RowsFileError(ValueError):
    """A rows file (`--render`, `--resume`) that cannot be read; the message names the file and line."""


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The JSONL rows an earlier run wrote, one (arm, seed) result per line; blank lines are skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise RowsFileError(f"{path}: cannot read the rows file ({e.strerror})") from None
    except UnicodeDecodeError:
        raise RowsFileError(f"{path}: not a UTF-8 rows file") from None
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise RowsFileError(f"{path}, line {n}: not JSON ({e.msg})") from None
        if not (isinstance(row, dict) and isinstance(row.get("arm"), str) and isinstance(row.get("seed"), int)):
            raise RowsFileError(f'{path}, line {n}: a row needs an "arm" (text) and a "seed" (integer)')
        rows.append(row)
    return rows


def run_value(row: dict[str, Any], key: str, fmt: str = "{:.2f}") -> str:
    """One run's figure for the per-run table; a dash where the run has none (untrained arms)."""
    return fmt.format(row[key]) if row.get(key) is not None else "–"


def render(rows: list[dict[str, Any]], command: str) -> str:
    order = [a.label for a in ARMS if any(r["arm"] == a.label for r in rows)]

    def cell(arm: str, k: str) -> str:
        vals = [r[k] for r in rows if r["arm"] == arm and r.get(k) is not None]
        if not vals:
            return "–"
        mean = statistics.fmean(vals)
        return f"{mean:.2f} ± {statistics.stdev(vals):.2f}" if len(vals) > 1 else f"{mean:.2f}"

    def seeds(arm: str) -> str:
        return ",".join(str(r["seed"]) for r in rows if r["arm"] == arm)

    def per_seed(arm: str, k: str) -> str:
        # steps and training cost are listed seed by seed: a mean of them hides the machine load they ran under
        vals = [f"{r[k]:.0f}" for r in rows if r["arm"] == arm and r.get(k) is not None]
        return ", ".join(vals) or "–"

    first = next((r for r in rows if "batch_size" in r), {})
    lines = [
        f"# Quora experiment: trained served vectors vs the stock encoder ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} "
        "UTC)",
        "",
        f"Command: `{command}`  ",
        "Training (every trained arm): supervised contrastive, in-batch + 1 mined hard negative per pair "
        f"(`encoder mine`), batch {first.get('batch_size', '?')}, max length {first.get('max_length', '?')}, "
        f"lr {first.get('lr', '?')} for encoder and pooler, linear warm-up 10 % then decay, "
        f"{first.get('steps', '?')} steps, selection on Quora dev MRR@10 (rows 296,000–299,999) with the served "
        "vector. SG-OPT trains on the same split's questions with its own objective (τ 0.01, betas (0.9, 0.9)).  ",
        "Evaluation through the exported ONNX graph: paper = first 100,000 rows (87,249 docs); heldout = rows ≥ "
        "300,000 (never trained or tuned on); IVF = the default index (`indexer build`), exact = brute force over "
        "the same vectors. MRR@10 × 100; STS = Spearman × 100 (SentEval 'all').",
        "",
        "| arm | seeds | paper exact | paper IVF | heldout exact | heldout IVF | STS-B test | STS avg | dev MRR@10 "
        "| best step | s / 1k steps | load (1/5/15 min) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for arm in order:
        loads = [r.get("load_before", "") for r in rows if r["arm"] == arm and r.get("load_before")]
        lines.append(
            f"| {arm} | {seeds(arm)} | {cell(arm, 'paper_exact')} | {cell(arm, 'paper_ivf')} | "
            f"{cell(arm, 'heldout_exact')} | {cell(arm, 'heldout_ivf')} | {cell(arm, 'stsb')} | "
            f"{cell(arm, 'sts_avg')} | {cell(arm, 'dev_mrr10')} | {per_seed(arm, 'best_step')} | "
            f"{per_seed(arm, 's_per_1k_steps')} | {'; '.join(loads) or '–'} |"
        )
    lines += ["", "Per run (seed by seed; the summary above is mean ± std over these):", "",
              "| arm | seed | paper exact | paper IVF | heldout exact | heldout IVF | STS-B test | STS avg "
              "| dev MRR@10 | best step | s / 1k steps | load before → after training (1/5/15 min) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for arm in order:
        for r in (r for r in rows if r["arm"] == arm):
            figures = " | ".join(run_value(r, k) for k in (*METRICS, "dev_mrr10"))
            lines.append(
                f"| {arm} | {r['seed'] or '–'} | {figures} | {run_value(r, 'best_step', '{:.0f}')} | "
                f"{run_value(r, 's_per_1k_steps', '{:.0f}')} | "
                f"{' → '.join(x for x in (r.get('load_before'), r.get('load_after')) if x) or '–'} |"
            )
    lines += ["", "Paired per-seed deltas (same seed, same data order; stock arms have one row, paired with every "
              "seed):", "", "| arm | vs | metric | mean ± std | per seed | all seeds > 0 |",
              "|---|---|---|---|---|---|"]
    for arm in order:
        if arm.startswith("stock"):
            continue
        served = next((a.served for a in ARMS if a.label == arm), "")
        # a trained [CLS] is also paired with the stock [CLS] it starts from: that is what an unsupervised
        # method like SG-OPT can be expected to improve
        for base in (CONTROL, STOCK) + ((STOCK_CLS,) if served == "cls" else ()):
            if arm == base:
                continue
            for k in METRICS:
                d = paired(rows, arm, base, k)
                if d:
                    sd = statistics.stdev(d) if len(d) > 1 else 0.0
                    lines.append(f"| {arm} | {base} | {k} | {statistics.fmean(d):+.2f} ± {sd:.2f} | "
                                 f"{', '.join(f'{x:+.2f}' for x in d)} | {'yes' if all(x > 0 for x in d) else 'no'} |")
    lc = [r for r in rows if r["arm"] == "BERT-LC"]
    if lc:
        lines += ["", f"BERT-LC layers {lc[0]['layers']} (STS-B dev {lc[0]['stsb_dev']:.2f}, "
                  f"{lc[0]['subsets_scored']} subsets scored), served as `--pooling {lc[0]['served']}`."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mined", type=Path, help="triplet TSV from `encoder mine` (required unless --render)")
    p.add_argument("--sgopt-data", type=Path, help="one question per line for SG-OPT (default: written from the "
                   "mined file's anchors)")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--secondary-seeds", type=int, default=1, help="seeds for the secondary arms (default 1)")
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-length", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--warmup-ratio", type=float, default=0.1)
    p.add_argument("--eval-every", type=int, default=125)
    p.add_argument("--arms", nargs="+", help="only these arm labels (default: all)")
    p.add_argument("--dev-rows", type=int, nargs=2, default=[296_000, 300_000], metavar=("FROM", "TO"),
                   help="Quora dev rows for selection (default 296000 300000; must lie in the training range, "
                   "which excludes them)")
    p.add_argument("--quora-rows", type=int, help="evaluate on the first N rows of each protocol only (smoke "
                   "runs; the reported run uses every row)")
    p.add_argument("--sts-pairs", type=int, help="cap pairs per STS task (smoke runs; default: all)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--work", type=Path, default=REPO / "bench" / "work" / "quora-experiment")
    p.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    p.add_argument("--resume", type=Path, help="rows file of an interrupted run: keep its rows, run the rest")
    p.add_argument("--render", type=Path, help="only re-render the table of a rows file")
    args = p.parse_args(argv)
    command = "python bench/quora_experiment.py " + " ".join(argv if argv is not None else sys.argv[1:])
    try:  # both are read before any work starts, so a bad file costs nothing
        rendered_rows = read_rows(args.render) if args.render else None
        resumed_rows = read_rows(args.resume) if args.resume else None
    except RowsFileError as e:
        p.error(str(e))
    if rendered_rows is not None:
        table = render(rendered_rows, command)
        args.render.with_suffix(".md").write_text(table)
        print(table)
        return 0
    if args.mined is None or not args.mined.is_file():
        p.error("--mined FILE (from `encoder mine`) is required")

    import torch

    torch.set_num_threads(args.threads)
    args.work.mkdir(parents=True, exist_ok=True)
    if args.sgopt_data is None:
        from models.data import read_mined

        args.sgopt_data = args.work / "sgopt-questions.txt"
        if not args.sgopt_data.is_file():
            anchors = list(dict.fromkeys(ex[0] for ex in read_mined(args.mined)))
            args.sgopt_data.write_text("\n".join(anchors) + "\n")
    args.results.mkdir(parents=True, exist_ok=True)
    if args.resume:
        raw, rows = args.resume, resumed_rows or []
        log(f"resuming {raw}: {len(rows)} rows kept")
    else:
        raw = args.results / f"quora-experiment-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}.jsonl"
        rows = []
    done = {(r["arm"], r["seed"]) for r in rows}
    plan: list[tuple[Arm, int]] = []
    for arm in ARMS:
        if arm.pooler is None:
            plan.append((arm, 0))
    # Every seed of the core arms first (the product decision needs them), then the secondary arms.
    for seed in args.seeds:
        plan += [(arm, seed) for arm in ARMS if arm.core and arm.pooler is not None]
    for seed in args.seeds[: args.secondary_seeds]:
        plan += [(arm, seed) for arm in ARMS if not arm.core and arm.pooler is not None]
    plan = [(a, s) for a, s in plan if (a.label, s) not in done and (not args.arms or a.label in args.arms)]
    log(f"{len(plan)} (arm, seed) runs to go: {', '.join(f'{a.label}/{s}' for a, s in plan)}; settings "
        f"{json.dumps({k: str(v) for k, v in vars(args).items()})}; load {load()}")
    started = time.perf_counter()
    for i, (arm, seed) in enumerate(plan, 1):
        t0 = time.perf_counter()
        log(f"[{i}/{len(plan)}] {arm.label} seed {seed} (load {load()})")
        row = run_arm(arm, seed, args)
        row["command"] = command
        rows.append(row)
        with raw.open("a") as f:
            f.write(json.dumps(row) + "\n")
        raw.with_suffix(".md").write_text(render(rows, command))
        spent = time.perf_counter() - started
        log(f"[{i}/{len(plan)}] done in {(time.perf_counter() - t0) / 60:.1f} min; ETA for the rest "
            f"{spent / i * (len(plan) - i) / 60:.0f} min")
    print(render(rows, command))
    log(f"rows: {raw}; table: {raw.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
