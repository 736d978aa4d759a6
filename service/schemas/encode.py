"""`POST /encode`'s bodies."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from service.schemas.common import MAX_TEXTS, Text


class EncodeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    texts: list[Text] = Field(min_length=1, max_length=MAX_TEXTS, description=f"1..{MAX_TEXTS} texts")


class EncodeResponse(BaseModel):
    vectors: list[list[float]]
    dim: int
    took_ms: float
    truncated: list[bool] = Field(description="per text: cut to the model's max_length tokens")
    index_version: str = Field(description="the index version whose encoder produced these vectors")
