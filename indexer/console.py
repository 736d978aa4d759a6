"""Shared CLI plumbing: logging set-up and turning known errors into one clear line instead of a traceback."""

from __future__ import annotations

import atexit
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable

from indexer.runtime.logs import configure, one_line, resolve_format


class Terminated(BaseException):
    """SIGTERM (`docker stop`, `kill`), raised in the main thread so that context managers unwind: a build removes
    its staging folder and releases its lock, an export removes its temporary folder."""


def _raise_terminated(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not interrupt the clean-up
    raise Terminated(signum)


LEVELS = ("critical", "error", "warning", "info", "debug")  # STRATA_LOG_LEVEL's, as the API takes them


def configure_logging(verbose: bool = False) -> None:
    """Text on a terminal, JSON lines otherwise, or as `STRATA_LOG_FORMAT` says (the demo passes its own down); at
    `STRATA_LOG_LEVEL` (info), debug with `-v`."""
    try:
        fmt = resolve_format()
    except ValueError as exc:  # a bad STRATA_LOG_FORMAT: say so once, and log readably anyway
        print(f"warning: {exc}; using auto", file=sys.stderr)
        fmt = resolve_format("auto")
    level = os.environ.get("STRATA_LOG_LEVEL", "info").strip().lower()
    if level not in LEVELS:  # as a bad format: said once, and the default used
        print(f"warning: STRATA_LOG_LEVEL must be one of {', '.join(LEVELS)} (got {level!r}); using info",
              file=sys.stderr)
        level = "info"
    # The ONNX exporter's optimiser logs every rewrite at INFO; keep our own INFO lines readable.
    configure(fmt, logging.DEBUG if verbose else level.upper(),
              quiet=("onnxscript", "onnx_ir", "torch.onnx", "httpx", "faiss.loader"))


def _exit_now(code: int) -> None:
    """Exit once the clean-up has unwound, without waiting for the work still in flight on pool threads.

    A normal exit joins every executor thread, so it waits for the batch each is encoding: discarded work, and at
    a build's nice 19 beside busy cores a batch can outlast `docker compose stop`'s grace period, which then kills
    (137). The atexit functions still run (a local Ray started by the command is shut down, logs flushed)."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: nothing left to say
            pass
    os._exit(code)


def run_cli(func: Callable[[], int], known: tuple[type[BaseException], ...], prog: str) -> int:
    """Run `func`; an expected error becomes `prog: error: message` and exit code 2; SIGTERM cleans up and exits
    143 (128 + 15), Ctrl-C 130."""
    main = threading.current_thread() is threading.main_thread()  # signal handlers live in the main thread only
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if main else None
    try:
        return func()
    except known as exc:
        print(f"{prog}: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print(f"{prog}: terminated (SIGTERM)", file=sys.stderr)
        if main:
            _exit_now(128 + signal.SIGTERM)
        return 128 + signal.SIGTERM
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
