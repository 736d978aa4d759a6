"""Background priority: builds and compactions run below the API's CPU and IO priority, so that a build on the
machine that serves does not take the cores and the disk `/search` needs (docs/decisions.md
has what a build at the API's priority cost `/search`).

`STRATA_BUILD_PRIORITY` (read by `indexer build` and `indexer compact`, and inherited by their children: Ray's
local workers, the demo's and the nightly's builds):
- `low` (default): nice 19 (Linux: a nice-19 thread weighs 15 against a nice-0 thread's 1024 when both want a
  core) and the lowest best-effort IO priority (level 7): the build takes what the API leaves, and all of an idle
  machine;
- `idle`: the SCHED_IDLE policy and the idle IO class: it runs only on cores and a disk nobody else wants (a build
  on a machine that is never idle may then hardly progress);
- `normal`: unchanged (the opt-out, e.g. for a build machine that serves nothing).

On Linux, nice values, scheduling policies and IO priorities belong to threads: every thread of the process is
lowered (those that exist, and the ones created later inherit it). Raising them back would need privileges.
Elsewhere the nice value is set and the rest is skipped.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform
import threading
from collections.abc import Mapping
from dataclasses import dataclass

log = logging.getLogger(__name__)

PRIORITY_ENV = "STRATA_BUILD_PRIORITY"
MODES = ("low", "idle", "normal")
LOW_NICE = 19
IOPRIO_WHO_PROCESS = 1
IOPRIO_CLASS_BE, IOPRIO_CLASS_IDLE = 2, 3
_IOPRIO_SET = {"x86_64": 251, "aarch64": 30}.get(platform.machine())


@dataclass(frozen=True)
class Applied:
    mode: str
    nice: int
    policy: str  # "other" or "idle"
    io: str  # "best-effort 7", "idle", or "unchanged"

    def describe(self) -> str:
        return f"nice {self.nice}, scheduling {self.policy}, IO {self.io}"


def build_priority(env: Mapping[str, str] | None = None) -> str:
    """`STRATA_BUILD_PRIORITY` (default `low`); a bad value raises ValueError naming it."""
    raw = ((os.environ if env is None else env).get(PRIORITY_ENV) or "low").strip().lower()
    if raw not in MODES:
        raise ValueError(f"{PRIORITY_ENV}={raw!r}: expected one of {', '.join(MODES)} (default low)")
    return raw


def _threads() -> list[int]:
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return [0]


def _set_ioprio(tid: int, klass: int, level: int) -> bool:
    if _IOPRIO_SET is None:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.syscall(_IOPRIO_SET, IOPRIO_WHO_PROCESS, tid, (klass << 13) | level) == 0


def lower_priority(mode: str) -> Applied:
    """Lower every thread of this process to `mode` (see the module); returns what was applied."""
    if mode == "normal":
        return Applied(mode, os.getpriority(os.PRIO_PROCESS, 0), "other", "unchanged")
    io, policy = "unchanged", "other"
    for tid in _threads():
        try:
            os.setpriority(os.PRIO_PROCESS, tid, max(LOW_NICE, os.getpriority(os.PRIO_PROCESS, tid)))
            if mode == "idle" and hasattr(os, "SCHED_IDLE"):
                os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
                policy = "idle"
            klass, level = (IOPRIO_CLASS_IDLE, 0) if mode == "idle" else (IOPRIO_CLASS_BE, 7)
            if _set_ioprio(tid, klass, level):
                io = "idle" if mode == "idle" else "best-effort 7"
        except OSError as exc:  # a thread that just ended, or a platform without per-thread priorities
            log.debug("could not lower the priority of thread %d: %s", tid, exc)
    return Applied(mode, os.getpriority(os.PRIO_PROCESS, 0), policy, io)


def lower_thread(by: int) -> int | None:
    """Lower the calling thread's CPU priority by `by` nice levels (capped at 19; threads it starts inherit it); the
    new nice value, or None where threads have no priority of their own (not Linux) or the kernel refused."""
    if by <= 0 or not platform.system() == "Linux":  # elsewhere PRIO_PROCESS on a thread id is not per thread
        return None
    tid = threading.get_native_id()
    try:
        nice = min(LOW_NICE, os.getpriority(os.PRIO_PROCESS, tid) + by)
        os.setpriority(os.PRIO_PROCESS, tid, nice)
    except OSError as exc:
        log.warning("could not lower the priority of thread %d: %s", tid, exc)
        return None
    return nice
