"""The demo's background chain as one status: stage, progress and ONE ETA for everything left.

The chain (`service.demo.BackgroundTraining`): `encoder adapt` (base export → mine → train → export), then
`indexer build` with the adapted encoder, then the API's own swap. Its children say what they do in two files:
adapt's `status.json` (stage, best dev score) and `STRATA_PROGRESS_FILE` (the running job's counts, rate and ETA,
written by `indexer.runtime.progress`). `ChainMonitor` folds them into `chain.json` (what `/ready` shows under
`training`) and the log; `/ready` adds the swap's outcome, which only the API knows (`swap_outcome`).

The ETA of a stage that runs is its measured one (its own rate); a stage still to come is estimated from rates
measured on this machine: the served index's build (texts encoded per second, its build time for the same rows),
replaced by the mining's encoding rate once it ran, and the training's seconds per step once it runs. The priors
are the README demo's run on 2 cores: training costs about `TRAIN_TEXTS_PER_EXAMPLE` encoded texts per example.

One ETA that does not swing by an hour within a run, by two dampers: a measured rate counts as evidence beside
its prior rather than replacing it from its first noisy seconds (`blend`: the prior weighs as much as
`PRIOR_WEIGHT` units of the measured job; the training's seconds per step move a 500-step stage by minutes per
percent), and the finish time shown follows the raw one, which jumps with every stage change and rate update,
with an exponential moving average of time constant `ETA_TAU_S` (`ChainState.smooth`), never earlier than the
running stage's own end.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from indexer.runtime.atomic import write_json_atomic
from indexer.runtime.layout import IndexRoot
from indexer.runtime.manifest import Manifest
from indexer.runtime.progress import format_duration, read_jobs

log = logging.getLogger(__name__)

STAGES = ("base", "mine", "train", "export", "index", "swap")
ADAPT_STAGES = STAGES[:4]
MINE_TEXTS = 220_000  # the Quora training split's questions (rows 100,000-295,999)
TRAIN_TEXTS_PER_EXAMPLE = 18  # one training example costs about this many ONNX-encoded texts (see above)
GATE_ROWS = 3_500  # the int8 gate's screen (2,000 Quora rows, 500 STS-B pairs) encodes about this many texts, twice
EXPORT_FIXED_S = 60.0
SWAP_S = 10.0
# a prior rate weighs as much as this many units of a measured job (texts encoded, training steps)
PRIOR_WEIGHT = {"texts": 5_000, "steps": 25}
ETA_TAU_S = 600.0  # the time constant with which the shown finish time follows the raw estimate


@dataclass
class ChainSizes:
    """What the chain will do: enough to estimate the stages that have not started."""

    steps: int
    batch_size: int
    quantized: bool  # the final export calibrates and gates int8
    mine_texts: int = MINE_TEXTS


@dataclass
class StageRecord:
    name: str
    started_at: float
    finished_at: float | None = None
    done: int | None = None  # the stage's last progress count, of `total` `unit`
    total: int | None = None
    unit: str | None = None


@dataclass
class Rates:
    """Measured on this machine."""

    encode_per_s: float | None = None  # texts per second
    build_s: float | None = None  # the served index's build time, for the same rows
    step_s: float | None = None  # seconds per training step

    @classmethod
    def from_served(cls, root: Path) -> Rates:
        try:
            manifest = Manifest.load(IndexRoot(root).current_dir())
        except Exception:  # noqa: BLE001 (no readable served index: no prior)
            return cls()
        t = manifest.build_seconds
        rate = manifest.index.ntotal / t.encode_docs_s if t.encode_docs_s > 0 else None
        return cls(encode_per_s=rate, build_s=t.total_s or None)


def estimate(stage: str, sizes: ChainSizes, rates: Rates) -> float | None:
    """Seconds a stage that has not started will take, or None when nothing measured says."""
    r = rates.encode_per_s
    if stage == "base":
        return EXPORT_FIXED_S
    if stage == "mine":
        return sizes.mine_texts / r if r else None
    if stage == "train":
        step_s = rates.step_s or (TRAIN_TEXTS_PER_EXAMPLE * sizes.batch_size / r if r else None)
        return sizes.steps * step_s if step_s else None
    if stage == "export":
        return EXPORT_FIXED_S + (2 * GATE_ROWS / r if sizes.quantized and r else 0.0)
    if stage == "index":
        return rates.build_s * 1.2 if rates.build_s else None  # + the nprobe calibration of --target-recall
    return SWAP_S


@dataclass
class ChainState:
    sizes: ChainSizes
    rates: Rates
    starts: dict[str, float] = field(default_factory=dict)  # stage -> Unix time it started
    ended_at: float | None = None
    built_version: str | None = None
    final: dict[str, Any] | None = None  # "swap" or "failed" once the children are done
    messages: dict[str, str] = field(default_factory=dict)  # the chain's own stages' (index, swap)
    priors: Rates = field(init=False)  # the rates known before the chain ran (`blend` weighs the measured ones)
    _eta_at: float | None = field(default=None, init=False)  # the smoothed finish time (Unix), `smooth`
    _eta_t: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        self.priors = Rates(self.rates.encode_per_s, self.rates.build_s, self.rates.step_s)

    def start(self, stage: str, at: float) -> None:
        self.starts.setdefault(stage, at)

    @property
    def current(self) -> str:
        return max(self.starts, key=lambda s: (self.starts[s], STAGES.index(s))) if self.starts else "base"

    def records(self, jobs: list[dict[str, Any]]) -> list[StageRecord]:
        """The stages so far, each with the counts of the last job that started in it."""
        names = sorted(self.starts, key=lambda s: (self.starts[s], STAGES.index(s)))
        out = []
        for k, name in enumerate(names):
            begin = self.starts[name]
            end = self.starts[names[k + 1]] if k + 1 < len(names) else self.ended_at
            r = StageRecord(name, begin, end)
            inside = [j for j in jobs if begin <= float(j.get("started_at") or 0) < (end or float("inf"))]
            if inside:
                last = max(inside, key=lambda j: float(j.get("started_at") or 0))
                r.done, r.total, r.unit = int(last.get("n") or 0), int(last.get("total") or 0), last.get("unit")
            out.append(r)
        return out

    def learn(self, jobs: list[dict[str, Any]]) -> None:
        """Rates measured by the children, weighed against the priors by how much they measured (`blend`)."""
        for j in jobs:
            rate, desc, n = j.get("rate"), str(j.get("desc", "")), int(j.get("n") or 0)
            if rate and desc.startswith("mine: encoding"):
                self.rates.encode_per_s = 1.0 / blend(self.priors.encode_per_s and 1.0 / self.priors.encode_per_s,
                                                      1.0 / float(rate), n, PRIOR_WEIGHT["texts"])
            elif rate and desc.startswith("train "):
                r = self.rates.encode_per_s  # the mining's, once it ran
                prior = self.priors.step_s or (TRAIN_TEXTS_PER_EXAMPLE * self.sizes.batch_size / r if r else None)
                self.rates.step_s = blend(prior, 1.0 / float(rate), n, PRIOR_WEIGHT["steps"])

    def smooth(self, raw_eta_s: float | None, floor_s: float | None, now: float) -> float | None:
        """The finish time shown: an exponential moving average (time constant `ETA_TAU_S`) of the raw one, never
        before the running stage's own end (`floor_s`). None until an estimate exists."""
        if raw_eta_s is None:
            return None if self._eta_at is None else max(self._eta_at - now, floor_s or 0.0, 0.0)
        raw_at = now + raw_eta_s
        if self._eta_at is None:
            self._eta_at = raw_at
        else:
            self._eta_at += (raw_at - self._eta_at) * (1.0 - math.exp(-max(now - self._eta_t, 0.0) / ETA_TAU_S))
        self._eta_t = now
        self._eta_at = max(self._eta_at, now + (floor_s or 0.0))
        return self._eta_at - now

    def snapshot(self, adapt: dict[str, Any], jobs: list[dict[str, Any]], now: float) -> dict[str, Any]:
        self.learn(jobs)
        records = self.records(jobs)
        stage = self.current
        index = STAGES.index(stage)
        begin = self.starts.get(stage, now)
        running = [j for j in jobs if float(j.get("started_at") or 0) >= begin]
        job = max(running, key=lambda j: float(j.get("started_at") or 0)) if running else None
        if job is not None and job.get("n", 0) < job.get("total", 0) and job.get("eta_s") is not None:
            stage_eta: float | None = float(job["eta_s"])
        else:  # no counts (an export), or between jobs: what is left of the stage's estimate
            est = estimate(stage, self.sizes, self.rates)
            stage_eta = max(0.0, est - (now - begin)) if est is not None else None
        later = [estimate(s, self.sizes, self.rates) for s in STAGES[index + 1:]]
        raw = None if stage_eta is None or None in later else stage_eta + sum(later)  # type: ignore[arg-type]
        eta = self.smooth(raw, stage_eta, now)
        cur = records[-1] if records else StageRecord(stage, begin)
        out: dict[str, Any] = {
            "stage": stage, "stage_number": index + 1, "stages_total": len(STAGES),
            "step": cur.done or 0, "total_steps": cur.total or 0, "unit": cur.unit,
            "stage_eta_s": stage_eta, "eta_s": eta, "eta_at": now + eta if eta is not None else None,
            "stage_elapsed_s": now - begin,
            "message": self.messages.get(stage) or adapt.get("message") or "starting `encoder adapt`",
            "best_dev": adapt.get("best_dev"), "built_version": self.built_version,
            "stages": [record_json(r) for r in records], "updated_at": time.time(),
        }
        if job is not None:
            out["progress"] = progress_line(job)
        return out


