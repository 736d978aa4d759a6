"""The engine's settings: what the engine reads (where the indexes are, the search parameters, the CPU, the batching,
the load limits, the swap gates, the `/v1` names, tracing's endpoint, the backend), from environment variables
prefixed `STRATA_` (or a `.env` file). The HTTP edge's settings (`service.settings.Settings`) extend these with
its own (host, port, logs, keys, CORS, the body cap).

May import: pydantic, pydantic-settings, `indexer.runtime`, the standard library."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, create_model, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from indexer.runtime.ann import KIND_SPECS, KNOBS
from indexer.runtime.bounded_leg import HybridLexical
from indexer.runtime.collection_dirs import default_models_dir
from indexer.runtime.paths import default_index_root
from indexer.runtime.shrink_guard import DEFAULT_MAX_SHRINK


def cores() -> int:
    """The cores this process may run on (its CPU affinity), the default count of its worker threads."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _kinds_of(knob: str) -> str:
    return " and ".join(k for k, spec in KIND_SPECS.items() if spec.knob and spec.knob.name == knob)


# One override per index kind's search knob (`ann.KNOBS`: STRATA_NPROBE, STRATA_EF_SEARCH), generated from the kinds
_SearchParamSettings: type[BaseSettings] = create_model(  # type: ignore[call-overload]
    "_SearchParamSettings", __base__=BaseSettings,
    **{k.name: (int | None, Field(None, ge=1, description=f"override a {_kinds_of(k.name)} index's {k.name} "
                                  f"({k.what}; other kinds ignore it)")) for k in KNOBS})


class EngineSettings(_SearchParamSettings):  # type: ignore[misc,valid-type]
    model_config = SettingsConfigDict(env_prefix="STRATA_", env_file=".env", extra="ignore")

    index_root: Path = Field(default_factory=default_index_root,
                             description="index root with versions/ and current")
    collections_dir: Path | None = Field(None, description="serve every index root under this folder as a "
                                         "collection named after its subfolder (instead of STRATA_INDEX_ROOT)")
    default_collection: str | None = Field(None, description="the collection the routes without /collections/NAME "
                                           "serve (default, or set empty: `default`, or the only collection)")
    model_dir: Path | None = Field(None, description="exported encoder; default: the one the index was built with")
    models_dir: Path = Field(default_factory=default_models_dir, description="the exported encoders a collection "
                             "created over HTTP (POST /collections) may name, one folder each (default: "
                             "~/.strata/models)")
    mmap: bool = Field(True, description="open versions' vector index files memory-mapped (read through the page "
                       "cache, file-backed: a swap does not need a second copy in memory); false: read into memory")

    # CPU: `workers` inference threads, each running ONNX Runtime and FAISS with `threads` threads, so that
    # concurrent requests use workers × threads cores instead of oversubscribing them.
    workers: int = Field(default_factory=cores, ge=1, description="inference thread pool size (default: cores)")
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
    max_in_flight: int = Field(32, ge=1, description="searches and encodes running or queued; beyond: 429. "
                               "Writes never take these slots: they have their own share")
    max_write_in_flight: int | None = Field(None, ge=1, description="writes' share of admission: writes encoding "
                                            "texts at once, beyond: 429 for the write (default: a quarter of "
                                            "max_in_flight, at least 1); searches keep max_in_flight whatever "
                                            "writes do")
    retry_after_s: int = Field(1, ge=0, description="Retry-After of a 429")
    request_timeout_s: float = Field(30.0, gt=0, description="an inference call taking longer answers 504")

    # Index swaps
    watch_interval_s: float = Field(2.0, ge=0, description="poll `current` this often; 0 = off (SIGHUP, "
                                    "POST /admin/reload still work)")
    max_mrr_drop: float = Field(0.02, ge=0, description="refuse a newer version whose MRR@10 (same eval set) "
                                "is lower than the served one's by more than this")
    max_shrink: float = Field(DEFAULT_MAX_SHRINK, ge=0, le=1, description="refuse to swap by itself (watcher, "
                              "SIGHUP, POST /admin/reload without force) to a newer version holding fewer than "
                              "(1 - this) of the served documents, both counted after the write log is replayed")
    state_dir: Path | None = Field(None, description="where the API keeps each collection's serving record (what it "
                                   "served, what its gates refused: `NAME.serving.json`) when the index root is "
                                   "read-only; default: `serving.json` in the index root")

    # Compaction in the background (each collection's policy: its collection.json `compaction`)
    compact_interval_s: float = Field(5.0, ge=0, description="look at each collection's compaction policy this "
                                      "often; 0 = no background compaction (`indexer compact` by hand)")
    max_compactions: int = Field(1, ge=1, description="compactions running at once across the collections")
    compact_retry_s: float = Field(30.0, gt=0, description="after a failed or refused compaction, wait this long "
                                   "before the next try, doubled at each failure in a row")
    compact_retry_max_s: float = Field(1800.0, gt=0, description="the longest wait between two tries")

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
    shard_timeout_s: float = Field(10.0, gt=0, description="sharded: how long a search waits for each shard's answer; "
                                   "a shard that raises, is gone or does not answer in time is a 503 naming it")

    # Hybrid search's lexical leg (indexer/runtime/bounded_leg.py): bounded where the exact one is expensive
    hybrid_lexical: HybridLexical = Field("bounded", description="hybrid's BM25 leg: 'bounded' scores the "
                                          "documents holding the query's selective terms and the dense candidates "
                                          "where the exact top 100 would read over 1M postings (large collections, "
                                          "common terms); 'exact': always the exact BM25 top 100")

    def search_param_overrides(self) -> dict[str, int | None]:
        """The search parameters' overrides (`ann.KNOBS`), by knob name; None where not set."""
        return {k.name: getattr(self, k.name) for k in KNOBS}

    @field_validator("default_collection", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        """`STRATA_DEFAULT_COLLECTION=` (empty or blanks, as an env file or compose's `${VAR:-}` leaves it): unset."""
        return None if isinstance(value, str) and not value.strip() else value
