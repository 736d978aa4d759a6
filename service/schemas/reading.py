"""Reading documents back: `GET /documents/{id}`, `POST /documents/get`, `/documents/count`, `/documents/scroll`, with
their limits (ids per call, documents per page, the filters of /search)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from service.schemas.documents import DocId
from service.schemas.search import FILTER_DOC, _within_limits

MAX_GET_IDS = 1000  # ids per POST /documents/get
MAX_SCROLL_LIMIT = 1000  # documents per page of POST /documents/scroll
DEFAULT_SCROLL_LIMIT = 100
MAX_CURSOR_CHARS = 4096  # a cursor holds one id (at most 512 characters), encoded
COUNT_FILTER_DOC = FILTER_DOC.replace("Search only the documents", "Count only the documents", 1)
SCROLL_FILTER_DOC = FILTER_DOC.replace("Search only the documents", "Page through only the documents", 1)
VECTOR_BACK_DOC = ("also the vector the index holds for each document (a version of passages: each passage's): as "
                   "written or encoded, L2-normalised; an IVF index's float16 (SQfp16) or 8-bit (SQ8) codes decoded")

Filter = Annotated[dict[str, Any] | None, AfterValidator(_within_limits)]


class GetRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ids: list[DocId] = Field(min_length=1, max_length=MAX_GET_IDS, description=f"1..{MAX_GET_IDS} ids, as written "
                             "(17 and \"17\" are two documents)")
    with_vector: StrictBool = Field(False, description=VECTOR_BACK_DOC)


class CountRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    filter: Filter = Field(None, description=COUNT_FILTER_DOC)


class ScrollRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    limit: StrictInt = Field(DEFAULT_SCROLL_LIMIT, ge=1, le=MAX_SCROLL_LIMIT,
                             description=f"documents per page, 1..{MAX_SCROLL_LIMIT}")
    cursor: StrictStr | None = Field(None, min_length=1, max_length=MAX_CURSOR_CHARS, description=(
        "the previous page's next_cursor; none: from the first document. Pages are in id order (integers first, "
        "then strings; on a version of passages, the order of the documents' first passages' row ids: as stable, "
        "not the ids' own order); a cursor names the last id seen, so it stays valid across writes, compaction "
        "and restarts"))
    filter: Filter = Field(None, description=SCROLL_FILTER_DOC)
    with_vector: StrictBool = Field(False, description=VECTOR_BACK_DOC)


class PassageBody(BaseModel):
    index: int = Field(description="its number in the document, from 0")
    start: int = Field(description="its first character's offset in the document's text")
    end: int = Field(description="the offset past its last character")
    text: str
    vector: list[float] | None = Field(None, description="with with_vector: the passage's vector")


class DocumentBody(BaseModel):
    id: int | str = Field(description="as written: an integer or a string")
    text: str = Field(description="as written; a version of passages: laid out from its passages (a character no "
                      "passage covers, whitespace between sentences, reads as a space; what follows the last "
                      "passage, trailing whitespace, is left out)")
    metadata: dict[str, Any]
    passages: list[PassageBody] | None = Field(None, description="a version of passages (indexer build --chunk): "
                                               "the document's passages, in order; null otherwise")
    vector: list[float] | None = Field(None, description="with with_vector: the document's vector (null on a "
                                       "version of passages: see each passage's)")


class GetResponse(BaseModel):
    documents: list[DocumentBody] = Field(description="the documents found, in the order asked (an id asked twice, "
                                          "once)")
    not_found: list[int | str] = Field(description="the ids no live document has (never written, or deleted)")


class CountResponse(BaseModel):
    count: int = Field(description="live documents (matching the filter, when given); a version of passages counts "
                       "documents, not passages")


class ScrollResponse(BaseModel):
    documents: list[DocumentBody] = Field(description="up to limit documents after the cursor, in id order")
    next_cursor: str | None = Field(description="the next page's cursor; null: this was the last page")
