"""The serving engine: one front door per collection (`Collection.search`, `encode`, `reload`, `status`).

Owns, one module each:
- `collection`: one collection's front door (its leases, swapper, writes, model names, metrics series) and its reload
  triggers (the `current` watcher, SIGHUP);
- `scheduler`: what every collection of the process shares: admission (the in-flight cap), the timeout, the worker
  pool, one micro-batcher per encoder (several collections' requests in one ONNX run), the write lane;
- `registry`: the collections served (`STRATA_COLLECTIONS_DIR` or one root), their discovery and the default;
- `encoders`: each encoder loaded once per process, whichever collections and versions pair with it;
- `model_catalog`: the ids `/v1` serves each distinct encoder under, and which collection answers a `model`;
- `errors`: what the engine refuses (`NotReady`, `Overloaded`, `TimedOut`, `SwapRefused`, `Mismatch`,
  `BadFilter`, `BadSearchParams`, `ModeUnavailable`; and the write path's `WriteRefused`, `WritesUnsupported`,
  `WritesUnavailable`, `NotServing`, re-exported from `indexer.runtime.writes`, and the disk's `StorageFull`,
  `StorageUnavailable` from `indexer.runtime.storage`);
- `batching`: micro-batching of concurrent calls into one ONNX run;
- `leases`: leases on the served searcher, so a swap never changes a batch's version under it;
- `swap`: swapping to a new version, behind its gates (loads, matches its encoder, answers a probe, MRR@10);
- `model_names`: the stable names the OpenAI-compatible routes serve one collection's encoder under, across swaps;
- `searcher`: an encoder paired with an index version, running one micro-batch through its stages, each over a
  module of its own: `batch` (the batch the stages fill in, the results, where the time went), `refusals` (what is
  refused before anything is encoded), `encoding` (the ONNX run, brought vectors), `retrieval` (the vector and
  lexical searches, fusion, and a version of passages' top_k documents), `lexical_thread` (the lexical searches'
  thread);
- `write_lane`: where writes' texts are encoded: threads of their own, at a lower CPU priority, in small chunks,
  so that searches keep their latency under a stream of writes. What happens to a write after its encoding — the
  log, the overlay on the served version, the replay onto every version opened and the switch — is the runtime's
  (`indexer.runtime.writes`, `indexer.runtime.overlay`), beside the write log and `indexer compact`'s fold;
- `compactor`: one collection's compaction by itself (its `collection.json` policy measured against what the served
  version does not hold, `indexer compact` as a child process below the API's priority, the swap, backoff after a
  failure; at most `max_compactions` at once, the scheduler's semaphore);
- `snapshots`: one collection's snapshots (made of the served version, one at a time, below the API's priority;
  listed, found, deleted: `indexer.runtime.snapshot`);
- `triggers`: the background tasks (watchers, a SIGHUP's reload) and the SIGHUP handler of a collection or of all of
  them, stopped in one place;
- `backends`: the `Backend` protocol, the local backend (the index searched in this process) and the factory that
  picks the backend the settings name;
- `sharded`: the Ray-sharded backend (shards as Ray Serve deployments, searched from this process).

- `settings`: what the engine reads of the `STRATA_*` variables (`EngineSettings`; the HTTP edge's `Settings`
  extends it);
- `metrics`: the Prometheus families, in a registry the app owns; `tracing`: OpenTelemetry spans of the engine's
  steps (and the request spans the HTTP edge starts with it).

May import: `indexer.runtime`, numpy, pydantic(-settings), prometheus-client, OpenTelemetry (when tracing is on),
the standard library, and Ray (in `sharded` only, which is imported only for that backend). Nothing else of
`service` (an allow-list contract in pyproject.toml): the HTTP layer maps this package's errors to status codes
(`service.errors`). Never fastapi or starlette, torch, `models`, or the build pipeline.
"""

from indexer.runtime.writes import Document, WriteResult
from service.engine.collection import Collection, Hits, ServedModel, Status, Vectors
from service.engine.errors import (
    BadConfig,
    BadFilter,
    BadSearchParams,
    BadVector,
    EngineError,
    Mismatch,
    ModeUnavailable,
    NotReady,
    NotServing,
    Overloaded,
    SnapshotConflict,
    SnapshotError,
    SnapshotNotFound,
    StorageFull,
    StorageUnavailable,
    SwapRefused,
    TimedOut,
    WriteRefused,
    WritesUnavailable,
    WritesUnsupported,
)
from service.engine.model_names import DimensionChanged, UnknownModel
from service.engine.swap import Refusal, SwapResult

__all__ = ["BadConfig", "BadFilter", "BadSearchParams", "BadVector", "DimensionChanged", "Document", "Collection",
           "EngineError", "Hits", "Mismatch", "ModeUnavailable", "NotReady", "NotServing", "Overloaded", "Refusal",
           "ServedModel", "SnapshotConflict", "SnapshotError", "SnapshotNotFound", "Status", "StorageFull",
           "StorageUnavailable", "SwapRefused", "SwapResult", "TimedOut", "UnknownModel", "Vectors", "WriteRefused",
           "WriteResult", "WritesUnavailable", "WritesUnsupported"]
