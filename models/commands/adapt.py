"""`encoder adapt`: adapt the encoder in one resumable command — to your own corpus without labels (`--data CORPUS`:
`models.corpus_adapt`), or the supervised Quora recipe (`models.adapt`)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from indexer.commands.common import non_negative_int, positive_int
from indexer.console import run_cli


def positive_rate(value: str) -> float:
    """argparse type of `--lr`: a finite number above 0 (a bad rate would otherwise fail only at the training
    stage, after the base export and the mining)."""
    rate = float(value)
    if not 0 < rate < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, not {value}")
    return rate


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`encoder adapt` and its arguments (in --help order)."""
    a = sub.add_parser("adapt", help="adapt the encoder: to your own corpus without labels (--data CORPUS), or the "
                       "supervised Quora recipe",
                       description="Two families, one resumable command. (1) Label-free, to your own corpus: "
                       "`encoder adapt --data CORPUS --out DIR [--recipe crops|simcse|sgopt] [--queries DEV]`, CORPUS"
                       " in any format `indexer build --data` reads. crops (default): title→body pairs where "
                       "documents have titles, else two independent random crops (Contriever), with in-batch "
                       "negatives and one hard negative per pair mined from your own index (the nearest other "
                       "documents after --skip); simcse: unsupervised SimCSE (dropout views); both train and serve "
                       "the token mean. sgopt: SG-OPT (the last-layer [CLS] against a frozen copy's hidden layers, "
                       "projection head detached): trains and serves [CLS], gated against the stock token mean. With "
                       "--queries (dev queries + qrels), checkpoints are selected on dev nDCG@10 and the adapted "
                       "encoder is written only if it beats the stock one there, else the stock encoder is written "
                       "and the manifest says so; without, a label-free proxy selects (held-out crop-pair top-1 "
                       "accuracy) and the manifest marks the result unverified (shown by /ready). See docs/adapt.md "
                       "for what it gained on BEIR. (2) Quora (no --data, or --data the Quora TSV): the recipe of "
                       "the Quora experiment's best trained arm (docs/decisions.md): mine → train on Quora "
                       "duplicates → export; rows"
                       " >= 300,000 are never read; about 45 min on 2 cores. Each stage is kept in --work and skipped"
                       " when already done from the same inputs; training resumes from its last checkpoint. "
                       "WORK/status.json gives the stage, step and ETA.")
    a.add_argument("--out", required=True, type=Path, help="exported model folder to write (atomically)")
    a.add_argument("--work", type=Path, help="work folder (default: OUT.work beside --out)")
    a.add_argument("--checkpoint", type=Path, help="Hugging Face folder to adapt (default: all-MiniLM-L6-v2)")
    a.add_argument("--data", help="your corpus (BEIR folder, JSONL, CSV/TSV, Parquet: label-free), or the Quora TSV "
                   "or its URL (the supervised Quora recipe; default: the shared data file)")
    a.add_argument("--recipe", choices=["auto", "crops", "simcse", "sgopt", "quora"], default="auto",
                   help="auto (default): crops for a corpus, quora for the Quora TSV or no --data")
    a.add_argument("--queries", type=Path, help="label-free recipes: dev queries for selection and the gate: a BEIR "
                   "folder (its qrels/<--split>.tsv) or a queries file with --qrels; never your test queries")
    a.add_argument("--qrels", type=Path, help="dev qrels file (with a --queries file)")
    a.add_argument("--split", default="dev", help="qrels split of a BEIR --queries folder (default dev)")
    a.add_argument("--max-docs", type=positive_int, default=20_000,
                   help="label-free: documents sampled for training (default 20000)")
    a.add_argument("--eval-every", type=positive_int, default=50,
                   help="label-free: checkpoint selection every N steps (default 50)")
    a.add_argument("--id-field", help="corpus id field (default: _id for BEIR, else id)")
    a.add_argument("--text-field", help="corpus text field (default text)")
    a.add_argument("--title-field", help="corpus title field (default: title for BEIR, else none)")
    a.add_argument("--steps", type=positive_int, help="training steps (default: 200 label-free, 500 Quora)")
    a.add_argument("--batch-size", type=positive_int, help="default: 32 label-free, 64 Quora")
    a.add_argument("--max-length", type=positive_int,
                   help="max tokens in training: the document length cap (default: 128 label-free, 32 Quora); "
                   "the exported encoder keeps the checkpoint's serving length")
    a.add_argument("--lr", type=positive_rate, help="default: 2e-5 label-free, 3e-5 Quora")
    a.add_argument("--seed", type=non_negative_int, default=1)
    a.add_argument("--skip", type=non_negative_int, default=2, help="mined candidates skipped first (default 2)")
    a.add_argument("--take", type=positive_int, default=1, help="mined negatives per pair (default 1)")
    a.add_argument("--gate", choices=["significant", "better"], default="significant",
                   help="label-free: when the adapted encoder replaces the stock one. significant (default): its "
                   "paired gain on the dev queries (or the proxy) has a 95 %% bootstrap interval above 0; better: "
                   "any gain")
    a.add_argument("--quantize", choices=["int8", "none", "auto"], default="auto",
                   help="auto (default): static int8 when its calibration and gate data are readable, else fp32")
    a.add_argument("--threads", type=positive_int, help="torch and ONNX Runtime threads")
    a.add_argument("--no-progress", action="store_true", help="no progress bars (logs and status.json only)")
    a.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from indexer.runtime.encoder import EncoderLoadError
    from models.checkpoint import CheckpointError
    from models.corpus_adapt import AdaptInputError
    from models.data import DataError
    from models.export import ParityError
    from models.quantize import QualityGateError

    def go() -> int:
        work = args.work or args.out.with_name(args.out.name + ".work")
        if _label_free(args):
            return _adapt_corpus(args, work)
        from models.adapt import AdaptConfig, adapt

        out = adapt(AdaptConfig(out=args.out, work=work, checkpoint=args.checkpoint, data=args.data,
                                steps=args.steps or 500, batch_size=args.batch_size or 64,
                                max_length=args.max_length or 32, lr=args.lr or 3e-5, seed=args.seed,
                                skip=args.skip, take=args.take, quantize=args.quantize, threads=args.threads,
                                progress=not args.no_progress))
        print(f"wrote {out} (work folder {work}); index it with: indexer build --model {out} --target-recall 0.95")
        return 0

    return run_cli(go, (DataError, EncoderLoadError, CheckpointError, ParityError, QualityGateError, AdaptInputError,
                        ValueError, OSError), "encoder adapt")


