"""The stage pipeline both `encoder adapt` recipes run on (`models.adapt`: Quora, supervised;
`models.corpus_adapt`: a user's corpus, label-free).

A recipe is a list of `Stage`s over a run object of its own (its config and what earlier stages produced);
`run_recipe` runs them in order. What this module owns:

- `work/status.json` (`StatusWriter`): the stage, its message, the training step, an ETA, the best dev figure, the
  stages done and when each started — rewritten atomically on every change, and `failed` with the reason on any
  way out but success. The service's `/ready` and the demo's chain read the file (they import nothing from here).
- The skip-if-done rule: a stage's output is kept when a stamp file beside it holds the same inputs
  (`stamped_output`); a new output removes the stamps of what was made from the old one.
- The stages both recipes share: the base export (fp32, token mean: what mines the negatives), the training with
  its resume rule (`train.json`: resumed from `train/last` when the same training was started, skipped when it
  finished, restarted otherwise) while status.json follows the trainer's log, and the final export, written once
  per stamp into an output folder the exporter replaces atomically.

It imports `indexer.runtime` (atomic files, encoder metadata) and, inside the stages, `models.export`,
`models.quantize`; never the recipes.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from indexer.runtime.atomic import write_json_atomic
from indexer.runtime.progress import FILE_ENV

if TYPE_CHECKING:
    from indexer.runtime.encoder import EncoderMeta

log = logging.getLogger(__name__)

STATUS_FILE = "status.json"
R = TypeVar("R")


@dataclass
class AdaptStatus:
    stage: str  # a recipe's stage name, or "done" / "failed"
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

    def __init__(self, work: Path, on_status: Callable[[AdaptStatus], None] | None = None,
                 first_stage: str = "base") -> None:
        self.path = work / STATUS_FILE
        self.on_status = on_status
        now = time.time()
        self.status = AdaptStatus(stage=first_stage, started_at=now, updated_at=now)

    def update(self, **changes: object) -> None:
        for k, v in changes.items():
            setattr(self.status, k, v)
        self.status.updated_at = time.time()
        write_json_atomic(self.path, asdict(self.status))
        if self.on_status:
            self.on_status(self.status)

    def begin(self, name: str, message: str) -> None:
        self.update(stage=name, message=message, stage_started_at={**self.status.stage_started_at, name: time.time()})

    def done(self, name: str) -> None:
        self.update(stages_done=[*self.status.stages_done, name])

    def run(self, stages: Callable[[], R]) -> R:
        """Run a recipe's stages; on any way out but success (KeyboardInterrupt and SIGTERM included) the status
        says `failed` and why, so it never claims to be still running."""
        try:
            return stages()
        except BaseException as exc:
            self.update(stage="failed", eta_s=None, message=f"{self.status.stage}: {type(exc).__name__}: {exc}")
            raise


@dataclass(frozen=True)
class Stage(Generic[R]):
    """One step of a recipe: `run` does it (skipping what its stamps say is done); `message` says what it does,
    in status.json and the log; `when` leaves it out of a run (a recipe without mining)."""

    name: str
    message: Callable[[R], str]
    run: Callable[[R], None]
    when: Callable[[R], bool] = lambda _run: True


def run_recipe(work: Path, stages: Sequence[Stage[R]], start: Callable[[StatusWriter], R],
               finish: Callable[[R], str], on_status: Callable[[AdaptStatus], None] | None,
               logger: logging.Logger) -> R:
    """Create `work`, then under one `StatusWriter`: `start` (the recipe's run object: reading and checking its
    inputs counts as the first stage), each stage in order, and `finish` (its final message, with stage `done`)."""
    work.mkdir(parents=True, exist_ok=True)
    status = StatusWriter(work, on_status, stages[0].name)

    def go() -> R:
        run = start(status)
        for number, stage in enumerate(stages, 1):
            if not stage.when(run):
                continue
            message = stage.message(run)
            status.begin(stage.name, message)
            # under the demo's chain (which follows this run's files) the chain numbers the stages: one numbering
            level = logging.DEBUG if os.environ.get(FILE_ENV) else logging.INFO
            logger.log(level, "adapt [%d/%d] %s: %s", number, len(stages), stage.name, message)
            stage.run(run)
            status.done(stage.name)
        status.update(stage="done", message=finish(run), eta_s=0.0)
        return run

    return status.run(go)


# --- the skip-if-done rule -------------------------------------------------------------------------------------

def stamp_ok(path: Path, want: dict[str, object]) -> bool:
    try:
        return bool(json.loads(path.read_text()) == want)
    except (OSError, ValueError):
        return False


def stamped_output(stamp_file: Path, stamp: dict[str, Any], output: Path, make: Callable[[], object],
                   invalidates: Sequence[Path] = ()) -> bool:
    """Run `make` unless `output` is there and `stamp_file` holds `stamp`; then write the stamp and remove the
    stamps in `invalidates` (what was made from the old output). True when `make` ran."""
    if stamp_ok(stamp_file, stamp) and output.is_file():
        return False
    make()
    write_json_atomic(stamp_file, stamp)
    for path in invalidates:
        path.unlink(missing_ok=True)
    return True


def export_base(where: Path, checkpoint: Path, max_length: int | None = None) -> str:
    """The base stage: `checkpoint` exported fp32 with the token mean into `where/base` (stamped in
    `where/base.json`; with `max_length`, at that length cap): what mines. Returns its ONNX sha256."""
    from indexer.runtime.encoder import EncoderMeta
    from models.export import export_encoder

    base = where / "base"
    stamp: dict[str, Any] = {"checkpoint": str(checkpoint.resolve())}
    if max_length is not None:
        stamp["max_length"] = max_length
    stamped_output(where / "base.json", stamp, base / "encoder.json",
                   lambda: export_encoder(checkpoint, base, pooling="mean", max_length=max_length, force=True))
    return EncoderMeta.model_validate_json((base / "encoder.json").read_text()).onnx_sha256


# --- training --------------------------------------------------------------------------------------------------

def _log_rows(log_path: Path) -> list[dict[str, Any]] | None:
    try:
        return [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return None


def eta_from_log(log_path: Path, total: int) -> tuple[int, float | None]:
    """(last logged step, seconds left) from the trainer's log.jsonl: the rate of the steps logged in this process's
    run (wall time between the first and last step records after the latest start or resume)."""
    steps = [r for r in _log_rows(log_path) or [] if "step" in r and "time" in r and "loss" in r]
    if not steps:
        return 0, None
    last = steps[-1]
    first = next((r for r in steps if r["time"] >= last["time"] - 3600), steps[0])
    if last["step"] <= first["step"]:
        return int(last["step"]), None
    rate = (last["time"] - first["time"]) / (last["step"] - first["step"])
    return int(last["step"]), max(0.0, (total - last["step"]) * rate)


def best_dev_from_log(log_path: Path) -> float | None:
    """The best dev figure so far, from the trainer's log.jsonl (its last evaluation row): what the status shows
    while training runs, and after a run that found the training finished already (resumed, nothing retrained)."""
    rows = _log_rows(log_path) or []
    best = [r["best_dev"] for r in rows if isinstance(r.get("best_dev"), (int, float)) and r["best_dev"] > -1e30]
    return float(best[-1]) if best else None


def start_training(work: Path, train_stamp: dict[str, Any]) -> bool:
    """False when an earlier run finished this very training; else True, its checkpoints kept when they are this
    training's (resumed), removed when they are another's."""
    if stamp_ok(work / "train.json", {**train_stamp, "finished": True}):
        return False
    if not stamp_ok(work / "train.json", {**train_stamp, "finished": False}):
        import shutil

        shutil.rmtree(work / "train", ignore_errors=True)  # another run's checkpoints: not resumable here
        write_json_atomic(work / "train.json", {**train_stamp, "finished": False})
    return True


def train_watched(train: Callable[[], Any], train_dir: Path, steps: int, status: StatusWriter, *,
                  best_dev: bool) -> Any:  # noqa: ANN401 (the trainer's result)
    """Run `train` while status.json's step and ETA follow the trainer's log (and its best dev figure, with
    `best_dev`); then the final figures."""
    stop_watch = threading.Event()

    def watch() -> None:
        while not stop_watch.wait(10):
            step, eta = eta_from_log(train_dir / "log.jsonl", steps)
            extra = {"best_dev": best_dev_from_log(train_dir / "log.jsonl")} if best_dev else {}
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


def train_stage(work: Path, train_stamp: dict[str, Any], train: Callable[[], Any], steps: int,
                status: StatusWriter, *, follow_best_dev: bool) -> None:
    """The training stage: `train` (a trainer writing `work/train`, resumable from `train/last`) run unless an
    earlier run finished the same training (`start_training`); `follow_best_dev`: status.json's best dev figure
    follows the log, and is read from it when nothing is retrained."""
    if not start_training(work, train_stamp):
        if follow_best_dev:  # trained by an earlier run: its best dev figure is in its log
            status.update(best_dev=best_dev_from_log(work / "train" / "log.jsonl"))
        return
    train_watched(train, work / "train", steps, status, best_dev=follow_best_dev)
    write_json_atomic(work / "train.json", {**train_stamp, "finished": True})


# --- the export ------------------------------------------------------------------------------------------------

def quantize_choice(asked: str) -> Literal["int8"] | None:
    """`--quantize`: int8, none, or auto (int8 where its calibration and gate data are at hand)."""
    if asked != "auto":
        return "int8" if asked == "int8" else None
    from models.quantize import int8_data_problem

    problem = int8_data_problem()
    if problem:
        log.warning("adapt: exporting fp32: static int8 needs its calibration and gate data (%s)", problem)
    return None if problem else "int8"


def export_once(work: Path, out: Path, export_stamp: dict[str, Any], export: Callable[[], EncoderMeta]) -> None:
    """Run `export` (it returns the `EncoderMeta` it wrote to `out`) unless the same export is still in place: a
    nightly rerun costs nothing."""
    from indexer.runtime.encoder import EncoderMeta

    out_meta = Path(out) / "encoder.json"
    current_sha = (EncoderMeta.model_validate_json(out_meta.read_text()).onnx_sha256 if out_meta.is_file()
                   else None)
    if not (current_sha and stamp_ok(work / "export.json", {**export_stamp, "onnx_sha256": current_sha})):
        meta = export()
        write_json_atomic(work / "export.json", {**export_stamp, "onnx_sha256": meta.onnx_sha256})


def export_stage(work: Path, out: Path, train_stamp: dict[str, Any], quantize: str,
                 export: Callable[[Literal["int8"] | None], EncoderMeta], **stamp: Any) -> None:  # noqa: ANN401
    """The final stage: `export(quantize)` into `out` (`--quantize` resolved by `quantize_choice`), stamped with the
    training, the quantization, the output folder and the recipe's `stamp` (kept in `work/export.json`)."""
    q = quantize_choice(quantize)
    export_stamp = {"train": train_stamp, "quantize": q, "out": str(Path(out).resolve()), **stamp}
    export_once(work, Path(out), export_stamp, lambda: export(q))
