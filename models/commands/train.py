"""`encoder train`: contrastive training with a detachable layer pooler."""

from __future__ import annotations

import argparse
from pathlib import Path

from indexer.commands.common import positive_int
from indexer.console import run_cli


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`encoder train` and its arguments (in --help order)."""
    t = sub.add_parser("train", help="contrastive training with a detachable layer pooler",
                       description="Train an encoder (default: all-MiniLM-L6-v2) with a SimCSE-family or SG-OPT "
                       "objective through a pooler over all layers. Writes OUT/best and OUT/last (each encoder/ + "
                       "pooler/) and OUT/log.jsonl; selects on STS-B dev. Flags override --config values.")
    t.add_argument("--config", type=Path, help="TOML or YAML file with TrainConfig fields")
    t.add_argument("--out", type=Path, help="output folder (required here or in --config)")
    t.add_argument("--model", help="Hugging Face BERT/RoBERTa folder (default: all-MiniLM-L6-v2)")
    t.add_argument("--pooler", help="cls_last (default) | avg_last | avg_first_last | scalar_mix | layer_att | "
                   "s2sent | layer_combination | sgopt_head")
    t.add_argument("--pooler-options", help='JSON options, e.g. \'{"attention": "cls", "concat_cls_last": false}\' '
                   'or \'{"last_k": 3, "freq_groups": 4, "reduction": 16}\'')
    t.add_argument("--objective", choices=["unsup", "sup", "sup_hardneg", "sgopt"], help="default unsup")
    t.add_argument("--data", help="wiki (default) | snli | quora | a Quora TSV file (read as quora: rows >= 300,000 "
                   "never) | a triplet TSV from `encoder mine` | a one-sentence-per-line file")
    t.add_argument("--max-examples", type=positive_int, help="use only the first N examples")
    t.add_argument("--temperature", type=float, help="τ (default: the objective's paper value, 0.05 for SimCSE, "
                   "0.01 for SG-OPT)")
    t.add_argument("--adam-betas", type=float, nargs=2, metavar=("B1", "B2"),
                   help="AdamW betas (default: the objective's, (0.9, 0.999); SG-OPT (0.9, 0.9))")
    t.add_argument("--sgopt-lambda", type=float, help="SG-OPT λ for ‖θ_F − θ_T‖² (default 0.1)")
    t.add_argument("--batch-size", type=positive_int, help="default 64")
    t.add_argument("--max-length", type=int, help="max tokens (default 32)")
    t.add_argument("--lr", type=float, help="encoder learning rate (default 3e-5)")
    t.add_argument("--pooler-lr", type=float, help="a separate pooler/head learning rate (default: --lr)")
    t.add_argument("--warmup-ratio", type=float, help="linear warm-up share of the steps (default 0.1)")
    t.add_argument("--epochs", type=positive_int, help="default 1")
    t.add_argument("--max-steps", type=positive_int, help="stop after N steps")
    t.add_argument("--seed", type=int, help="default 42")
    t.add_argument("--eval-every", type=positive_int, help="dev evaluation every N steps (default 125)")
    t.add_argument("--eval-on", choices=["stsb", "quora"], help="selection metric: STS-B dev (default) or MRR@10 "
                   "on the Quora dev split (rows 296,000-299,999; never the evaluation or held-out rows)")
    t.add_argument("--eval-max-pairs", type=positive_int, help="cap STS-B dev pairs (quick runs)")
    t.add_argument("--eval-mode", choices=["cls", "mean", "pooler"], help="select on the detached [CLS] "
                   "(default), the detached token mean, or the pooler output")
    t.add_argument("--resume", action="store_true", help="continue from OUT/last")
    t.add_argument("--device", choices=["auto", "cpu", "cuda"], help="default auto (CUDA when available)")
    t.add_argument("--threads", type=positive_int, help="torch CPU threads")
    t.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from pydantic import ValidationError

    from models.checkpoint import CheckpointError
    from models.data import DataError
    from models.train_config import make_config
    from models.trainer import train

    def go() -> int:
        try:
            options = json.loads(args.pooler_options) if args.pooler_options else None
        except ValueError as exc:
            raise ValueError(f"--pooler-options {args.pooler_options!r} is not JSON: {exc}") from exc
        cfg = make_config(
            args.config, model=args.model, out=args.out, pooler=args.pooler, pooler_options=options,
            objective=args.objective, temperature=args.temperature, data=args.data,
            max_examples=args.max_examples, batch_size=args.batch_size, max_length=args.max_length, lr=args.lr,
            pooler_lr=args.pooler_lr, epochs=args.epochs, max_steps=args.max_steps, seed=args.seed,
            eval_every=args.eval_every, eval_max_pairs=args.eval_max_pairs, eval_mode=args.eval_mode,
            resume=True if args.resume else None, device=args.device, threads=args.threads,
            sgopt_lambda=args.sgopt_lambda, warmup_ratio=args.warmup_ratio, eval_on=args.eval_on,
            adam_betas=tuple(args.adam_betas) if args.adam_betas else None)
        result = train(cfg)
        metric = "Quora dev MRR@10" if cfg.eval_on == "quora" else "STS-B dev"
        print(f"best {metric} {result.best_dev:.2f} at step {result.best_step} → {result.best_dir} "
              f"({result.steps} steps, {result.seconds:.0f}s, {result.seconds_per_1k_steps:.0f}s per 1,000 steps)")
        return 0

    return run_cli(go, (CheckpointError, DataError, ValidationError, ValueError, OSError), "encoder train")
