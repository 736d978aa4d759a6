"""Request and response bodies. Limits are part of the API contract (see README, "HTTP API")."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    WithJsonSchema,
    model_validator,
)

MAX_TEXTS = 64  # texts per /encode call, queries per /search call
MAX_TEXT_CHARS = 2000  # longer texts are refused; texts over the model's token limit are truncated and flagged
MAX_TOP_K = 100


def _check_text(value: str) -> str:
    if not value.strip():
        raise ValueError("text must not be empty or whitespace only")
    if len(value) > MAX_TEXT_CHARS:
        raise ValueError(f"text is {len(value)} characters; the limit is {MAX_TEXT_CHARS}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate ("\\ud800" in JSON): the tokenizer cannot take it
        raise ValueError("text must be valid Unicode (no lone surrogates)") from None
    return value


# The JSON schema states the checks above, so that clients (and schemathesis) generate what passes them.
Text = Annotated[StrictStr, AfterValidator(_check_text),
                 WithJsonSchema({"type": "string", "minLength": 1, "maxLength": MAX_TEXT_CHARS, "pattern": r"\S"})]


FILTER_DOC = (
    "Search only the documents whose metadata match. F is {\"field\": value} (equality), "
    "{\"field\": {\"eq\": v}}, {\"field\": {\"in\": [v, ...]}}, {\"field\": {\"gt\"|\"gte\"|\"lt\"|\"lte\": v, ...}} "
    "(a range; its bounds all apply), {\"and\": [F, ...]}, {\"or\": [F, ...]}; several fields in one object must "
    "all match. Values are strings, numbers or bools of the field's type (numbers match int and float fields; "
    "string ranges compare as text; bools have no ranges). A document without the field never matches. An "
    "unknown field or operator, or a value of the wrong type, is a 422 that says why.")


class EncodeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    texts: list[Text] = Field(min_length=1, max_length=MAX_TEXTS, description=f"1..{MAX_TEXTS} texts")


class EncodeResponse(BaseModel):
    vectors: list[list[float]]
    dim: int
    took_ms: float
    truncated: list[bool] = Field(description="per text: cut to the model's max_length tokens")
    index_version: str = Field(description="the index version whose encoder produced these vectors")


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: Text | None = None
    queries: list[Text] | None = Field(None, min_length=1, max_length=MAX_TEXTS)
    top_k: int = Field(10, ge=1, le=MAX_TOP_K)
    filter: dict[str, Any] | None = Field(None, description=FILTER_DOC, examples=[
        {"bucket": 1}, {"bucket": {"in": [1, 2]}}, {"year": {"gte": 2000, "lt": 2010}},
        {"and": [{"lang": "en"}, {"or": [{"year": {"gte": 2020}}, {"bucket": 0}]}]}])
    mode: Literal["dense", "lexical", "hybrid"] | None = Field(
        None, description="dense: nearest vectors; lexical: BM25 (no encoder); hybrid: both, fused. Default: the "
        "served version's (`indexer build --default-mode`; hybrid when it has a lexical index, else dense)")
    fusion: Literal["rrf", "convex"] | None = Field(
        None, description="hybrid only. rrf (default): reciprocal-rank fusion, sum of 1/(k + rank); convex: "
        "alpha · dense + (1 − alpha) · lexical over min-max normalised scores")
    k: float | None = Field(None, gt=0, le=10_000, description="rrf's rank constant (default 60)")
    alpha: float | None = Field(None, ge=0, le=1, description="convex: the dense list's weight (default 0.5)")

    @model_validator(mode="after")
    def _one_of(self) -> SearchRequest:
        if (self.query is None) == (self.queries is None):
            raise ValueError("give exactly one of 'query' (a string) or 'queries' (a list of strings)")
        if self.mode in ("dense", "lexical") and (self.fusion, self.k, self.alpha) != (None, None, None):
            raise ValueError(f"'fusion', 'k' and 'alpha' apply to mode 'hybrid', not {self.mode!r}")
        if self.k is not None and self.fusion == "convex":
            raise ValueError("'k' is rrf's rank constant; fusion 'convex' takes 'alpha'")
        if self.alpha is not None and self.fusion != "convex":
            raise ValueError("'alpha' applies to fusion 'convex' (give \"fusion\": \"convex\")")
        return self


class Hit(BaseModel):
    # Strict: a string id stays a string ("17") and an integer id an integer (17); lax mode would coerce one
    # into the other.
    id: StrictInt | StrictStr = Field(description="the document's id as the corpus gave it (string or integer)")
    text: str
    score: float
    metadata: dict[str, Any] = Field(description="the document's metadata ({} when it has none)")


class QueryHits(BaseModel):
    query: str
    hits: list[Hit]
    truncated: bool


class SearchStages(BaseModel):
    """Where the search's time went, in ms (0 for a stage its mode skips)."""

    encode_ms: float
    dense_ms: float = Field(description="the filter's store query and the FAISS search")
    lexical_ms: float
    fusion_ms: float
    lookup_ms: float = Field(description="the hits' texts and metadata read from the store")


