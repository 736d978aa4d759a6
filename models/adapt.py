"""`encoder adapt`: the in-domain recipe of `bench/quora_experiment.py`'s best trained arm, as one resumable command.

base export (fp32, mean) → hard negatives mined with Strata's own index (`models.mine`) → supervised contrastive
training with in-batch and mined negatives, token-mean pooling, selected on the Quora dev split
(`models.trainer`) → export of the best checkpoint with the token mean served (`models.export`).

Every stage writes into `work/` and is skipped when its output is there and was made from the same inputs (a
stamp file per stage), so a stopped run continues where it was: training resumes from its last checkpoint
(every `eval_every` steps). `work/status.json` says which stage runs, the training step and an ETA, for people
and for the API's `/ready` (the service reads the file; it imports nothing from here). The output folder is
written atomically by the exporter, so an index build never sees half an encoder.

The Quora training split is rows 100,000–295,999 minus every qid of the evaluation rows (< 100,000) and of the dev
rows (296,000–299,999); rows ≥ 300,000 are never read (`models.data`).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from indexer.runtime.atomic import write_json_atomic
from indexer.runtime.progress import FILE_ENV

if TYPE_CHECKING:
    from models.data import QuoraDev

log = logging.getLogger(__name__)

STATUS_FILE = "status.json"
STAGES = ("base", "mine", "train", "export")


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
class AdaptStatus:
    stage: str  # one of STAGES, or "done" / "failed"
    started_at: float
    updated_at: float
    step: int = 0
    total_steps: int = 0
    eta_s: float | None = None
    best_dev: float | None = None
    message: str = ""
    stages_done: list[str] = field(default_factory=list)
    stage_started_at: dict[str, float] = field(default_factory=dict)  # Unix time each stage of this run started


class StatusWriter:
    """`status.json`, rewritten atomically on every change, and the caller's callback told of each."""

    def __init__(self, work: Path, on_status: Callable[[AdaptStatus], None] | None = None) -> None:
        self.path = work / STATUS_FILE
        self.on_status = on_status
        now = time.time()
        self.status = AdaptStatus(stage="base", started_at=now, updated_at=now)

    def update(self, **changes: object) -> None:
        for k, v in changes.items():
            setattr(self.status, k, v)
        self.status.updated_at = time.time()
        write_json_atomic(self.path, asdict(self.status))
        if self.on_status:
            self.on_status(self.status)

    def run(self, stages: Callable[[], Path]) -> Path:
        """Run a recipe's stages; on any way out but success (KeyboardInterrupt and SIGTERM included) the status
        says `failed` and why, so it never claims to be still running."""
        try:
            return stages()
        except BaseException as exc:
            self.update(stage="failed", eta_s=None, message=f"{self.status.stage}: {type(exc).__name__}: {exc}")
            raise


def _stamp_ok(path: Path, want: dict[str, object]) -> bool:
    try:
        return bool(json.loads(path.read_text()) == want)
    except (OSError, ValueError):
        return False


def _eta_from_log(log_path: Path, total: int) -> tuple[int, float | None]:
    """(last logged step, seconds left) from the trainer's log.jsonl: the rate of the steps logged in this process's
    run (wall time between the first and last step records after the latest start or resume)."""
    try:
        rows = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return 0, None
    steps = [r for r in rows if "step" in r and "time" in r and "loss" in r]
    if not steps:
        return 0, None
    last = steps[-1]
    first = next((r for r in steps if r["time"] >= last["time"] - 3600), steps[0])
    if last["step"] <= first["step"]:
        return int(last["step"]), None
    rate = (last["time"] - first["time"]) / (last["step"] - first["step"])
    return int(last["step"]), max(0.0, (total - last["step"]) * rate)


def _best_dev_from_log(log_path: Path) -> float | None:
    """The best dev figure so far, from the trainer's log.jsonl (its last evaluation row): what the status shows
    while training runs, and after a run that found the training finished already (resumed, nothing retrained)."""
    try:
        rows = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return None
    best = [r["best_dev"] for r in rows if isinstance(r.get("best_dev"), (int, float)) and r["best_dev"] > -1e30]
    return float(best[-1]) if best else None