def blend(prior: float | None, measured: float, n: int, weight: int) -> float:
    """Seconds per unit: the measured figure after `n` units, weighed against a prior worth `weight` units (the
    measured one alone when there is no prior)."""
    if not prior:
        return measured
    return (prior * weight + measured * n) / (weight + n)


def record_json(r: StageRecord) -> dict[str, Any]:
    return {"name": r.name, "started_at": r.started_at, "finished_at": r.finished_at,
            "seconds": (r.finished_at - r.started_at) if r.finished_at else None,
            "done": r.done, "total": r.total, "unit": r.unit}


def progress_line(p: dict[str, Any]) -> str:
    pct = f" ({100 * p['n'] / p['total']:.1f}%)" if p.get("total") else ""
    rate = f", {p['rate']:,.1f} {p.get('unit')}/s" if p.get("rate") else ""
    return f"{p.get('desc')}: {p.get('n', 0):,}/{p.get('total', 0):,} {p.get('unit')}{pct}{rate}"


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def eta_text(eta_s: float | None) -> str:
    if eta_s is None:
        return "ETA unknown yet"
    return f"ETA {format_duration(eta_s)} (~{time.strftime('%H:%M', time.localtime(time.time() + eta_s))})"


class ChainMonitor:
    """Writes `chain.json` from the children's files on every `tick` (the chain ticks every second), logs a line
    when a stage starts and every `log_every` s."""

    def __init__(self, out: Path, adapt_status: Path, progress_file: Path, state: ChainState, *,
                 log_every: float = 60.0) -> None:
        self.out, self.adapt_status, self.progress_file, self.state = out, adapt_status, progress_file, state
        self.log_every = log_every
        self.started = time.time()  # an adapt status older than this is a previous run's
        self._last_log = 0.0
        self._logged: set[str] = set()
        self._adapt: dict[str, Any] = {}

    def tick(self, stage: str | None = None, message: str | None = None) -> dict[str, Any]:
        """`stage`: the chain's own (index, swap); None while `encoder adapt` runs (its status says which)."""
        now = time.time()
        if stage is not None and message is not None:
            self.state.messages[stage] = message
        adapt = read_json(self.adapt_status) or {}
        if float(adapt.get("updated_at") or 0) >= self.started:
            self._adapt = adapt
            for name, at in (adapt.get("stage_started_at") or {}).items():
                if name in ADAPT_STAGES:
                    self.state.start(name, float(at))
        self.state.start(stage or "base", now)
        snap = self.state.snapshot(self._adapt, read_jobs(self.progress_file), now)
        if self.state.final is not None:
            snap |= self.state.final
        write_json_atomic(self.out, snap)
        for r in snap["stages"]:  # one line per stage, also for one that began and ended between two ticks
            if r["name"] not in self._logged and r["name"] != snap["stage"]:
                self._logged.add(r["name"])
                self._log(STAGES.index(r["name"]) + 1, r["name"], f"{_counts(r)}done in "
                          f"{format_duration(r['seconds'] or 0)}", snap["eta_s"])
        if snap["stage"] not in self._logged or now - self._last_log >= self.log_every:
            self._logged.add(snap["stage"])
            self._log(snap["stage_number"], snap["stage"], snap.get("progress") or snap["message"], snap["eta_s"])
        return snap

    def _log(self, number: int, stage: str, what: str, eta_s: float | None) -> None:
        self._last_log = time.time()
        what = what.removeprefix(f"{stage}: ")  # "mine: encoding: …" under stage mine
        log.info("background [%d/%d] %s: %s; %s for the whole chain", number, len(STAGES), stage, what,
                 eta_text(eta_s))

    def finish(self, **final: Any) -> None:
        """The children are done: `stage` "swap" (waiting for the API) or "failed", with a message."""
        self.state.final = final
        if final.get("stage") == "swap":
            self.tick("swap", final.get("message"))
            return
        self.state.ended_at = time.time()
        snap = self.state.snapshot(self._adapt, read_jobs(self.progress_file), self.state.ended_at)
        write_json_atomic(self.out, snap | final | {"eta_s": None, "eta_at": None, "stage_eta_s": None})


def _counts(r: dict[str, Any]) -> str:
    return f"{r['done']:,}/{r['total']:,} {r['unit']}, " if r.get("total") else ""


def swap_outcome(chain: dict[str, Any], served: str | None, served_since: float | None,
                 refused: tuple[str | None, str, float] | None) -> dict[str, Any]:
    """`chain.json` seen by the API: a chain waiting for its swap becomes "done" with the swap's outcome (when,
    and to which version) once the API swapped to the version it built, or refused it (why)."""
    built = chain.get("built_version")
    if chain.get("stage") != "swap" or not built:
        return chain
    if served == built:
        return chain | {"stage": "done", "eta_s": 0.0, "stage_eta_s": 0.0, "eta_at": None,
                        "swap": {"outcome": "swapped", "version": built, "at": served_since},
                        "message": f"swapped to {built} (built with the adapted encoder)"}
    if refused is not None and refused[0] == built:
        return chain | {"stage": "done", "eta_s": 0.0, "stage_eta_s": 0.0, "eta_at": None,
                        "swap": {"outcome": "refused", "version": built, "at": refused[2], "reason": refused[1]},
                        "message": f"the API refused {built}: {refused[1]}; still serving {served}"}
    return chain | {"swap": {"outcome": "pending", "version": built}}
