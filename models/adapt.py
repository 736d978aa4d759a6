"""`encoder adapt`: the in-domain recipe of the Quora experiment's best trained arm (docs/decisions.md), as one
resumable command.

base export (fp32, mean) → hard negatives mined with Strata's own index (`models.mine`) → supervised contrastive
training with in-batch and mined negatives, token-mean pooling, selected on the Quora dev split
(`models.trainer`) → export of the best checkpoint with the token mean served (`models.export`).

The recipe is `QUORA_STAGES`, stages of `models.pipeline`, which owns what every recipe shares: each stage writes
into `work/` and is skipped when its output is there and was made from the same inputs (a stamp file per stage),
so a stopped run continues where it was (training resumes from its last checkpoint, every `eval_every` steps);
`work/status.json` says which stage runs, the training step and an ETA, for people and for the API's `/ready`.

The Quora training split is rows 100,000–295,999 minus every qid of the evaluation rows (< 100,000) and of the dev
rows (296,000–299,999); rows ≥ 300,000 are never read (`models.data`). This module imports `models.pipeline` and,
inside its stages, `models.data`, `models.mine`, `models.trainer` and `models.export`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from models import pipeline
from models.pipeline import Stage, StatusWriter

log = logging.getLogger(__name__)


@dataclass
class AdaptConfig:
    out: Path  # the exported serving folder (what `indexer build --model` takes)
    work: Path  # base/, mined.tsv, train/, status.json
    checkpoint: Path | None = None  # Hugging Face folder to adapt (default: all-MiniLM-L6-v2)
    data: str | Path | None = None  # the Quora TSV, or its URL (downloaded once, as `indexer build` does)
    steps: int = 500
    batch_size: int = 64
    max_length: int = 32
    lr: float = 3e-5
    warmup_ratio: float = 0.1
    eval_every: int = 125
    seed: int = 1
    skip: int = 2  # mined candidates skipped first, where unlabelled duplicates sit
    take: int = 1
    quantize: Literal["int8", "none", "auto"] = "auto"
    threads: int | None = None
    progress: bool = True
    dev_rows: tuple[int, int] | None = None  # None: models.data.DEV_ROWS
    training_rows: tuple[int, int] | None = None  # (start, stop); None: the full training split
    eval_rows: int | None = None  # rows below this are the evaluation rows whose qids training excludes

    def train_settings(self) -> dict[str, object]:
        keys = ("steps", "batch_size", "max_length", "lr", "warmup_ratio", "eval_every", "seed")
        return {k: getattr(self, k) for k in keys}



@dataclass
class QuoraRun:
    """One run of the recipe: its settings, and the stamps each stage hands the next."""

    cfg: AdaptConfig
    work: Path
    status: StatusWriter
    checkpoint: Path
    dev_rows: tuple[int, int]
    rows: tuple[int, int]  # the training rows (start, stop)
    eval_rows: int
    data: str | None
    stamps: dict[str, Any] = field(default_factory=dict)  # base_sha256, mine, train


def adapt(cfg: AdaptConfig, on_status: Callable[[pipeline.AdaptStatus], None] | None = None) -> Path:
    """Run (or continue) the recipe; returns `cfg.out`. Raises on bad data or a failed export, leaving `out`
    untouched."""
    if cfg.data is not None:  # checked (a URL: downloaded, into `indexer build`'s cache) before minutes of export
        from indexer.quora import resolve_source
        from indexer.runtime.paths import strata_home

        cfg = replace(cfg, data=resolve_source(str(cfg.data), strata_home() / "downloads"))
    if cfg.checkpoint is not None and not Path(cfg.checkpoint).is_dir():
        raise FileNotFoundError(f"checkpoint folder {cfg.checkpoint} not found")
    pipeline.run_recipe(Path(cfg.work), QUORA_STAGES, lambda status: _start(cfg, status),
                        lambda run: f"exported {run.cfg.out}", on_status, log)
    return Path(cfg.out)


def _start(cfg: AdaptConfig, status: StatusWriter) -> QuoraRun:
    from models.checkpoint import default_checkpoint
    from models.data import DEV_ROWS, EVAL_ROWS, HELD_OUT

    checkpoint = Path(cfg.checkpoint) if cfg.checkpoint else Path(default_checkpoint())
    return QuoraRun(cfg, Path(cfg.work), status, checkpoint, cfg.dev_rows or DEV_ROWS,
                    cfg.training_rows or (EVAL_ROWS, HELD_OUT), EVAL_ROWS if cfg.eval_rows is None else cfg.eval_rows,
                    str(cfg.data) if cfg.data else None)


def _base(run: QuoraRun) -> None:
    """1. the base encoder, exported fp32 with mean pooling: what mines the negatives."""
    run.stamps["base_sha256"] = pipeline.export_base(run.work, run.checkpoint)


def _mine(run: QuoraRun) -> None:
    """2. hard negatives mined with Strata's own index over the training split's questions; a new mined file
    invalidates any training on the old one."""
    from models.data import quora_training_questions
    from models.mine import mine

    cfg, (start, stop) = run.cfg, run.rows
    stamp = {"base_sha256": run.stamps["base_sha256"], "data": run.data, "skip": cfg.skip, "take": cfg.take,
             "rows": [start, stop], "eval_rows": run.eval_rows, "dev_rows": list(run.dev_rows)}
    run.stamps["mine"] = stamp

    def make() -> None:
        questions = quora_training_questions(run.data, start=start, stop=stop, eval_rows=run.eval_rows,
                                             dev_rows=run.dev_rows)
        mine(questions, run.work / "base", run.work / "mined.tsv", skip=cfg.skip, take=cfg.take, threads=cfg.threads,
             seed=cfg.seed, progress=cfg.progress)

    pipeline.stamped_output(run.work / "mine.json", stamp, run.work / "mined.tsv", make,
                            invalidates=[run.work / "train.json"])


def _train(run: QuoraRun) -> None:
    """3. token-mean pooling, in-batch + mined negatives, selected on Quora dev MRR@10 of the mean; resumed from its
    checkpoints, skipped when an earlier run finished the same training."""
    from models.data import quora_dev
    from models.train_config import TrainConfig
    from models.trainer import Trainer

    cfg = run.cfg
    stamp = {"checkpoint": str(run.checkpoint.resolve()), "mine": run.stamps["mine"], **cfg.train_settings()}
    run.stamps["train"] = stamp
    tcfg = TrainConfig(
        out=run.work / "train", model=str(run.checkpoint), pooler="avg_last", objective="sup_hardneg",
        data=str(run.work / "mined.tsv"), batch_size=cfg.batch_size, max_length=cfg.max_length, lr=cfg.lr,
        max_steps=cfg.steps, warmup_ratio=cfg.warmup_ratio, eval_every=cfg.eval_every, eval_on="quora",
        eval_mode="mean", eval_at_start=False, seed=cfg.seed, resume=True, device="cpu", threads=cfg.threads,
        progress=cfg.progress,
    )
    pipeline.train_stage(run.work, stamp, lambda: Trainer(tcfg, dev=quora_dev(run.data, dev_rows=run.dev_rows)).train(),
                         cfg.steps, run.status, follow_best_dev=True)


def _export(run: QuoraRun) -> None:
    """4. the best checkpoint exported with the token mean served (int8 where it can be calibrated and gated)."""
    from models.export import export_encoder

    cfg = run.cfg
    source = f"encoder adapt of {run.checkpoint} (Quora, {cfg.steps} steps, seed {cfg.seed})"
    pipeline.export_stage(run.work, Path(cfg.out), run.stamps["train"], cfg.quantize, lambda quantize: export_encoder(
        run.work / "train" / "best", cfg.out, pooling="mean", force=True, quantize=quantize, source=source))


QUORA_STAGES: tuple[Stage[QuoraRun], ...] = (
    Stage("base", lambda r: f"export {r.checkpoint} (fp32, mean) to {r.work / 'base'}", _base),
    Stage("mine", lambda r: f"hard negatives (skip {r.cfg.skip}, take {r.cfg.take}) to {r.work / 'mined.tsv'}",
          _mine),
    Stage("train", lambda r: f"{r.cfg.steps} steps, batch {r.cfg.batch_size}, selected on Quora dev every "
          f"{r.cfg.eval_every}", _train),
    Stage("export", lambda r: f"{r.work / 'train' / 'best'} (pooling mean, quantize {r.cfg.quantize}) to "
          f"{r.cfg.out}", _export),
)
STAGES = tuple(s.name for s in QUORA_STAGES)