def adapt(cfg: AdaptConfig, on_status: Callable[[AdaptStatus], None] | None = None) -> Path:
    """Run (or continue) the recipe; returns `cfg.out`. Raises on bad data or a failed export, leaving `out`
    untouched."""
    if cfg.data is not None:  # checked (a URL: downloaded, into `indexer build`'s cache) before minutes of export
        from indexer.quora import resolve_source
        from indexer.runtime.paths import strata_home

        cfg = replace(cfg, data=resolve_source(str(cfg.data), strata_home() / "downloads"))
    if cfg.checkpoint is not None and not Path(cfg.checkpoint).is_dir():
        raise FileNotFoundError(f"checkpoint folder {cfg.checkpoint} not found")
    work = Path(cfg.work)
    work.mkdir(parents=True, exist_ok=True)
    status = StatusWriter(work, on_status)
    return status.run(lambda: _run(cfg, work, status))


def _run(cfg: AdaptConfig, work: Path, status: StatusWriter) -> Path:
    from indexer.runtime.encoder import EncoderMeta
    from models.checkpoint import default_checkpoint
    from models.data import DEV_ROWS, EVAL_ROWS, HELD_OUT, quora_dev, quora_training_questions
    from models.export import export_encoder
    from models.mine import mine

    checkpoint = Path(cfg.checkpoint) if cfg.checkpoint else Path(default_checkpoint())
    dev_rows = cfg.dev_rows or DEV_ROWS
    start, stop = cfg.training_rows or (EVAL_ROWS, HELD_OUT)
    eval_rows = EVAL_ROWS if cfg.eval_rows is None else cfg.eval_rows
    data = str(cfg.data) if cfg.data else None

    def stage(name: str, message: str) -> None:
        status.update(stage=name, message=message,
                      stage_started_at={**status.status.stage_started_at, name: time.time()})
        # under the demo's chain (which follows this run's files) the chain numbers the stages: one numbering
        level = logging.DEBUG if os.environ.get(FILE_ENV) else logging.INFO
        log.log(level, "adapt [%d/%d] %s: %s", STAGES.index(name) + 1, len(STAGES), name, message)

    def done(name: str) -> None:
        status.update(stages_done=[*status.status.stages_done, name])

    # 1. the base encoder, exported fp32 with mean pooling: what mines the negatives
    base = work / "base"
    base_stamp = {"checkpoint": str(checkpoint.resolve())}
    stage("base", f"export {checkpoint} (fp32, mean) to {base}")
    if not (_stamp_ok(work / "base.json", base_stamp) and (base / "encoder.json").is_file()):
        export_encoder(checkpoint, base, pooling="mean", force=True)
        write_json_atomic(work / "base.json", base_stamp)
    base_sha = EncoderMeta.model_validate_json((base / "encoder.json").read_text()).onnx_sha256
    done("base")

    # 2. hard negatives mined with Strata's own index over the training split's questions
    mined = work / "mined.tsv"
    mine_stamp = {"base_sha256": base_sha, "data": data, "skip": cfg.skip, "take": cfg.take,
                  "rows": [start, stop], "eval_rows": eval_rows, "dev_rows": list(dev_rows)}
    stage("mine", f"hard negatives (skip {cfg.skip}, take {cfg.take}) to {mined}")
    if not (_stamp_ok(work / "mine.json", mine_stamp) and mined.is_file()):
        questions = quora_training_questions(data, start=start, stop=stop, eval_rows=eval_rows, dev_rows=dev_rows)
        mine(questions, base, mined, skip=cfg.skip, take=cfg.take, threads=cfg.threads, seed=cfg.seed,
             progress=cfg.progress)
        write_json_atomic(work / "mine.json", mine_stamp)
        # a new mined file invalidates any training on the old one
        (work / "train.json").unlink(missing_ok=True)
    done("mine")

    # 3. training: token-mean pooling, in-batch + mined negatives, selected on Quora dev MRR@10 of the mean
    train_dir = work / "train"
    train_stamp = {"checkpoint": str(checkpoint.resolve()), "mine": mine_stamp, **cfg.train_settings()}
    stage("train", f"{cfg.steps} steps, batch {cfg.batch_size}, selected on Quora dev every {cfg.eval_every}")
    _train(cfg, checkpoint, mined, work, status, train_stamp, lambda: quora_dev(data, dev_rows=dev_rows))
    done("train")

    # 4. export the best checkpoint with the token mean served (int8 where it can be calibrated and gated)
    stage("export", f"{train_dir / 'best'} (pooling mean, quantize {cfg.quantize}) to {cfg.out}")
    _export(cfg, checkpoint, work, train_stamp)
    done("export")
    status.update(stage="done", message=f"exported {cfg.out}", eta_s=0.0)
    return Path(cfg.out)


