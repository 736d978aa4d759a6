"""The writes' bodies: `PUT /documents` (upsert) and `POST /documents/delete`, with their limits (documents per call,
ids, metadata: the same rules as `indexer build --data`)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt, StrictStr, model_validator

from indexer.runtime.metadata import INT64_MAX, INT64_MIN, MAX_BYTES, MAX_DEPTH, MetadataError, check_metadata
from indexer.runtime.passage_rows import RESERVED_ID, reserved_id
from service.schemas.common import MAX_DOCUMENT_CHARS, MAX_VECTOR_DIM, VECTOR_DOC, DocumentText, VectorItem

MAX_WRITE_DOCS = 128  # documents per PUT /documents (each is encoded before the write is logged)
MAX_DELETE_IDS = 1000  # ids per POST /documents/delete
MAX_ID_CHARS = 512
METADATA_DOC = (f"JSON object: strings, numbers, bools (filterable), lists and objects (kept). Integers fit in "
                f"64 bits (signed), numbers are finite, strings valid Unicode, nesting at most {MAX_DEPTH} levels "
                f"and {MAX_BYTES:,} bytes of JSON per document (`indexer.runtime.metadata`, the same rules as "
                f"`indexer build --data`); anything else is a 422 naming the document and the field.")


def _valid_unicode(value: str, what: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: SQLite (and any client reading it back) cannot take it
        raise ValueError(f"{what} must be valid Unicode (no lone surrogates)") from None


def _check_id(value: int | str) -> int | str:
    if isinstance(value, str):
        _valid_unicode(value, "an id")
    if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"integer id {value} does not fit in 64 bits")
    if isinstance(value, str) and not value.strip():
        raise ValueError("a string id must not be empty or whitespace only")
    if isinstance(value, str) and len(value) > MAX_ID_CHARS:
        raise ValueError(f"string id is {len(value)} characters; the limit is {MAX_ID_CHARS}")
    return value


def _new_id(value: int | str) -> int | str:
    """A written document's id: not one that spells a passage row's (reading and deleting such an id, which no
    write makes now, touch only a document of that very id)."""
    if reserved_id(value):
        raise ValueError(RESERVED_ID)
    return value


# Strict: a string id stays a string ("17") and an integer id an integer (17); 17.0 and true are refused.
DocId = Annotated[StrictInt | StrictStr, AfterValidator(_check_id)]
WrittenDocId = Annotated[DocId, AfterValidator(_new_id)]


class WriteDocument(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: WrittenDocId = Field(description="a string or a 64-bit integer, kept as given (17 and \"17\" are two "
                             "documents); a string may not start with U+001F then 'P' (a version of passages' rows)")
    text: DocumentText = Field(description=f"up to {MAX_DOCUMENT_CHARS:,} characters: a version of passages splits "
                               "it into passages, any other encodes its first window and keeps the whole text")
    metadata: dict[str, Any] = Field(default_factory=dict, description=METADATA_DOC)
    vector: list[VectorItem] | None = Field(None, max_length=MAX_VECTOR_DIM, description=VECTOR_DOC)

    @model_validator(mode="after")
    def _metadata_schema(self) -> WriteDocument:
        try:  # the one schema, shared with `indexer build --data` (indexer.runtime.metadata)
            check_metadata(self.metadata)
        except MetadataError as exc:
            raise ValueError(f"document {self.id!r}: {exc}") from None
        return self


class UpsertRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    documents: list[WriteDocument] = Field(min_length=1, max_length=MAX_WRITE_DOCS,
                                           description=f"1..{MAX_WRITE_DOCS} documents; a later one with the same "
                                           "id replaces an earlier one")


class DeleteRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ids: list[DocId] = Field(min_length=1, max_length=MAX_DELETE_IDS, description=f"1..{MAX_DELETE_IDS} ids")


class WriteResponse(BaseModel):
    seq: int = Field(description="the write log's seq of this write's last entry (durable when this answers)")
    index_version: str = Field(description="the version whose overlay now serves the write")
    index_size: int = Field(description="the vectors served after the write, as GET /ready's index_size (a version "
                            "of passages: its passages; its documents are GET /ready's documents)")
    took_ms: float


class UpsertResponse(WriteResponse):
    upserted: int = Field(description="documents in the request (an id given twice counts twice)")
    created: int = Field(description="documents whose id was not served before")
    replaced: int = Field(description="documents whose id was served before: their text, metadata and vector (a "
                          "version of passages: all of their passages) were replaced")
    passages_written: int | None = Field(None, description="a version of passages: the passages written (the "
                                         "documents split as the build split them); absent for whole documents")
    passages_deleted: int | None = Field(None, description="a version of passages: the earlier passages removed, "
                                         "past a replaced document's new count; absent for whole documents")


class DeleteResponse(WriteResponse):
    deleted: int = Field(description="documents that were served and are gone (a version of passages: with all of "
                         "their passages)")
    missing: int = Field(description="documents that were not served (logged all the same: they stay deleted should "
                         "a later version hold them)")
    passages_deleted: int | None = Field(None, description="a version of passages: the passages removed; absent for "
                                         "whole documents")
