"""Log lines for people or for machines, the same in every Strata process (the API and the CLIs it starts).

`STRATA_LOG_FORMAT`: `text` (one readable line: `14:02:11 INFO indexer.build: message`), `json` (one JSON object a
line, for log shippers), or `auto` (the default): text when stderr is a terminal, JSON otherwise. A parent that
starts Strata CLIs passes its resolved format down in `STRATA_LOG_FORMAT` (`child_env`), so one log has one
format. Hugging Face's progress bars are off, and off a terminal tqdm's by default: Strata's own long jobs show a
bar on a terminal and log their progress as lines elsewhere (`indexer.runtime.progress`).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterable
from contextvars import ContextVar
from datetime import datetime, timezone
from typing import Literal

FORMAT_ENV = "STRATA_LOG_FORMAT"
LogFormat = Literal["json", "text"]
FORMATS = ("json", "text", "auto")

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "color_message"}
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# The id of the request being served (the API sets it per request; its JSON log lines and trace spans carry it).
request_id: ContextVar[str | None] = ContextVar("request_id", default=None)


def is_terminal(stream: object = None) -> bool:
    stream = stream or sys.stderr
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def resolve_format(fmt: str | None = None) -> LogFormat:
    """`fmt` (else `$STRATA_LOG_FORMAT`, else auto) as json or text; auto: text on a terminal, else JSON."""
    fmt = (fmt or os.environ.get(FORMAT_ENV) or "auto").strip().lower()
    if fmt not in FORMATS:
        raise ValueError(f"{FORMAT_ENV} must be one of {', '.join(FORMATS)} (got {fmt!r})")
    if fmt == "auto":
        return "text" if is_terminal() else "json"
    return fmt  # type: ignore[return-value]


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ts, level, logger, msg, the record's extra fields, `exc` for a traceback."""

    def context(self) -> dict[str, object]:
        """Fields of the moment (the service adds the request id)."""
        return {}

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out |= self.context()
        out |= {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def text_formatter() -> logging.Formatter:
    return logging.Formatter(TEXT_FORMAT, "%H:%M:%S")


def configure(fmt: str | None, level: str | int, *, quiet: Iterable[str] = (),
              json_formatter: JsonFormatter | None = None) -> LogFormat:
    """One stderr handler on the root logger in the resolved format; `quiet` loggers log warnings only. Returns
    the format, which is also put in `$STRATA_LOG_FORMAT` for the child processes this one starts."""
    resolved = resolve_format(fmt)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter((json_formatter or JsonFormatter()) if resolved == "json" else text_formatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper() if isinstance(level, str) else level)
    for name in quiet:
        logging.getLogger(name).setLevel(logging.WARNING)
    os.environ[FORMAT_ENV] = resolved
    # read when those libraries are imported. Hugging Face's bars ("Writing model shards: 1/1") say nothing worth
    # a line anywhere; off a terminal, any bar redrawn with \r makes a multi-thousand-character line in a file.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if not is_terminal():
        os.environ.setdefault("TQDM_DISABLE", "1")
    return resolved


def child_env(fmt: LogFormat) -> dict[str, str]:
    """The environment for a Strata CLI started by this process: the same log format."""
    return {**os.environ, FORMAT_ENV: fmt}


def one_line(exc: BaseException) -> str:
    """The error as one line: a pydantic ValidationError's fields and reasons (its own text spans several lines and
    ends in a documentation link), anything else as it reads."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ())) or 'value'}: {e.get('msg')}"
                         f" (got {_brief(e.get('input'))})" for e in exc.errors())
    return str(exc)


def _brief(value: object, limit: int = 80) -> str:
    """A value's repr, cut: a whole file's text is the input of a JSON error."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}…"
