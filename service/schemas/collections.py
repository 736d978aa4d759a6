"""Response bodies of `GET /collections` and `GET /collections/{name}` (the collection-scoped routes under
`/collections/{name}` have the bodies of the routes without it)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from indexer.runtime.collection_config import CollectionConfig
from indexer.runtime.collection_dirs import NAME_PATTERN
from service.schemas.common import SwapRefusal
from service.schemas.compaction import CompactionState


class CollectionInfo(BaseModel):
    name: str
    default: bool = Field(description="the collection the routes without /collections/NAME serve")
    ready: bool
    reason: str | None = Field(None, description="why not ready")
    documents: int | None = Field(None, description="documents served, writes included")
    passages: int | None = Field(None, description="a version built with passages: its passages, writes included "
                                 "(absent: documents are indexed whole)")
    fields: dict[str, str] | None = Field(None, description=(
        "the metadata fields its documents hold, with their types (int, float, str, bool, json, or a union such "
        "as int|str), as filters check them; a filter on a field not listed matches nothing"))
    version: str | None = None
    since: datetime | None = Field(None, description="when the served version was swapped in")
    encoder: str | None = Field(None, description="the encoder folder's name")
    model: str | None = Field(None, description="the encoder's id in /v1 (`/v1/models`)")
    dim: int | None = None
    pooling: str | None = None
    index_kind: str | None = Field(None, description="flat, ivf or hnsw")
    default_mode: str | None = Field(None, description="/search's mode when a request names none")
    mrr_at_10: float | None = Field(None, description="from the version's manifest (null: built with --no-eval)")
    ndcg_at_10: float | None = Field(None, description="from the version's manifest, where its eval measured it")
    swap_refused: SwapRefusal | None = None
    compaction: CompactionState | None = Field(None, description="its background compaction: pending, running, "
                                               "last done (docs/operations.md#compaction-by-itself)")


class CollectionList(BaseModel):
    default: str | None = Field(description="the default collection (null: none)")
    collections: list[CollectionInfo] = Field(description="those the API key may read, by name")


class SnapshotOut(BaseModel):
    """One snapshot of a collection (`POST`/`GET /collections/{name}/snapshots`; docs/operations.md#snapshots)."""

    name: str
    version: str = Field(description="the index version it holds")
    seq: int = Field(description="the write log is in it up to this seq: every write acknowledged before it began")
    size: int = Field(description="bytes of the archive")
    sha256: str = Field(description="of the whole archive, as downloaded")
    created_at: str
    documents: int = Field(description="the version's documents, before the log's entries are replayed onto it")
    passages: int | None = Field(None, description="a version built with passages: its passages (absent: documents "
                                 "are indexed whole)")
    seconds: float = Field(0.0, description="how long making it took")


class SnapshotList(BaseModel):
    snapshots: list[SnapshotOut] = Field(description="oldest first")


class CreateCollection(BaseModel):
    """`POST /collections`: a new collection, empty, that takes writes and searches at once."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=f"^{NAME_PATTERN}$", description="its name, and its folder's in the collections folder")
    encoder: str | None = Field(None, description="an exported encoder the server knows: a folder under its "
                                "models folder (STRATA_MODELS_DIR, default ~/.strata/models); default: the default "
                                "encoder. An unknown one is a 422 listing the known ones")
    settings: CollectionConfig | None = Field(None, description="its collection.json (GET /collections/{name}/config "
                                              "describes the fields); default: none")


class DeletedCollection(BaseModel):
    name: str
    deleted: bool = True
