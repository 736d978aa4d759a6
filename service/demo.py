"""The README's first command: export the default encoder if needed, build the Quora index (paper protocol)
if there is none, then serve. Export and build run as child processes (`encoder export`, `indexer build`):
torch never enters the API process, and `service` never imports the build pipeline.

Unless `--no-train`, the demo also adapts the encoder to Quora in the background while it serves (`BackgroundTraining`:
`encoder adapt`, then `indexer build --target-recall` with the adapted encoder, both child processes at the
lowest CPU priority). The running API swaps to the new version only if its swap gates pass (MRR@10 on the same
evaluation set included); `/ready`, the log and the page show each stage's progress and the whole chain's ETA
meanwhile (`service.training_status`). The children
log in the API's format (`STRATA_LOG_FORMAT`, set by its logging)."""

from __future__ import annotations

import functools
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from indexer.runtime.layout import IndexRoot
from indexer.runtime.paths import DEFAULT_POOLING, default_model_dir, default_quora_source, strata_home
from indexer.runtime.progress import FILE_ENV, log_interval
from service.settings import Settings
from service.training_status import ChainMonitor, ChainSizes, ChainState, Rates

log = logging.getLogger(__name__)


class DemoError(RuntimeError):
    pass


GATE_ROWS = 20_000  # `encoder export`'s default


def ensure_model(model_dir: Path, rows: int | None = None) -> None:
    if (model_dir / "encoder.json").is_file():
        log.info("using exported encoder %s", model_dir)
        return
    # static int8 when the shared data is there to calibrate and gate it (refused unless its vectors do not depend
    # on the batch and it stays within the quality gate of fp32; a few minutes on 2 cores), else fp32 with a
    # notice; see docs/cli.md#encoder-export-int8.
    log.info("exporting the default encoder (all-MiniLM-L6-v2, pooling %s, static int8 where it can be "
             "calibrated and gated) to %s", DEFAULT_POOLING, model_dir)
    cmd = [sys.executable, "-m", "models.cli", "export", "--out", str(model_dir), "--pooling", DEFAULT_POOLING,
           "--quantize", "auto"]
    if rows:  # a small demo gates int8 on as many Quora rows as it indexes (the full gate: 20,000 rows, minutes)
        cmd += ["--gate-rows", str(min(rows, GATE_ROWS))]
    if subprocess.run(cmd, check=False).returncode != 0:
        raise DemoError("`encoder export` failed (its error is above; is the train extra installed? "
                        "pip install -e '.[train]')")


PUBLISH_POLL_S = 0.2  # how often the demo looks whether the build published (a readlink)


def prepare(settings: Settings, *, rows: int | None = None, rebuild: bool = False) -> subprocess.Popen[bytes] | None:
    """Export if needed, build if needed; returns once there is a version to serve. A build publishes its version
    as soon as its gates pass, then runs its report's evaluations (`indexer.report`): that child is returned still
    running, at the lowest CPU priority (serving comes first), for the caller to `finish_report` when it stops."""
    model_dir = settings.model_dir or default_model_dir()
    ensure_model(model_dir, rows)
    root = IndexRoot(settings.index_root)
    if root.current_version() is not None and not rebuild:
        log.info("serving existing index %s/%s (pass --rebuild to build a new one)", root.root,
                 root.current_version())
        return None
    log.info("building the Quora index (paper protocol) in %s", root.root)
    # no --threads: the build may use every core; serving threads are set apart
    cmd = [sys.executable, "-m", "indexer.cli", "build", "--root", str(root.root), "--model", str(model_dir),
           "--data", default_quora_source(), *(["--rows", str(rows)] if rows else [])]
    before = root.current_version()
    build = subprocess.Popen(cmd)
    while build.poll() is None and root.current_version() == before:
        try:
            build.wait(timeout=PUBLISH_POLL_S)
        except subprocess.TimeoutExpired:
            pass
    if build.poll() is not None:
        if build.returncode != 0 and root.current_version() == before:
            raise DemoError("`indexer build` failed (see its error above)")
        return None  # built and reported (or published, then its report failed: it said why)
    log.info("published %s: serving it while the build's report evaluations run in the background (figures in "
             "/ready and /stats when done)", root.current_version())
    lower_priority(build.pid)
    return build


