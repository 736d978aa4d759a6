"""Request and response bodies. Limits are part of the API contract (see README, "HTTP API")."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictStr, model_validator

MAX_TEXTS = 64  # texts per /encode call, queries per /search call
MAX_TEXT_CHARS = 2000  # longer texts are refused; texts over the model's token limit are truncated and flagged
MAX_TOP_K = 100


def _check_text(value: str) -> str:
    if not value.strip():
        raise ValueError("text must not be empty or whitespace only")
    if len(value) > MAX_TEXT_CHARS:
        raise ValueError(f"text is {len(value)} characters; the limit is {MAX_TEXT_CHARS}")
    return value


Text = Annotated[StrictStr, AfterValidator(_check_text)]


class EncodeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    texts: list[Text] = Field(min_length=1, max_length=MAX_TEXTS, description=f"1..{MAX_TEXTS} texts")


class EncodeResponse(BaseModel):
    vectors: list[list[float]]
    dim: int
    took_ms: float
    truncated: list[bool] = Field(description="per text: cut to the model's max_length tokens")


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: Text | None = None
    queries: list[Text] | None = Field(None, min_length=1, max_length=MAX_TEXTS)
    top_k: int = Field(10, ge=1, le=MAX_TOP_K)

    @model_validator(mode="after")
    def _one_of(self) -> SearchRequest:
        if (self.query is None) == (self.queries is None):
            raise ValueError("give exactly one of 'query' (a string) or 'queries' (a list of strings)")
        return self


class Hit(BaseModel):
    id: int
    text: str
    score: float


class QueryHits(BaseModel):
    query: str
    hits: list[Hit]
    truncated: bool


class SearchResponse(BaseModel):
    hits: list[Hit] | None = Field(None, description="for a single 'query'")
    results: list[QueryHits] | None = Field(None, description="for 'queries', in request order")
    truncated: bool | None = Field(None, description="for a single 'query': cut to max_length tokens")
    took_ms: float
    encode_ms: float
    search_ms: float
    index_version: str


class Ready(BaseModel):
    ready: bool
    index_version: str | None = None
    index_size: int | None = None
    model: str | None = None
    pooling: str | None = None
    reason: str | None = None
