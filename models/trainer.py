"""The training loop: AdamW with linear warm-up/decay, gradient clipping, fixed seeds, bf16 autocast on CUDA,
dev evaluation every N steps (STS-B dev, or MRR@10 on the Quora dev split) keeping the best checkpoint,
resumable `last/` checkpoints, tqdm progress with ETA and a JSONL log.

Output folder: `best/` and `last/` are Strata checkpoints (`encoder/` + `pooler/`); `last/trainer_state.pt`
holds optimiser, scheduler, step and RNG states for `--resume`; `log.jsonl` one JSON object per event.
"""

from __future__ import annotations

import json
import logging
import math
import random
import shutil
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from models.checkpoint import check_max_length, default_checkpoint, encoder_folder
from models.data import Example, QuoraDev, load_training_data, quora_dev
from models.objectives import Objective, build_objective
from models.sentence_model import SentenceModel
from models.sts import StsSet, evaluate, load_task
from models.train_config import TrainConfig

log = logging.getLogger(__name__)
STATE = "trainer_state.pt"
# TrainConfig fields a resumed run must share with the checkpoint it resumes (`Trainer._check_same_run`)
RUN_DEFINING = ("model", "pooler", "pooler_options", "objective", "temperature", "sgopt_lambda", "data", "max_examples",
                "batch_size", "max_length", "lr", "pooler_lr", "adam_betas", "weight_decay", "seed", "eval_on",
                "eval_mode")


class DevSet(Protocol):
    """A selection set of its own: `score(encode)` (higher is better), named `metric` in the log, with optional
    `extras` (side figures of the same call) logged beside it."""

    metric: str

    def score(self, encode: Callable[[list[str]], np.ndarray]) -> float: ...