def lower_priority(pid: int) -> None:
    """Every thread of process `pid` to the lowest CPU priority (Linux's niceness is per thread: the ONNX Runtime
    and FAISS threads already running keep theirs unless each is reniced). Best effort."""
    tasks = Path(f"/proc/{pid}/task")
    tids = [int(t.name) for t in tasks.iterdir()] if tasks.is_dir() else [pid]
    for tid in tids:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, 19)
        except OSError:  # the thread ended meanwhile, or no /proc
            pass


def finish_report(build: subprocess.Popen[bytes] | None, timeout: float = 30.0) -> None:
    """The demo stops: end a report still running (its manifest says `failed: interrupted`; the version stays
    served; `indexer eval --root R` measures it again)."""
    if build is None or build.poll() is not None:
        return
    build.send_signal(signal.SIGINT)
    try:
        build.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        build.kill()
        build.wait()


EXAMPLE_QUERY = {"query": "How do I learn Python quickly?", "top_k": 5}


def curl_example(settings: Settings) -> str:
    """A search as a shell command: the body is JSON, single-quoted (`shlex.quote`) so it pastes as it is."""
    url = f"http://{settings.host}:{settings.port}"
    body = shlex.quote(json.dumps(EXAMPLE_QUERY))
    return f"curl -s {url}/search -H 'Content-Type: application/json' -d {body}"


def banner(settings: Settings) -> str:
    """What `python -m service` prints on stdout before it serves: plain text, never inside a log line (not printed
    when STRATA_LOG_FORMAT is `json` by name: the 'serving on' log record carries the curl line instead)."""
    url = f"http://{settings.host}:{settings.port}"
    return (f"\nStrata is serving on {url}  (search page: {url}/, OpenAPI docs: {url}/docs)\n"
            f"Try:\n  {curl_example(settings)}\n")


ADAPTED_MODEL_NAME = "all-MiniLM-L6-v2-adapted-mean"
ADAPT_STEPS, ADAPT_BATCH_SIZE = 500, 64  # `encoder adapt`'s defaults (for the ETA; `service` cannot import models)
# a trained encoder needs more IVF lists than the stock one (docs/cli.md#indexer-build-calibration)
TRAINED_TARGET_RECALL = 0.95


@dataclass
class TrainingPlan:
    root: Path  # the index root the API serves
    out: Path  # the adapted encoder (`encoder adapt --out`)
    work: Path  # its work folder, kept between runs: a stopped demo continues where it was
    data: str  # the Quora TSV, or its URL (`encoder adapt` reads the copy the index build downloaded)
    rows: int | None = None  # the demo's --rows: the adapted index holds as many
    checkpoint: Path | None = None  # what to adapt (default: all-MiniLM-L6-v2)
    steps: int | None = None  # `encoder adapt`'s defaults unless set (tests set small ones)
    batch_size: int | None = None
    threads: int | None = None
    quantize: str | None = None  # `encoder adapt --quantize` (default auto: int8 where it can be gated)
    target_recall: float = TRAINED_TARGET_RECALL
    # added to the children's CPU niceness (os.nice, capped at 19): 19, so that serving keeps the cores it needs. A
    # nice-19 process weighs 15 against a normal one's 1024: beside other normal-priority work it gets ~1 % of a core
    nice: int = 19

    @property
    def status_file(self) -> Path:
        """`encoder adapt`'s own status."""
        return self.work / "status.json"

    @property
    def chain_file(self) -> Path:
        """The whole chain's status (`service.training_status`): what `/ready` shows under `training`."""
        return self.work / "chain.json"

    @property
    def progress_file(self) -> Path:
        """The running child's progress (`STRATA_PROGRESS_FILE`)."""
        return self.work / "progress.json"

    def sizes(self) -> ChainSizes:
        return ChainSizes(steps=self.steps or ADAPT_STEPS, batch_size=self.batch_size or ADAPT_BATCH_SIZE,
                          quantized=self.quantize != "none")

    def commands(self) -> list[list[str]]:
        adapt = [sys.executable, "-m", "models.cli", "adapt", "--out", str(self.out), "--work", str(self.work),
                 "--data", self.data, "--no-progress"]
        for flag, value in (("--checkpoint", self.checkpoint), ("--steps", self.steps),
                            ("--batch-size", self.batch_size), ("--threads", self.threads),
                            ("--quantize", self.quantize)):
            if value is not None:
                adapt += [flag, str(value)]
        build = [sys.executable, "-m", "indexer.cli", "build", "--root", str(self.root), "--model", str(self.out),
                 "--data", self.data, "--target-recall", str(self.target_recall),
                 *(["--rows", str(self.rows)] if self.rows else []),
                 *(["--threads", str(self.threads)] if self.threads else [])]
        return [adapt, build]


