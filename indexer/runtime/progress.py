"""Progress of a long job: a tqdm bar on a terminal (text logs), log lines with rate and ETA everywhere else.

A bar redrawn with carriage returns is one multi-thousand-character line once stderr is a file or a pipe (a
container's log, `python -m service demo > demo.log`); there, `Progress` logs one line every
`STRATA_PROGRESS_INTERVAL_S` seconds (default 30) and one at the end:

    mine: encoding: 41,216/220,492 texts (18.7%), 182 texts/s, ETA 16m 24s

`on_update(done, total, eta_s)` is called at the same interval (and at the end) in both cases, so a job can put
its progress in a status file (`encoder adapt`'s status.json, shown in the API's `/ready`). With
`STRATA_PROGRESS_FILE` set, each job's progress is written there instead of logged (JSON, atomically, at most
every 2 s and at its end; the latest `KEPT_JOBS` jobs, oldest first): how a parent process (the demo's background
chain) follows the progress of the CLIs it starts and prints one line for them (`service.training_status`).

`Working` is the same for a step without counts (an ONNX export, an int8 calibration, an IVF index's training):
its name at the start, the elapsed time in place on a terminal or a line every 10 s elsewhere, and its time at
the end, so no step is silent.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from indexer.runtime.logs import is_terminal, resolve_format

log = logging.getLogger(__name__)

INTERVAL_ENV = "STRATA_PROGRESS_INTERVAL_S"
FILE_ENV = "STRATA_PROGRESS_FILE"
FILE_INTERVAL_S = 2.0
KEPT_JOBS = 20
OnUpdate = Callable[[int, int, float | None], None]


def log_interval() -> float:
    try:
        return max(0.0, float(os.environ.get(INTERVAL_ENV, "30")))
    except ValueError:
        return 30.0


def format_duration(seconds: float) -> str:
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {s % 3600 // 60:02d}m"


def read_jobs(path: Path) -> list[dict[str, Any]]:
    """The jobs of a progress file, oldest first ([] when there is none or it cannot be read)."""
    import json

    try:
        jobs = json.loads(path.read_text()).get("jobs", [])
    except (OSError, ValueError, AttributeError):
        return []
    return [j for j in jobs if isinstance(j, dict)] if isinstance(jobs, list) else []


def _bars() -> bool:
    """Bars on a terminal that shows text logs (JSON forced on a terminal means a program reads it)."""
    try:
        return is_terminal() and resolve_format() == "text"
    except ValueError:
        return False


class Progress:
    """tqdm's `update`/`set_postfix`/`close` (and a context manager), as a bar or as log lines."""

    def __init__(self, total: int, desc: str, *, unit: str = "it", initial: int = 0, bar: bool = True,
                 logger: logging.Logger | None = None, on_update: OnUpdate | None = None,
                 interval: float | None = None, unit_scale: bool = False) -> None:
        self.total, self.desc, self.unit, self.n = total, desc, unit, initial
        self.logger = logger or log
        self.on_update = on_update
        self.interval = log_interval() if interval is None else interval
        self.postfix = ""
        self._start_n, self._t0 = initial, time.monotonic()
        self._last = self._last_file = self._t0
        self._file = os.environ.get(FILE_ENV) or None
        self._started_at = time.time()
        self._closed = False
        self._bar: Any = None
        if bar and _bars():
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, mininterval=1.0,
                             dynamic_ncols=True, unit_scale=unit_scale, disable=False)

    def rate(self) -> float | None:
        elapsed = time.monotonic() - self._t0
        done = self.n - self._start_n
        return done / elapsed if elapsed > 0 and done > 0 else None

    def eta_s(self) -> float | None:
        rate = self.rate()
        return max(0.0, (self.total - self.n) / rate) if rate else None

    def line(self) -> str:
        pct = f" ({100 * self.n / self.total:.1f}%)" if self.total else ""
        rate, eta = self.rate(), self.eta_s()
        speed = f", {rate:,.1f} {self.unit}/s" if rate else ""
        left = f", ETA {format_duration(eta)}" if eta is not None and self.n < self.total else ""
        took = f", took {format_duration(time.monotonic() - self._t0)}" if self.n >= self.total else ""
        post = f" [{self.postfix}]" if self.postfix else ""
        return f"{self.desc}: {self.n:,}/{self.total:,} {self.unit}{pct}{speed}{left}{took}{post}"

    def update(self, n: int = 1) -> None:
        self.n += n
        if self._bar is not None:
            self._bar.update(n)
        now = time.monotonic()
        if now - self._last >= self.interval:
            self._last = now
            self._report()
        if self._file and now - self._last_file >= FILE_INTERVAL_S:
            self._write_file()

    def _write_file(self) -> None:
        from indexer.runtime.atomic import write_json_atomic

        self._last_file = time.monotonic()
        path = Path(self._file)  # type: ignore[arg-type]
        job = {"desc": self.desc, "n": self.n, "total": self.total, "unit": self.unit, "rate": self.rate(),
               "eta_s": self.eta_s(), "started_at": self._started_at, "updated_at": time.time()}
        try:
            jobs = read_jobs(path)
            jobs = [j for j in jobs if (j.get("desc"), j.get("started_at")) != (self.desc, self._started_at)]
            write_json_atomic(path, {"jobs": [*jobs, job][-KEPT_JOBS:]})
        except OSError as exc:  # progress reporting must never stop the job
            self.logger.debug("cannot write %s: %s", self._file, exc)

    def set_postfix(self, refresh: bool = True, **values: object) -> None:
        self.postfix = ", ".join(f"{k}={v}" for k, v in values.items())
        if self._bar is not None:
            self._bar.set_postfix(refresh=refresh, **values)

    def _report(self) -> None:
        # under a parent that follows this job through the progress file (the demo's chain), the parent prints
        # the one line per stage: this job's own would repeat it
        if self._bar is None and not self._file:
            self.logger.info("%s", self.line())
        if self.on_update is not None:
            self.on_update(self.n, self.total, self.eta_s())

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
        self._report()
        if self._file:
            self._write_file()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
        elif self._bar is not None:
            self._bar.close()