def _label_free(args: argparse.Namespace) -> bool:
    """`--recipe crops|simcse|sgopt`, or `--data` naming a corpus that is not the Quora question-pairs TSV."""
    if args.recipe != "auto":
        return args.recipe != "quora"
    if args.data is None or "://" in str(args.data) or not Path(args.data).exists():
        return False
    from indexer.corpus import detect_format

    return detect_format(Path(args.data)) != "quora"


def _adapt_corpus(args: argparse.Namespace, work: Path) -> int:
    from models.corpus_adapt import AdaptInputError, CorpusAdaptConfig, adapt_corpus

    if args.data is None:
        raise AdaptInputError("--recipe crops|simcse|sgopt needs --data CORPUS (the formats `indexer build --data` "
                              "reads)")
    recipe = "crops" if args.recipe == "auto" else args.recipe
    cfg = CorpusAdaptConfig(
        out=args.out, work=work, data=Path(args.data), recipe=recipe, checkpoint=args.checkpoint,
        queries=args.queries, qrels=args.qrels, split=args.split, gate=args.gate, max_docs=args.max_docs,
        steps=args.steps or 200,
        batch_size=args.batch_size or 32, max_length=args.max_length or 128, lr=args.lr or 2e-5,
        eval_every=args.eval_every, seed=args.seed, skip=args.skip, take=args.take, quantize=args.quantize,
        threads=args.threads, progress=not args.no_progress, id_field=args.id_field, text_field=args.text_field,
        title_field=args.title_field)
    out = adapt_corpus(cfg)
    meta = json.loads((out / "encoder.json").read_text()).get("adaptation") or {}
    gate = meta.get("gate") or {}
    gain = f"gain {gate.get('delta', 0):+.2f} [95 % CI {', '.join(f'{x:+.2f}' for x in gate.get('ci', []))}]"
    if not meta.get("adapted"):
        why = str(meta.get("note") or "").removesuffix(": the stock encoder is exported")
        print(f"encoder adapt: the gate ({gate.get('rule')}) kept the stock encoder: {why}; wrote the stock encoder "
              f"to {out}")
    elif meta.get("verified"):
        print(f"encoder adapt: adapted ({recipe}): dev nDCG@10 {meta.get('stock_score')} → {meta.get('best_score')} "
              f"at step {meta.get('best_step')}, {gain} over {gate.get('items')} dev queries; wrote {out}")
    else:
        print(f"encoder adapt: adapted ({recipe}) but UNVERIFIED: selected on the {meta.get('selected_on')} "
              f"({meta.get('stock_score')} → {meta.get('best_score')}); no dev queries measured retrieval "
              f"(give --queries); wrote {out}")
    print(f"work folder {work}; index it with: indexer build --data {args.data} --model {out}")
    return 0
