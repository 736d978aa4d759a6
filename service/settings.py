"""The service's one settings object, read from environment variables prefixed `STRATA_` (or a `.env` file)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from indexer.paths import default_index_root


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="STRATA_", env_file=".env", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    index_root: Path = Field(default_factory=default_index_root,
                             description="index root with versions/ and current")
    model_dir: Path | None = Field(None, description="exported encoder; default: the one the index was built with")
    threads: int | None = Field(None, ge=1, description="ONNX Runtime and FAISS threads (default: all cores)")
    nprobe: int | None = Field(None, ge=1, description="override the index's nprobe")
    log_level: str = "info"
