"""The serving engine, with one front door: `Engine.search`, `Engine.encode`, `Engine.reload`, `Engine.status`.

Owns, one module each:
- `engine`: the front door: admission (the in-flight cap), the timeout, the worker pool, engine metrics and
  the reload triggers (the `current` watcher, SIGHUP);
- `errors`: what the engine refuses (`NotReady`, `Overloaded`, `TimedOut`, `SwapRefused`, `Mismatch`,
  `BadFilter`, `ModeUnavailable`, `WriteRefused`, `WritesUnsupported`, `WritesUnavailable`);
- `batching`: micro-batching of concurrent calls into one ONNX run;
- `leases`: leases on the served searcher, so a swap never changes a batch's version under it;
- `swap`: swapping to a new version, behind its gates (loads, matches its encoder, answers a probe, MRR@10);
- `searcher`: an encoder paired with an index version, running one micro-batch;
- `writes`: documents written through the API: logged durably, replayed onto every version opened, switched
  with it;
- `live`: the overlay of those writes on a version (an exact set of written vectors, tombstones skipped inside
  the IVF scan), searched as one index;
- `local`: the local backend (the index searched in this process);
- `sharded`: the Ray-sharded backend (shards as Ray Serve deployments, searched from this process).

May import: `indexer.runtime`, `service.settings`, `service.metrics`, `service.tracing` (spans of its steps),
numpy, the standard library, and Ray (in `sharded` only, which is imported only for that backend). Never fastapi
or starlette: the HTTP layer maps this package's errors to status codes (`service.errors`). Never torch,
`models`, or the build pipeline.
"""

from service.engine.engine import Engine, Hits, ServedModel, Status, Vectors
from service.engine.errors import (
    BadFilter,
    EngineError,
    Mismatch,
    ModeUnavailable,
    NotReady,
    Overloaded,
    SwapRefused,
    TimedOut,
    WriteRefused,
    WritesUnavailable,
    WritesUnsupported,
)
from service.engine.swap import Refusal, SwapResult
from service.engine.writes import Document, WriteResult

__all__ = ["BadFilter", "Document", "Engine", "EngineError", "Hits", "Mismatch", "ModeUnavailable",
           "NotReady", "Overloaded", "Refusal",
           "ServedModel", "Status", "SwapRefused", "SwapResult", "TimedOut", "Vectors", "WriteRefused", "WriteResult",
           "WritesUnavailable", "WritesUnsupported"]
