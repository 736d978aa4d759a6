"""What several routes' bodies share: a text and its limits, a brought vector's limit, a swap's refusal, the error
body. Limits are part of the API contract (see docs/http-api.md)."""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, Field, StrictFloat, StrictStr, WithJsonSchema

from indexer.runtime.collection_config import MAX_QUERIES

MAX_TEXTS = MAX_QUERIES  # texts per /encode call, queries per /search call (a collection.json may only lower it)
MAX_TEXT_CHARS = 2000  # longer texts are refused; texts over the model's token limit are truncated and flagged


# A written document's text: a version of passages splits it (each passage encoded), any other version encodes its
# first window and keeps the whole text (BM25, reading back), as a build does with a long document; the body cap
# (STRATA_MAX_BODY_BYTES) bounds a call's texts together.
MAX_DOCUMENT_CHARS = 200_000


def _blank(value: str) -> bool:
    """Whether a text holds nothing an encoder reads: whitespace, control and format characters only (a zero-width
    space, a BOM, a soft hyphen, NUL). Tokenizers drop them all, so such a text would be encoded as the empty text;
    the first visible character ends the scan."""
    return all(ch.isspace() or unicodedata.category(ch) in ("Cc", "Cf") for ch in value)


def _checker(limit: int) -> Callable[[str], str]:
    def check(value: str) -> str:
        if _blank(value):
            raise ValueError("text must not be empty or whitespace only (control and format characters such as "
                             "U+200B, which encoders drop, count as whitespace)")
        if len(value) > limit:
            raise ValueError(f"text is {len(value)} characters; the limit is {limit}")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate ("\\ud800" in JSON): the tokenizer cannot take it
            raise ValueError("text must be valid Unicode (no lone surrogates)") from None
        return value
    return check


# The JSON schema states the checks above, so that clients (and schemathesis) generate what passes them.
Text = Annotated[StrictStr, AfterValidator(_checker(MAX_TEXT_CHARS)),
                 WithJsonSchema({"type": "string", "minLength": 1, "maxLength": MAX_TEXT_CHARS, "pattern": r"\S"})]
DocumentText = Annotated[StrictStr, AfterValidator(_checker(MAX_DOCUMENT_CHARS)),
                         WithJsonSchema({"type": "string", "minLength": 1, "maxLength": MAX_DOCUMENT_CHARS,
                                         "pattern": r"\S"})]


MAX_VECTOR_DIM = 8192
# A brought vector's item (a query's or a document's): a JSON number, integers included; strict, so that true, false
# and "0.5" are 422s naming the item rather than 1.0, 0.0 and 0.5 (the lax float's coercions).
VectorItem = StrictFloat
VECTOR_DOC = ("this document's vector, brought instead of encoding its text: it must come from the served "
              "encoder's space (same model, pooling and normalisation: docs/own-corpus.md), of its dimension "
              "(GET /stats), numbers (true, false and strings are refused), finite and not all zeros; it is "
              "L2-normalised as the encoder's are")


class SwapRefusal(BaseModel):
    version: str | None
    kind: str = Field(description="corrupt (a file fails its checksum or does not load; the file is named) | "
                      "mismatch | quality | shrink (STRATA_MAX_SHRINK) | probe | missing | writes | error")
    reason: str
    at: datetime


class ErrorBody(BaseModel):
    detail: str | list[dict[str, Any]]
