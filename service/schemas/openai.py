"""OpenAI-compatible request and response bodies (`/v1/embeddings`, `/v1/models`) and their error shape.

The shapes are OpenAI's, so its clients parse them; the limits are Strata's own (the ones `/encode` has):
1..64 texts, each non-empty, not whitespace only, at most 2,000 characters. Token arrays are refused: the
vectors come from Strata's tokenizer, and ids from OpenAI's (tiktoken) mean nothing to it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from annotated_types import Len
from pydantic import BaseModel, ConfigDict, Discriminator, Field, StrictInt, Tag, field_validator

from service.schemas.common import MAX_TEXTS, Text


def _input_kind(value: Any) -> str | None:
    return "text" if isinstance(value, str) else "texts" if isinstance(value, list) else None


# Tagged, so that a bad text is reported once, by its position, rather than once per member of the union.
Input = Annotated[Annotated[Text, Tag("text")] | Annotated[list[Text], Len(1, MAX_TEXTS), Tag("texts")],
                  Discriminator(_input_kind, custom_error_type="input_type",
                                custom_error_message="input must be a string or a list of strings")]


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input: Input = Field(description=f"a text, or a list of 1..{MAX_TEXTS} texts (token arrays are refused)")
    model: str = Field(description="the served model's name (see GET /v1/models) or an accepted alias")
    encoding_format: Literal["float", "base64"] = Field(
        "float", description="base64: the little-endian float32 bytes of each vector, base64-encoded")
    dimensions: StrictInt | None = Field(None, ge=1, description="must equal the model's dimension if given: "
                                   "the model was not trained for shortened (Matryoshka) vectors")
    user: str | None = Field(None, max_length=256, description="accepted for compatibility, not used")

    @field_validator("encoding_format", mode="before")
    @classmethod
    def _null_is_float(cls, value: Any) -> Any:
        """`null`, as clients that send every optional parameter write "not given": the default, as `dimensions`."""
        return "float" if value is None else value

    @field_validator("input", mode="before")
    @classmethod
    def _no_token_arrays(cls, value: Any) -> Any:
        if isinstance(value, list) and any(isinstance(v, int | list) and not isinstance(v, bool) for v in value):
            raise ValueError("token arrays are not supported: send the text itself (a string or a list of "
                             "strings); this model's tokenizer is not OpenAI's")
        return value


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str = Field(description="floats, or a base64 string for encoding_format=base64")


class Usage(BaseModel):
    prompt_tokens: int = Field(description="tokens the encoder ran: [CLS] and [SEP] included, after truncation "
                               "to the model's max_length")
    total_tokens: int


class EmbeddingResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str = Field(description="the name of the model that produced the vectors")
    usage: Usage


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(description="when the encoder was exported (Unix seconds)")
    owned_by: str = "strata"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class OpenAIError(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class OpenAIErrorBody(BaseModel):
    error: OpenAIError


class OpenAIRequestError(Exception):
    """A refusal of an OpenAI route, answered in OpenAI's shape (by `service.errors`)."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