@dataclass
class TrainResult:
    best_dir: Path
    best_dev: float
    best_step: int
    steps: int
    seconds: float
    seconds_per_1k_steps: float


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def batches_for_epoch(n: int, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    """Deterministic shuffle per (seed, epoch), so a resumed run sees the same order; the last partial batch is
    dropped (in-batch negatives need a full batch)."""
    order = np.random.default_rng([seed, epoch]).permutation(n)
    return [order[i : i + batch_size] for i in range(0, n - batch_size + 1, batch_size)]


def linear_schedule(optimizer: torch.optim.Optimizer, warmup: int, total: int) -> torch.optim.lr_scheduler.LambdaLR:
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / max(1, warmup)
        return max(0.0, (total - step) / max(1, total - warmup))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


class Trainer:
    def __init__(
        self, config: TrainConfig, examples: list[Example] | None = None, dev: StsSet | QuoraDev | DevSet | None = None
    ) -> None:
        self.cfg = config
        if config.threads:
            torch.set_num_threads(config.threads)
        set_seed(config.seed)
        self.device = pick_device(config.device)
        options = {"reg_lambda": config.sgopt_lambda} if config.objective == "sgopt" else {}
        self.objective: Objective = build_objective(config.objective, config.temperature, **options)
        # a length past the position embeddings would fail inside the model at the first long batch, steps in
        check_max_length(encoder_folder(config.model or default_checkpoint()), config.max_length)
        raw = examples if examples is not None else load_training_data(config.data, config.max_examples, config.seed)
        self.examples = [ex[: self.objective.columns] for ex in raw if self.objective.usable(ex)]
        if len(self.examples) < config.batch_size:
            raise ValueError(
                f"{len(self.examples)} usable examples for objective {config.objective} "
                f"(needs {self.objective.columns} texts each) < batch size {config.batch_size}"
            )
        if dev is not None:
            self.dev = dev
        elif config.eval_on == "quora":
            self.dev = quora_dev()
        else:
            self.dev = load_task("STSB-dev", max_pairs=config.eval_max_pairs)
        self.model = SentenceModel.from_checkpoint(
            config.model or default_checkpoint(),
            pooler=config.pooler,
            max_length=config.max_length,
            **config.pooler_options,
        )
        self.model.to(self.device)
        self.objective.setup(self.model)
        encoder_params = [p for p in self.model.encoder.parameters() if p.requires_grad]
        head_params = [p for p in self.model.pooler.parameters() if p.requires_grad]
        groups = [{"params": encoder_params, "lr": config.lr}]
        if head_params:
            groups.append({"params": head_params, "lr": config.pooler_lr or config.lr})
        self.params = encoder_params + head_params
        # TrainConfig fills unset betas with the objective's paper values
        self.optimizer = torch.optim.AdamW(groups, weight_decay=config.weight_decay, betas=tuple(config.adam_betas))
        per_epoch = len(self.examples) // config.batch_size
        self.total_steps = config.max_steps or per_epoch * config.epochs
        self.scheduler = linear_schedule(self.optimizer, int(config.warmup_ratio * self.total_steps), self.total_steps)
        self.step, self.best_dev, self.best_step = 0, -math.inf, -1
        self.out = Path(config.out)

    # -- evaluation and checkpoints ---------------------------------------------------------------------------
    def dev_score(self) -> float:
        def encode(texts: list[str]) -> np.ndarray:
            return self.model.encode(texts, mode=self.cfg.eval_mode)

        if isinstance(self.dev, QuoraDev):
            return self.dev.mrr_at_10(encode)
        if hasattr(self.dev, "score"):  # a selection set of its own (models.corpus_adapt: BEIR dev, crop proxy)
            return float(self.dev.score(encode))
        return evaluate(encode, [self.dev])["avg"]

    def _log(self, **record: object) -> None:
        with open(self.out / "log.jsonl", "a") as f:
            f.write(json.dumps({"time": round(time.time(), 3), **record}) + "\n")

    def save_last(self) -> None:
        tmp = self.out / "last.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        self.model.save(tmp)
        torch.save(
            {
                "step": self.step,
                "best_dev": self.best_dev,
                "best_step": self.best_step,
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "rng": {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()},
                "config": self.cfg.model_dump(mode="json"),
            },
            tmp / STATE,
        )
        # never a moment without a complete checkpoint: the previous one is moved aside, not deleted, until the new
        # one is in place (a stop between the two renames resumes from `last.old`, see `try_resume`)
        last, old = self.out / "last", self.out / "last.old"
        shutil.rmtree(old, ignore_errors=True)
        if last.exists():
            last.rename(old)
        tmp.rename(last)
        shutil.rmtree(old, ignore_errors=True)

    def save_best(self) -> None:
        tmp = self.out / "best.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        self.model.save(tmp)
        (tmp / "train.json").write_text(
            json.dumps(
                {"step": self.step, "dev": self.best_dev, "dev_metric": self.cfg.eval_on, "stsb_dev": self.best_dev,
                 "config": self.cfg.model_dump(mode="json")}, indent=2
            )
        )
        shutil.rmtree(self.out / "best", ignore_errors=True)
        tmp.rename(self.out / "best")

    def try_resume(self) -> None:
        last = self.out / "last"
        if not (last / STATE).is_file() and (self.out / "last.old" / STATE).is_file():
            last = self.out / "last.old"  # stopped between `save_last`'s two renames
        if not (last / STATE).is_file():
            log.info("no checkpoint to resume in %s; starting fresh", last)
            return
        from safetensors.torch import load_file

        from models.checkpoint import encoder_folder
        from models.poolers import load_pooler

        state = torch.load(last / STATE, weights_only=False)
        self._check_same_run(last, state.get("config") or {})
        weights = load_file(str(encoder_folder(last) / "model.safetensors"))
        self.model.encoder.load_state_dict(weights, strict=True)  # a key missing or left over is a broken checkpoint
        self.model.pooler.load_state_dict(load_pooler(last / "pooler").state_dict())
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.step, self.best_dev, self.best_step = state["step"], state["best_dev"], state["best_step"]
        random.setstate(state["rng"]["python"])
        np.random.set_state(state["rng"]["numpy"])
        torch.set_rng_state(state["rng"]["torch"])
        log.info(
            "resumed from %s at step %d (best dev %.2f at step %d)", last, self.step, self.best_dev, self.best_step
        )

    def _check_no_earlier_run(self) -> None:
        """`ValueError` when a fresh run would start in a folder that holds an earlier one: its step-0 evaluation
        would replace the earlier run's `best/` (and its checkpoints `last/`) without a word."""
        held = [name for name in ("best", "last", "last.old") if (self.out / name).exists()]
        if held:
            raise ValueError(f"{self.out} already holds a training run ({', '.join(held)}): pass --resume to continue "
                             "it, or train into another --out (a fresh run would replace its checkpoints)")

    def _check_same_run(self, last: Path, saved: dict[str, Any]) -> None:
        """`ValueError` when `last` was trained with settings that make a resume a different run (another model,
        pooler, objective, data, batch, seed, optimiser or selection metric): its weights, optimiser state or
        batch order would not fit, or the loaded optimiser state would silently override the new values. The
        length of the run, evaluation cadence, device and threads may change."""
        def same(key: str, a: Any, b: Any) -> bool:  # noqa: ANN401 (JSON values)
            if key in ("model", "data") and isinstance(a, str) and isinstance(b, str) and a != b:
                return Path(a).resolve() == Path(b).resolve()  # one folder or file, spelt two ways
            return a == b

        current = self.cfg.model_dump(mode="json")
        differ = [f"{key} {saved[key]!r} → {current[key]!r}" for key in RUN_DEFINING
                  if key in saved and not same(key, saved[key], current.get(key))]
        if differ:
            raise ValueError(f"cannot resume {last}: it was trained with other settings ({'; '.join(differ)}); "
                             f"resume with the same settings, or train into another --out")

    def shown(self, score: float) -> str:
        """A dev score as people read it: Quora's MRR@10 on the page's 0-1 scale (kept × 100 inside)."""
        if isinstance(self.dev, QuoraDev):
            return f"MRR@10 {score / 100:.4f}"
        return f"{getattr(self.dev, 'metric', 'stsb_dev')} {score:.2f}"

    def evaluate_and_keep(self) -> float:
        score = self.dev_score()
        if score > self.best_dev:
            self.best_dev, self.best_step = score, self.step
            self.save_best()
        metric = "quora_dev_mrr10" if isinstance(self.dev, QuoraDev) else getattr(self.dev, "metric", "stsb_dev")
        extras = dict(getattr(self.dev, "extras", None) or {})  # side figures the selection set measured too
        log.info("step %d/%d: dev %s (best %s at step %d)", self.step, self.total_steps, self.shown(score),
                 self.shown(self.best_dev), self.best_step)
        self._log(step=self.step, **{metric: round(score, 4)}, dev=round(score, 4), best_dev=round(self.best_dev, 4),
                  **extras)
        return score

    # -- the loop -------------------------------------------------------------------------------------------
    def train(self) -> TrainResult:
        from indexer.runtime.progress import Progress

        cfg = self.cfg
        if not cfg.resume and self.step == 0:
            self._check_no_earlier_run()
        self.out.mkdir(parents=True, exist_ok=True)
        if cfg.resume:
            self.try_resume()
        if self.step == 0:
            self._start()
        amp = torch.autocast("cuda", dtype=torch.bfloat16) if cfg.amp and self.device.type == "cuda" else nullcontext()
        save_every = cfg.save_every or cfg.eval_every
        # a bar on a terminal (unless --no-progress), else a log line with rate and ETA every 30 s
        bar = Progress(self.total_steps, f"train {cfg.objective}/{cfg.pooler}", unit="steps", initial=self.step,
                       bar=cfg.progress, logger=log)
        started, start_step, step_seconds = time.perf_counter(), self.step, 0.0
        self.model.train()
        while self.step < self.total_steps:
            t0 = time.perf_counter()
            loss = self._optimisation_step(amp)
            step_seconds += time.perf_counter() - t0  # optimisation only: evaluation and saving excluded
            bar.update(1)
            if self.step % cfg.eval_every == 0 or self.step == self.total_steps:
                self.evaluate_and_keep()
                self.model.train()
            # after the evaluation, so that the last line's "best" counts the last checkpoint
            # no "best" before the first dev evaluation (-inf until then)
            best = {"best": self.shown(self.best_dev)} if math.isfinite(self.best_dev) else {}
            bar.set_postfix(refresh=False, loss=f"{loss:.4f}", **best)
            if self.step % save_every == 0 or self.step == self.total_steps:
                self.save_last()
        bar.close()
        return self._end(time.perf_counter() - started, self.step - start_step, step_seconds)

    def _start(self) -> None:
        """A fresh run's first log line, and with `eval_at_start` step 0's evaluation (the starting point competes
        too)."""
        self._log(event="start", examples=len(self.examples), total_steps=self.total_steps, device=str(self.device),
                  config=self.cfg.model_dump(mode="json"))
        if self.cfg.eval_at_start:
            self.evaluate_and_keep()

    def _optimisation_step(self, amp: Any) -> float:
        """One step on this step's batch (seeded per epoch: a resumed run takes the same batches); returns its
        loss, logged every 10 steps with the gradient norm and learning rate."""
        cfg = self.cfg
        epoch, index = divmod(self.step, len(self.examples) // cfg.batch_size)
        batch_idx = batches_for_epoch(len(self.examples), cfg.batch_size, cfg.seed, epoch)[index]
        with amp:
            loss = self.objective.loss(self.model, [self.examples[i] for i in batch_idx])
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, cfg.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        if self.step % 10 == 0 or self.step == self.total_steps:
            self._log(step=self.step, loss=round(loss.item(), 5), grad_norm=round(float(grad_norm), 4),
                      lr=self.scheduler.get_last_lr()[0])
        return float(loss.item())

    def _end(self, seconds: float, done: int, step_seconds: float) -> TrainResult:
        """The run's result and its last log line (`done` steps in this run, `step_seconds` of optimisation)."""
        result = TrainResult(self.out / "best", self.best_dev, self.best_step, self.step, seconds,
                             step_seconds / done * 1000 if done else float("nan"))
        self._log(event="end", best_dev=self.best_dev, best_step=self.best_step, seconds=round(seconds, 2),
                  seconds_per_1k_steps=round(result.seconds_per_1k_steps, 1))
        return result


def train(config: TrainConfig, **kwargs: object) -> TrainResult:
    return Trainer(config, **kwargs).train()  # type: ignore[arg-type]