def training_plan(settings: Settings, rows: int | None = None) -> TrainingPlan:
    out = strata_home() / "models" / ADAPTED_MODEL_NAME
    return TrainingPlan(root=settings.index_root, out=out, work=out.with_name(out.name + ".work"),
                        data=default_quora_source(), rows=rows)


class BackgroundTraining:
    """`encoder adapt` then `indexer build` with its encoder, one after the other in child processes, from a
    thread of the serving process. `stop()` ends the running child with SIGTERM: the adaptation keeps its
    finished stages and last training checkpoint for the next run, a build removes its staging folder."""

    def __init__(self, plan: TrainingPlan) -> None:
        self.plan = plan
        self._proc: subprocess.Popen[bytes] | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()  # a child is started, or `stop` runs, never both at once
        self._thread = threading.Thread(target=self._run, name="background-training", daemon=True)
        self.returncode: int | None = None

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        plan = self.plan
        plan.work.mkdir(parents=True, exist_ok=True)
        plan.progress_file.unlink(missing_ok=True)
        monitor = ChainMonitor(plan.chain_file, plan.status_file, plan.progress_file,
                               ChainState(plan.sizes(), Rates.from_served(plan.root)),
                               log_every=max(60.0, 2 * log_interval()))
        env = {**os.environ, FILE_ENV: str(plan.progress_file)}  # and STRATA_LOG_FORMAT, set by the API's logging
        adapt, build = plan.commands()
        log.info("background training: adapting the encoder to Quora, then indexing with it (status in /ready and "
                 "%s)", plan.chain_file)
        for name, cmd in (("adapt", adapt), ("index", build)):
            stage = None if name == "adapt" else "index"
            monitor.tick(stage, f"indexing with {plan.out} (nprobe for ANN recall@10 >= {plan.target_recall})")
            with self._lock:
                if self._stopping.is_set():
                    break
                self._proc = subprocess.Popen(cmd, env=env,  # noqa: PLW1509 (os.nice only, before exec)
                                              preexec_fn=functools.partial(os.nice, plan.nice))
            rc = self._wait(self._proc, monitor, stage)
            if self._stopping.is_set():
                break
            if rc != 0:
                self.returncode = rc
                monitor.finish(stage="failed", message=f"{name} exited with {rc} (see the log above); the served "
                                                       f"index is unchanged")
                log.error("background training: %s exited with %d; the served index is unchanged", name, rc)
                return
        if self._stopping.is_set():
            adapt_status = monitor.tick() if self.plan.status_file.is_file() else {}
            monitor.finish(stage="failed", message=f"stopped: {adapt_status.get('message', '')}".rstrip(": "))
            return
        self.returncode = 0
        current = IndexRoot(plan.root).current_version()
        monitor.state.built_version = current
        monitor.finish(stage="swap", message=f"built {current} with the adapted encoder; the API swaps to it if "
                                             f"its gates pass")
        log.info("background training: built %s with %s; the API swaps to it if its gates pass (see /ready)",
                 current, plan.out)

    def _wait(self, proc: subprocess.Popen[bytes], monitor: ChainMonitor, stage: str | None) -> int:
        while True:
            try:
                return proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                try:
                    monitor.tick(stage)
                except Exception:  # noqa: BLE001 (a status that cannot be written must not stop the chain)
                    log.exception("background training: cannot write %s", monitor.out)

    def stop(self, timeout: float = 30.0) -> None:
        with self._lock:
            self._stopping.set()
            proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._thread.join(timeout=timeout)

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)
