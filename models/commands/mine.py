"""`encoder mine`: hard negatives for the Quora training pairs, mined with Strata's own index."""

from __future__ import annotations

import argparse
from pathlib import Path

from indexer.commands.common import positive_int
from indexer.console import run_cli


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`encoder mine` and its arguments (in --help order)."""
    m = sub.add_parser("mine", help="mine hard negatives for Quora training pairs with Strata's own index",
                       description="Encode the Quora training split (rows 100,000-295,999 minus qids of the "
                       "evaluation and dev rows; held-out rows >= 300,000 are never read) with an exported model, "
                       "build an IVF index and write, for every training duplicate pair, the anchor's nearest "
                       "non-duplicate questions after skipping the first --skip (where unlabelled duplicates "
                       "sit) as a triplet TSV for `encoder train --objective sup_hardneg --data FILE`.")
    m.add_argument("--model", required=True, type=Path, help="exported model folder (encoder export --out)")
    m.add_argument("--out", required=True, type=Path, help="triplet TSV to write")
    m.add_argument("--data", type=Path, help="Quora TSV (default: the shared data file)")
    m.add_argument("--skip", type=int, default=2, help="non-duplicate candidates skipped first (default 2)")
    m.add_argument("--take", type=positive_int, default=1, help="negatives per pair (default 1)")
    m.add_argument("--depth", type=positive_int, default=32, help="hits searched per anchor (default 32)")
    m.add_argument("--nlist", type=positive_int, default=1024)
    m.add_argument("--nprobe", type=positive_int, default=32)
    m.add_argument("--threads", type=positive_int, help="ONNX Runtime threads")
    m.add_argument("--review", type=Path, help="also write a seeded sample of anchors with their top candidates "
                   "for a hand check of false negatives")
    m.add_argument("--review-anchors", type=positive_int, default=40)
    m.add_argument("--seed", type=int, default=0)
    m.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from indexer.runtime.encoder import EncoderLoadError
    from models.data import DataError

    def go() -> int:
        from models.data import quora_training_questions
        from models.mine import mine

        questions = quora_training_questions(args.data)
        report = mine(questions, args.model, args.out, skip=args.skip, take=args.take, depth=args.depth,
                      nlist=args.nlist, nprobe=args.nprobe, threads=args.threads, review=args.review,
                      review_anchors=args.review_anchors, seed=args.seed)
        print(f"wrote {args.out}: {report.negatives} negatives for {report.with_negative} of {report.anchors} "
              f"training pairs ({report.questions_indexed} questions indexed, IVF{report.nlist} nprobe "
              f"{report.nprobe}, skip {report.skip}, take {report.take})")
        return 0

    return run_cli(go, (DataError, EncoderLoadError, ValueError, OSError), "encoder mine")
