"""The service's one settings object, read from environment variables prefixed `STRATA_` (or a `.env` file).

Imports no FastAPI: the engine reads it too. `settings_error` turns a bad value into the one line a CLI prints."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from indexer.runtime.guards import DEFAULT_MAX_SHRINK
from indexer.runtime.paths import default_index_root


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="STRATA_", env_file=".env", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    index_root: Path = Field(default_factory=default_index_root,
                             description="index root with versions/ and current")
    collections_dir: Path | None = Field(None, description="serve every index root under this folder as a "
                                         "collection named after its subfolder (instead of STRATA_INDEX_ROOT)")
    default_collection: str | None = Field(None, description="the collection the routes without /collections/NAME "
                                           "serve (default: `default`, or the only collection)")
    model_dir: Path | None = Field(None, description="exported encoder; default: the one the index was built with")
    nprobe: int | None = Field(None, ge=1, description="override an IVF index's nprobe (other kinds ignore it)")
    ef_search: int | None = Field(None, ge=1, description="override an HNSW index's ef_search (other kinds ignore it)")
    log_level: str = "info"
    log_format: Literal["json", "text", "auto"] = Field("auto", description="auto: readable text lines when stderr "
                                                        "is a terminal, one JSON object a line otherwise")
    access_log: Literal["requests", "summary", "auto"] = Field(
        "auto", description="requests: one line per request; summary: one line per 10 s that saw requests (counts, "
        "p50); auto: summary when the log is text (a terminal), one line per request otherwise")

    # CPU: `workers` inference threads, each running ONNX Runtime and FAISS with `threads` threads, so that
    # concurrent requests use workers × threads cores instead of oversubscribing them.
    workers: int = Field(default_factory=_cores, ge=1, description="inference thread pool size (default: cores)")
    threads: int = Field(1, ge=1, description="ONNX Runtime intra-op and FAISS OpenMP threads per call")

    # Micro-batching: concurrent requests share one ONNX run (see service/engine/batching.py)
    micro_batching: bool = Field(True, description="encode concurrent requests together")
    batch_window_ms: float = Field(0.0, ge=0, le=100, description="under load, wait this long for more requests "
                                   "(0: batches form from what queued while the workers were busy)")
    batch_max_texts: int = Field(64, ge=1, le=1024, description="texts per micro-batch")
    batch_max_tokens: int = Field(2048, ge=0, description="tokens per micro-batch (like TEI's max-batch-tokens): "
                                  "long texts go to their own batches instead of holding short queries back; "
                                  "a request over the budget still runs, alone; 0 = no token bound")

    # Writes' texts are encoded on a lane of their own, behind searches (see service/engine/write_lane.py)
    write_threads: int | None = Field(None, ge=1, description="threads encoding writes' texts (default: half the "
                                      "workers, at least 1: the other half of the cores is never taken by writes)")
    write_nice: int = Field(10, ge=0, le=19, description="how many nice levels below the searches' the write "
                            "threads run (Linux): searches get the cores first, writes still progress; 0 = equal")
    write_chunk_texts: int = Field(16, ge=1, le=1024, description="texts per ONNX run of a write")

    # Behaviour under load
    max_in_flight: int = Field(32, ge=1, description="inference requests running or queued; beyond: 429")
    retry_after_s: int = Field(1, ge=0, description="Retry-After of a 429")
    request_timeout_s: float = Field(30.0, gt=0, description="an inference call taking longer answers 504")
    max_body_bytes: int = Field(2 * 1024 * 1024, ge=1024, description="larger request bodies answer 413")
    shutdown_timeout_s: float = Field(30.0, ge=0, description="grace for in-flight requests on SIGTERM")
    cors_origins: list[str] = Field(default_factory=list, description='e.g. ["https://app.example"]; "*" = any')

    # Auth: no keys configured = open API. Keys: STRATA_API_KEYS="key1:admin,key2" and/or a file of
    # `KEY [scope,...]` lines. Every key may call the API; `/admin/*` needs the `admin` scope.
    api_keys: str | None = Field(None, repr=False)
    api_keys_file: Path | None = None
    public_paths: list[str] = Field(default_factory=lambda: ["/health", "/ready", "/metrics", "/stats"],
                                    description="paths answered without a key")

    # Index swaps
    watch_interval_s: float = Field(2.0, ge=0, description="poll `current` this often; 0 = off (SIGHUP, "
                                    "POST /admin/reload still work)")
    max_mrr_drop: float = Field(0.02, ge=0, description="refuse a newer version whose MRR@10 (same eval set) "
                                "is lower than the served one's by more than this")
    max_shrink: float = Field(DEFAULT_MAX_SHRINK, ge=0, le=1, description="refuse to swap by itself (watcher, "
                              "SIGHUP, POST /admin/reload without force) to a newer version holding fewer than "
                              "(1 - this) of the served documents, both counted after the write log is replayed")

    # OpenAI-compatible routes (/v1/embeddings, /v1/models): the name clients send as `model`
    model_name: str | None = Field(None, description="the served encoder's name in /v1 (default: its folder's "
                                   "name, e.g. all-MiniLM-L6-v2-layers-0-6)")
    model_aliases: list[str] = Field(default_factory=list, description='other names /v1/embeddings accepts as '
                                     '`model`, e.g. ["text-embedding-3-small"]; ["*"] accepts any name')

    # Tracing (OpenTelemetry, OTLP over HTTP): off unless an endpoint is set
    otlp_endpoint: str | None = Field(None, description="OTLP/HTTP collector, e.g. http://localhost:4318 "
                                      "(/v1/traces is appended unless given); unset: no tracing")

    # Engine backend: "local" searches the index in this process; "sharded" (`python -m service sharded`) serves
    # the shards of a `--shards N` version as Ray Serve deployments. The same API, keys, limits and swaps.
    engine: Literal["local", "sharded"] = Field("local", description="engine backend: local or sharded (Ray)")
    ray_address: str | None = Field(None, description="sharded: Ray cluster to join (default: $RAY_ADDRESS, "
                                    "else a local Ray instance)")
    shard_replicas: int = Field(1, ge=1, description="sharded: replicas of each shard deployment")

    # A background `encoder adapt` (`python -m service demo --train`): its status.json, shown in /ready
    training_status: Path | None = Field(None, description="status.json of a background in-domain training "
                                         "(set by `demo --train`); its stage, step and ETA appear in /ready")

    def access_log_mode(self) -> Literal["requests", "summary"]:
        if self.access_log != "auto":
            return self.access_log
        from indexer.runtime.logs import resolve_format

        try:
            return "summary" if resolve_format(self.log_format) == "text" else "requests"
        except ValueError:
            return "requests"


def settings_error(exc: ValidationError) -> str:
    """One line per bad setting, named as the operator sets it (`STRATA_MAX_SHRINK='abc': ...`)."""
    parts = []
    for err in exc.errors():
        name = "STRATA_" + "_".join(str(p) for p in err.get("loc", ())).upper()
        parts.append(f"{name}={err.get('input')!r}: {err.get('msg')}")
    return "; ".join(parts) or str(exc)