def _train(cfg: AdaptConfig, checkpoint: Path, mined: Path, work: Path, status: StatusWriter,
           train_stamp: dict[str, Any], dev: Callable[[], QuoraDev]) -> None:
    """Stage 3: token-mean pooling, in-batch + mined negatives, selected on Quora dev MRR@10 of the mean; resumed
    from its checkpoints, skipped when an earlier run finished the same training."""
    from models.train_config import TrainConfig
    from models.trainer import Trainer

    train_dir = work / "train"
    if not start_training(work, train_stamp):  # trained by an earlier run: its best dev figure is in its log
        status.update(best_dev=_best_dev_from_log(train_dir / "log.jsonl"))
        return
    tcfg = TrainConfig(
        out=train_dir, model=str(checkpoint), pooler="avg_last", objective="sup_hardneg", data=str(mined),
        batch_size=cfg.batch_size, max_length=cfg.max_length, lr=cfg.lr, max_steps=cfg.steps,
        warmup_ratio=cfg.warmup_ratio, eval_every=cfg.eval_every, eval_on="quora", eval_mode="mean",
        eval_at_start=False, seed=cfg.seed, resume=True, device="cpu", threads=cfg.threads, progress=cfg.progress,
    )
    train_watched(lambda: Trainer(tcfg, dev=dev()).train(), train_dir, cfg.steps, status, best_dev=True)
    write_json_atomic(work / "train.json", {**train_stamp, "finished": True})


def start_training(work: Path, train_stamp: dict[str, Any]) -> bool:
    """False when an earlier run finished this very training; else True, its checkpoints kept when they are this
    training's (resumed), removed when they are another's."""
    if _stamp_ok(work / "train.json", {**train_stamp, "finished": True}):
        return False
    if not _stamp_ok(work / "train.json", {**train_stamp, "finished": False}):
        import shutil

        shutil.rmtree(work / "train", ignore_errors=True)  # another run's checkpoints: not resumable here
        write_json_atomic(work / "train.json", {**train_stamp, "finished": False})
    return True


def train_watched(train: Callable[[], Any], train_dir: Path, steps: int, status: StatusWriter, *,
                  best_dev: bool) -> Any:  # noqa: ANN401 (the trainer's result)
    """Run `train` while status.json's step and ETA follow the trainer's log (and its best dev figure, with
    `best_dev`); then the final figures."""
    import threading

    stop_watch = threading.Event()

    def watch() -> None:
        while not stop_watch.wait(10):
            step, eta = _eta_from_log(train_dir / "log.jsonl", steps)
            extra = {"best_dev": _best_dev_from_log(train_dir / "log.jsonl")} if best_dev else {}
            status.update(step=step, total_steps=steps, eta_s=eta, **extra)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        result = train()
    finally:
        stop_watch.set()
        watcher.join()
    status.update(step=result.steps, total_steps=steps, eta_s=0.0, best_dev=result.best_dev)
    return result


def quantize_choice(asked: str) -> Literal["int8"] | None:
    """`--quantize`: int8, none, or auto (int8 where its calibration and gate data are at hand)."""
    if asked != "auto":
        return "int8" if asked == "int8" else None
    from models.quantize import int8_data_problem

    problem = int8_data_problem()
    if problem:
        log.warning("adapt: exporting fp32: static int8 needs its calibration and gate data (%s)", problem)
    return None if problem else "int8"


def export_once(work: Path, out: Path, export_stamp: dict[str, Any], export: Callable[[], Any]) -> None:
    """Run `export` (it returns the `EncoderMeta` it wrote to `out`) unless the same export is still in place: a
    nightly rerun costs nothing."""
    from indexer.runtime.encoder import EncoderMeta

    out_meta = Path(out) / "encoder.json"
    current_sha = (EncoderMeta.model_validate_json(out_meta.read_text()).onnx_sha256 if out_meta.is_file()
                   else None)
    if not (current_sha and _stamp_ok(work / "export.json", {**export_stamp, "onnx_sha256": current_sha})):
        meta = export()
        write_json_atomic(work / "export.json", {**export_stamp, "onnx_sha256": meta.onnx_sha256})


def _export(cfg: AdaptConfig, checkpoint: Path, work: Path, train_stamp: dict[str, Any]) -> None:
    """Stage 4: the best checkpoint exported with the token mean served (int8 where it can be calibrated and
    gated)."""
    from models.export import export_encoder

    quantize = quantize_choice(cfg.quantize)
    export_stamp = {"train": train_stamp, "quantize": quantize, "out": str(Path(cfg.out).resolve())}
    export_once(work, Path(cfg.out), export_stamp, lambda: export_encoder(
        work / "train" / "best", cfg.out, pooling="mean", force=True, quantize=quantize,
        source=f"encoder adapt of {checkpoint} (Quora, {cfg.steps} steps, seed {cfg.seed})"))
