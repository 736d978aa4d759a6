"""`encoder lc-search`: the training-free BERT-LC layer-combination search on STS-B dev."""

from __future__ import annotations

import argparse
from pathlib import Path

from indexer.commands.common import positive_int
from indexer.console import run_cli


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`encoder lc-search` and its arguments (in --help order)."""
    lc = sub.add_parser("lc-search", help="training-free BERT-LC layer-combination search on STS-B dev",
                        description="Score averaged-layer subsets (≤ --max-layers) on STS-B dev with a pruned "
                        "beam search; --out writes a checkpoint whose pooler is the best combination.")
    lc.add_argument("--checkpoint", help="HF folder or Strata checkpoint (default: all-MiniLM-L6-v2)")
    lc.add_argument("--max-layers", type=positive_int, default=4)
    lc.add_argument("--beam", type=positive_int, default=5, help="subsets kept per size (default 5)")
    lc.add_argument("--mlp-head", action="store_true", help="apply the backbone's pooler dense+tanh after")
    lc.add_argument("--max-pairs", type=positive_int, help="cap STS-B dev pairs")
    lc.add_argument("--max-length", type=positive_int, default=128)
    lc.add_argument("--out", type=Path, help="write a checkpoint with the chosen LayerCombination pooler")
    lc.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from models.checkpoint import CheckpointError
    from models.data import DataError

    def go() -> int:
        from models.checkpoint import default_checkpoint
        from models.layer_search import search_layers
        from models.poolers import LayerCombination
        from models.sentence_model import SentenceModel
        from models.sts import load_task

        model = SentenceModel.from_checkpoint(args.checkpoint or default_checkpoint(), pooler="cls_last",
                                              max_length=args.max_length)
        result = search_layers(model, load_task("STSB-dev", max_pairs=args.max_pairs), args.max_layers,
                               args.beam, args.mlp_head)
        for layers, score in result.leaderboard:
            print(f"layers {layers}: STS-B dev {score:.2f}")
        print(f"best: layers {result.layers} (STS-B dev {result.dev_spearman:.2f}; {result.evaluated} subsets "
              f"scored)")
        if args.out:
            cfg = model.encoder.config
            pooler = LayerCombination(cfg.hidden_size, cfg.num_hidden_layers, result.layers, args.mlp_head)
            if args.mlp_head:
                pooler.copy_head_from(model.encoder)
            model.pooler = pooler
            model.save(args.out)
            print(f"wrote {args.out}")
        return 0

    return run_cli(go, (CheckpointError, DataError, ValueError, OSError), "encoder lc-search")
