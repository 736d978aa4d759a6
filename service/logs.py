"""Structured logs: one JSON object per line carrying the id of the request being served, or readable text lines
on a terminal (`STRATA_LOG_FORMAT`: json | text | auto; `indexer.runtime.logs` formats every Strata process)."""

from __future__ import annotations

import logging

from indexer.runtime.logs import JsonFormatter, LogFormat, request_id
from indexer.runtime.logs import configure as configure_root

__all__ = ["request_id", "configure"]


class RequestJsonFormatter(JsonFormatter):
    def context(self) -> dict[str, object]:
        rid = request_id.get()
        return {"request_id": rid} if rid else {}


class UvicornName(logging.Filter):
    """uvicorn logs its start-up and shutdown on a logger named `uvicorn.error`; they are not errors. Its
    "Uvicorn running on URL" is dropped: Strata's banner (or its "serving on" record) says it once."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "uvicorn.error":
            record.name = "uvicorn"
        return not (record.name == "uvicorn" and str(record.msg).startswith("Uvicorn running on"))


def configure(fmt: str, level: str) -> LogFormat:
    """Root handler for everything (uvicorn's loggers included, run with log_config=None); returns the format."""
    resolved = configure_root(fmt, level, quiet=("httpx", "faiss.loader", "uvicorn.access"),
                              json_formatter=RequestJsonFormatter())
    for handler in logging.getLogger().handlers:
        handler.addFilter(UvicornName())
    return resolved
