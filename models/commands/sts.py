"""`encoder sts`: STS12-16, STS-B and SICK-R Spearman x 100 of a checkpoint or an exported folder."""

from __future__ import annotations

import argparse
from pathlib import Path

from indexer.commands.common import positive_int
from indexer.console import run_cli


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`encoder sts` and its arguments (in --help order)."""
    s = sub.add_parser("sts", help="STS12-16, STS-B and SICK-R Spearman x 100 (SimCSE's 'all' setting)",
                       description="Evaluate a checkpoint (with its pooler, or its detached [CLS]/mean) or an "
                       "exported ONNX folder on STS12–16 (all), STS-B test and SICK-R test; prints a Table-1-like "
                       "row. Data: $STRATA_DATA_DIR or <repo>/../shared/data.")
    src = s.add_mutually_exclusive_group()
    src.add_argument("--checkpoint", help="Strata checkpoint or HF folder (default: all-MiniLM-L6-v2)")
    src.add_argument("--onnx", type=Path, help="exported model folder (encoder.onnx); no torch needed")
    s.add_argument("--mode", choices=["pooler", "cls", "mean"], default="pooler",
                   help="checkpoint vector: its pooler (default; cls_last for plain HF folders), the detached "
                   "last-layer [CLS], or the masked mean")
    s.add_argument("--tasks", nargs="+", help="subset of STS12 STS13 STS14 STS15 STS16 STSB SICKR STSB-dev")
    s.add_argument("--max-pairs", type=positive_int, help="cap pairs per task (quick checks; not comparable to papers)")
    s.add_argument("--max-length", type=positive_int, default=128, help="max tokens for checkpoints (default 128)")
    s.add_argument("--threads", type=positive_int, help="torch CPU threads")
    s.add_argument("--name", help="row label")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from indexer.runtime.encoder import EncoderLoadError
    from models.checkpoint import CheckpointError
    from models.data import DataError
    from models.sts import TASKS, evaluate_tasks, format_table

    def go() -> int:
        tasks = args.tasks or TASKS
        if args.onnx:
            from indexer.runtime.encoder import OnnxEncoder

            runtime = OnnxEncoder(args.onnx)
            encode = runtime.encode
            name = args.name or f"{args.onnx} (onnx)"
        else:
            import torch

            from models.checkpoint import default_checkpoint
            from models.sentence_model import SentenceModel

            if args.threads:
                torch.set_num_threads(args.threads)
            model = SentenceModel.from_checkpoint(args.checkpoint or default_checkpoint(),
                                                  max_length=args.max_length)
            model.to("cuda" if torch.cuda.is_available() else "cpu")

            def encode(texts):
                return model.encode(texts, mode=args.mode)

            name = args.name or f"{args.checkpoint or 'all-MiniLM-L6-v2'} ({args.mode})"
        scores = evaluate_tasks(encode, tasks, max_pairs=args.max_pairs)
        print(json.dumps({"model": name, **{k: round(v, 2) for k, v in scores.items()}}) if args.json
              else format_table({name: scores}, tasks))
        return 0

    return run_cli(go, (CheckpointError, DataError, EncoderLoadError, OSError), "encoder sts")
