"""The service's settings: the engine's (`service.engine.settings.EngineSettings`: indexes, search parameters, CPU,
batching, load limits, swaps, backend) and the HTTP edge's own (host, port, logs, keys, CORS, the body cap, the shutdown
grace), all read from environment variables prefixed `STRATA_` (or a `.env` file).

`settings_error` turns a bad value into the one line a CLI prints."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import SettingsError

from service.engine.settings import EngineSettings


class Settings(EngineSettings):
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    log_format: Literal["json", "text", "auto"] = Field("auto", description="auto: readable text lines when stderr "
                                                        "is a terminal, one JSON object a line otherwise")
    access_log: Literal["requests", "summary", "auto"] = Field(
        "auto", description="requests: one line per request; summary: one line per 10 s that saw requests (counts, "
        "p50); auto: summary when the log is text (a terminal), one line per request otherwise")

    max_body_bytes: int = Field(2 * 1024 * 1024, ge=1024, description="larger request bodies answer 413")
    max_snapshot_bytes: int = Field(64 * 2**30, ge=1024, description="a snapshot uploaded to restore "
                                    "(POST /collections/NAME/snapshots/upload) larger than this answers 413")
    shutdown_timeout_s: float = Field(30.0, ge=0, description="grace for in-flight requests on SIGTERM")
    cors_origins: list[str] = Field(default_factory=list, description='e.g. ["https://app.example"]; "*" = any')

    # Auth: no keys configured = open API. Keys: STRATA_API_KEYS="key1:admin,key2" and/or a file of
    # `KEY [scope,...]` lines. Every key may call the API; `/admin/*` needs the `admin` scope.
    api_keys: str | None = Field(None, repr=False)
    api_keys_file: Path | None = None
    public_paths: list[str] = Field(default_factory=lambda: ["/health", "/ready", "/metrics", "/stats"],
                                    description="paths answered without a key")

    # A background `encoder adapt` (`python -m service demo --train`): its status.json, shown in /ready
    training_status: Path | None = Field(None, description="status.json of a background in-domain training "
                                         "(set by `demo --train`); its stage, step and ETA appear in /ready")

    @field_validator("log_level", mode="before")
    @classmethod
    def _level_any_case(cls, value: object) -> object:
        """`INFO` as well as `info`: the names Python's logging and uvicorn both take."""
        return value.strip().lower() if isinstance(value, str) else value

    def access_log_mode(self) -> Literal["requests", "summary"]:
        if self.access_log != "auto":
            return self.access_log
        from indexer.runtime.logs import resolve_format

        try:
            return "summary" if resolve_format(self.log_format) == "text" else "requests"
        except ValueError:
            return "requests"


def settings_error(exc: ValidationError | SettingsError, flags: dict[str, str] | None = None) -> str:
    """One line per bad setting, named as the operator sets it (`STRATA_MAX_SHRINK='abc': ...`; `flags`: the fields
    a command-line flag set, by the flag's name: `--port=99999: ...`)."""
    if isinstance(exc, SettingsError):  # a list or dict setting whose value is not JSON: pydantic-settings names
        field = re.search(r'field "([a-z0-9_]+)"', str(exc))  # the field in its message only
        name = f"STRATA_{field.group(1).upper()}" if field else "a STRATA_ setting"
        return f"{name}: not valid JSON (a list is written '[\"a\", \"b\"]')"
    parts = []
    for err in exc.errors():
        field = "_".join(str(p) for p in err.get("loc", ()))
        name = (flags or {}).get(field) or "STRATA_" + field.upper()
        parts.append(f"{name}={err.get('input')!r}: {err.get('msg')}")
    return "; ".join(parts) or str(exc)
