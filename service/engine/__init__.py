"""The serving engine: one front door per collection (`Collection.search`, `encode`, `reload`, `status`).

The front door is this package's names (`__all__`): the collections (`Collections`, `Collection`), what they
answer, what they refuse, and the runtime types a request is made of (`Query`, `Hit`, `Manifest`,
`CollectionConfig`). The HTTP routers import nothing else of the engine (an import contract in pyproject.toml).

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

from indexer.runtime.collection_config import CollectionConfig
from indexer.runtime.manifest import Manifest
from indexer.runtime.query import Query
from indexer.runtime.reading import Page, StoredDocument
from indexer.runtime.version import Hit
from indexer.runtime.writes import Document, WriteResult
from service.engine.collection import Collection, Hits, ServedModel, Stages, Status, Vectors
from service.engine.errors import (
    BackendUnsupported,
    BadConfig,
    BadCursor,
    BadFilter,
    BadSearchParams,
    BadVector,
    CollectionConflict,
    DocumentNotFound,
    EngineError,
    Mismatch,
    ModeUnavailable,
    NotReady,
    NotServing,
    Overloaded,
    ShardUnavailable,
    SnapshotConflict,
    SnapshotError,
    SnapshotNotFound,
    SnapshotTooLarge,
    StorageFull,
    StorageUnavailable,
    SwapRefused,
    TimedOut,
    WriteRefused,
    WritesUnavailable,
    WritesUnsupported,
)
from service.engine.model_catalog import Forbidden, ListedModel, listed, resolve
from service.engine.model_names import DimensionChanged, UnknownModel
from service.engine.reading import count_documents, get_document, get_documents, path_ids, scroll_documents
from service.engine.registry import NAME_PATTERN, Collections, CollectionsConfigError, UnknownCollection
from service.engine.snapshots import encoders_known, restore_upload
from service.engine.swap import Refusal, SwapResult

__all__ = ["NAME_PATTERN", "BackendUnsupported", "BadConfig", "BadCursor", "BadFilter", "BadSearchParams", "BadVector",
           "Collection", "CollectionConfig", "CollectionConflict", "Collections", "CollectionsConfigError",
           "DimensionChanged", "Document", "DocumentNotFound", "EngineError", "Forbidden", "Hit", "Hits", "ListedModel",
           "Manifest", "Mismatch", "ModeUnavailable", "NotReady", "NotServing", "Overloaded", "Page", "Query",
           "Refusal", "ServedModel", "ShardUnavailable", "SnapshotConflict", "SnapshotError", "SnapshotNotFound",
           "SnapshotTooLarge", "Stages", "Status", "StorageFull", "StorageUnavailable", "StoredDocument", "SwapRefused",
           "SwapResult", "TimedOut", "UnknownCollection", "UnknownModel", "Vectors", "WriteRefused", "WriteResult",
           "WritesUnavailable", "WritesUnsupported", "count_documents", "encoders_known", "get_document",
           "get_documents", "listed", "path_ids", "resolve", "restore_upload", "scroll_documents"]
