"""`encoder adapt`: an in-domain Quora encoder in one resumable command (mine, train, export)."""

from __future__ import annotations

import argparse
from pathlib import Path

from indexer.console import run_cli


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`encoder adapt` and its arguments (in --help order)."""
    a = sub.add_parser("adapt", help="train an in-domain Quora encoder in one resumable command (mine, train, export)",
                       description="The recipe of the best trained arm of bench/quora_experiment.py: export the base "
                       "encoder (fp32, mean), mine hard negatives with Strata's own index over the Quora training "
                       "split, train with in-batch and mined negatives and token-mean pooling, select on the Quora "
                       "dev split, and export the best checkpoint serving the token mean. Each stage is kept in "
                       "--work and skipped when already done from the same inputs; training resumes from its last "
                       "checkpoint. WORK/status.json gives the stage, step and ETA. Rows >= 300,000 are never read. "
                       "About 45 min on 2 cores (mining 10, training 28).")
    a.add_argument("--out", required=True, type=Path, help="exported model folder to write (atomically)")
    a.add_argument("--work", type=Path, help="work folder (default: OUT.work beside --out)")
    a.add_argument("--checkpoint", type=Path, help="Hugging Face folder to adapt (default: all-MiniLM-L6-v2)")
    a.add_argument("--data", help="Quora TSV or its URL (downloaded once into $STRATA_HOME/downloads, as `indexer "
                   "build` does; default: the shared data file)")
    a.add_argument("--steps", type=int, default=500, help="training steps (default 500: the dev curve is flat by then)")
    a.add_argument("--batch-size", type=int, default=64)
    a.add_argument("--max-length", type=int, default=32, help="max tokens (Quora questions average ~15)")
    a.add_argument("--lr", type=float, default=3e-5)
    a.add_argument("--seed", type=int, default=1)
    a.add_argument("--skip", type=int, default=2, help="mined candidates skipped first (default 2)")
    a.add_argument("--take", type=int, default=1, help="mined negatives per pair (default 1)")
    a.add_argument("--quantize", choices=["int8", "none", "auto"], default="auto",
                   help="auto (default): static int8 when its calibration and gate data are readable, else fp32")
    a.add_argument("--threads", type=int, help="torch and ONNX Runtime threads")
    a.add_argument("--no-progress", action="store_true", help="no progress bars (logs and status.json only)")
    a.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from indexer.runtime.encoder import EncoderLoadError
    from models.checkpoint import CheckpointError
    from models.data import DataError
    from models.export import ParityError
    from models.quantize import QualityGateError

    def go() -> int:
        from models.adapt import AdaptConfig, adapt

        work = args.work or args.out.with_name(args.out.name + ".work")
        out = adapt(AdaptConfig(out=args.out, work=work, checkpoint=args.checkpoint, data=args.data,
                                steps=args.steps, batch_size=args.batch_size, max_length=args.max_length,
                                lr=args.lr, seed=args.seed, skip=args.skip, take=args.take, quantize=args.quantize,
                                threads=args.threads, progress=not args.no_progress))
        print(f"wrote {out} (work folder {work}); index it with: indexer build --model {out} --target-recall 0.95")
        return 0

    return run_cli(go, (DataError, EncoderLoadError, CheckpointError, ParityError, QualityGateError, ValueError,
                        OSError), "encoder adapt")
