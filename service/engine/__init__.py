"""The serving engine: one front door per collection (`Collection.search`, `encode`, `reload`, `status`).

Owns: what every collection of the process shares (admission, the timeout, the workers, micro-batching, the write
lane), each collection's searcher, leases, swaps and their gates, compaction and snapshots, the backends (local and
Ray-sharded), the `/v1` model names, the engine's settings, metrics and tracing, and the errors it refuses with.

Its modules, one line each: the package table of docs/ARCHITECTURE.md (the one module map, checked against the
tree by tests/test_docs.py).

May import: `indexer.runtime`, numpy, pydantic(-settings), prometheus-client, OpenTelemetry (when tracing is on),
the standard library, and Ray (in `sharded` only, which is imported only for that backend). Nothing else of
`service` (an allow-list contract in pyproject.toml): the HTTP layer maps this package's errors to status codes
(`service.errors`). Never fastapi or starlette, torch, `models`, or the build pipeline.
"""

from indexer.runtime.reading import Page, StoredDocument
from indexer.runtime.writes import Document, WriteResult
from service.engine.collection import Collection, Hits, ServedModel, Status, Vectors
from service.engine.errors import (
    BadConfig,
    BadCursor,
    BadFilter,
    BadSearchParams,
    BadVector,
    DocumentNotFound,
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
    VectorsUnavailable,
    WriteRefused,
    WritesUnavailable,
    WritesUnsupported,
)
from service.engine.model_names import DimensionChanged, UnknownModel
from service.engine.reading import count_documents, get_document, get_documents, path_ids, scroll_documents
from service.engine.swap import Refusal, SwapResult

__all__ = ["BadConfig", "BadCursor", "BadFilter", "BadSearchParams", "BadVector", "DimensionChanged", "Document",
           "DocumentNotFound", "Collection", "EngineError", "Hits", "Mismatch", "ModeUnavailable", "NotReady",
           "NotServing", "Overloaded", "Page", "Refusal", "ServedModel", "SnapshotConflict", "SnapshotError",
           "SnapshotNotFound", "Status", "StorageFull", "StorageUnavailable", "StoredDocument", "SwapRefused",
           "SwapResult", "TimedOut", "UnknownModel", "Vectors", "VectorsUnavailable", "WriteRefused", "WriteResult",
           "WritesUnavailable", "WritesUnsupported", "count_documents", "get_document", "get_documents", "path_ids",
           "scroll_documents"]