HEARTBEAT_TTY_S = 1.0


class Working:
    """A step without counts (an ONNX export, a calibration, an index's training): `desc` when it starts, then —
    so it is never silent — its elapsed time updated in place every second on a terminal, or a log line every
    `interval` seconds elsewhere (default `STRATA_PROGRESS_INTERVAL_S`, at most 10 s), and `desc: done in Ns` at
    its end."""

    def __init__(self, desc: str, *, logger: logging.Logger | None = None, interval: float | None = None) -> None:
        import threading

        self.desc, self.logger = desc, logger or log
        self.interval = min(10.0, log_interval()) if interval is None else interval
        self._tty = _bars()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="progress-heartbeat", daemon=True)
        self._t0 = time.monotonic()
        self.elapsed = 0.0

    def _beat(self) -> None:
        import sys

        every = HEARTBEAT_TTY_S if self._tty else self.interval
        if os.environ.get(FILE_ENV) and not self._tty:
            return  # a parent follows this process (the demo's chain) and prints the periodic line itself
        while every > 0 and not self._stop.wait(every):
            took = format_duration(time.monotonic() - self._t0)
            if self._tty:
                sys.stderr.write(f"\r{self.desc}… {took}\x1b[K")
                sys.stderr.flush()
            else:
                self.logger.info("%s… %s so far", self.desc, took)

    def __enter__(self) -> Working:
        self.logger.info("%s", self.desc)
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        import sys

        self._stop.set()
        self._thread.join()
        self.elapsed = time.monotonic() - self._t0
        if self._tty:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
        if exc_type is None:
            self.logger.info("%s: done in %s", self.desc, format_duration(self.elapsed))