class SearchResponse(BaseModel):
    hits: list[Hit] | None = Field(None, description="for a single 'query'")
    results: list[QueryHits] | None = Field(None, description="for 'queries', in request order")
    truncated: bool | None = Field(None, description="for a single 'query': cut to max_length tokens")
    took_ms: float
    encode_ms: float
    search_ms: float
    index_version: str
    mode: Literal["dense", "lexical", "hybrid"] = Field(description="the mode that ran")
    stages: SearchStages


class SwapRefusal(BaseModel):
    version: str | None
    kind: str = Field(description="corrupt | mismatch | quality | probe | missing | writes | error")
    reason: str
    at: datetime


class TrainingProgress(BaseModel):
    """A background in-domain training (`python -m service demo --train`), read from its status file."""

    stage: str = Field(description="base | mine | train | export (`encoder adapt`), then index (the build), then "
                       "done (built: the API swaps to it if its MRR@10 passes the gate) or failed")
    step: int = 0
    total_steps: int = 0
    eta_s: float | None = Field(None, description="seconds left in the training stage")
    message: str = ""
    updated_at: float | None = Field(None, description="Unix time of the status file's last update")


class Ready(BaseModel):
    ready: bool
    index_version: str | None = None
    index_size: int | None = None
    model: str | None = None
    pooling: str | None = None
    reason: str | None = None
    swap_refused: SwapRefusal | None = Field(None, description="the latest swap attempt, when it was refused")
    training: TrainingProgress | None = Field(None, description="a background training, when one was started")


class ReloadResponse(BaseModel):
    outcome: Literal["swapped", "unchanged", "refused"]
    index_version: str | None = Field(description="the version served after this call")
    candidate: str | None = Field(description="what `current` pointed to")
    reason: str | None = None


class ErrorBody(BaseModel):
    detail: str | list[dict[str, Any]]


# --- writes: PUT /documents, POST /documents/delete ---------------------------------------------------------------

MAX_WRITE_DOCS = 128  # documents per PUT /documents (each is encoded before the write is logged)
MAX_DELETE_IDS = 1000  # ids per POST /documents/delete
MAX_ID_CHARS = 512
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


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


def _finite(value: Any, where: str) -> None:
    """Numbers finite (JSON has no NaN, though Python's parser reads it) and strings valid Unicode, all the way
    down."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"metadata {where} is {value}: numbers must be finite")
    if isinstance(value, str):
        _valid_unicode(value, f"metadata {where}")
    if isinstance(value, dict):
        for k, v in value.items():
            _valid_unicode(k, f"a metadata field name in {where}")
            _finite(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _finite(v, f"{where}[{i}]")


def _check_metadata(value: dict[str, Any]) -> dict[str, Any]:
    for key, v in value.items():
        if not key.strip():
            raise ValueError("metadata field names must not be empty")
        _valid_unicode(key, "a metadata field name")
        _finite(v, ascii(key))
    return value


# Strict: a string id stays a string ("17") and an integer id an integer (17); 17.0 and true are refused.
DocId = Annotated[StrictInt | StrictStr, AfterValidator(_check_id)]
Metadata = Annotated[dict[str, Any], AfterValidator(_check_metadata)]


class WriteDocument(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: DocId = Field(description="a string or a 64-bit integer, kept as given (17 and \"17\" are two documents)")
    text: Text
    metadata: Metadata = Field(default_factory=dict, description="JSON object: strings, numbers, bools (filterable), "
                               "lists and objects (kept)")


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
    index_size: int = Field(description="documents served after the write")
    took_ms: float


class UpsertResponse(WriteResponse):
    upserted: int
    created: int = Field(description="ids that were not served before")
    replaced: int = Field(description="ids that were served before: their text, metadata and vector were replaced")


class DeleteResponse(WriteResponse):
    deleted: int = Field(description="ids that were served and are gone")
    missing: int = Field(description="ids that were not served (logged all the same: they stay deleted should a "
                         "later version hold them)")
