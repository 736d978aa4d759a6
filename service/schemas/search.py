"""`POST /search`'s bodies: the query (texts or a vector, top_k, filter, mode, fusion, the kind's search parameters)
and the hits. Limits are part of the API contract (see docs/http-api.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    create_model,
    model_validator,
)

from indexer.runtime.ann import KIND_SPECS, KNOBS, Knob
from indexer.runtime.collection_config import MAX_TOP_K
from indexer.runtime.filters import LIMITS, FilterError, check_limits
from service.schemas.common import MAX_TEXTS, MAX_VECTOR_DIM, Text, VectorItem

FILTER_DOC = (
    "Search only the documents whose metadata match. F is {\"field\": value} (equality), "
    "{\"field\": {\"eq\": v}}, {\"field\": {\"in\": [v, ...]}}, {\"field\": {\"gt\"|\"gte\"|\"lt\"|\"lte\": v, ...}} "
    "(a range; its bounds all apply), {\"and\": [F, ...]}, {\"or\": [F, ...]}; several fields in one object must "
    "all match. Values are strings, numbers or bools of the field's type (numbers match int and float fields; "
    "string ranges compare as text; bools have no ranges). A document without the field never matches. An "
    "unknown field or operator, a value of the wrong type, or one outside the metadata schema (integers beyond 64 "
    "bits, NaN or infinities, lone surrogates) is a 422 that says why. Limits (every mode, every route): and/or "
    f"nested at most {LIMITS.depth} deep, at most {LIMITS.width} filters in one and/or list or fields in one "
    f"object, {LIMITS.conditions} field conditions and {LIMITS.values} values (`in` lists included) in all.")


def _within_limits(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is not None:
        try:
            check_limits(value)
        except FilterError as exc:  # the same limits the store checks: refused here, before the engine
            raise ValueError(str(exc)) from None
    return value


class _SearchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: Text | None = None
    vector: list[VectorItem] | None = Field(None, min_length=1, max_length=MAX_VECTOR_DIM, description=(
        "a query vector instead of encoding text, from the served encoder's space (its dimension; numbers: true, "
        "false and strings are refused; finite, not all zeros). Alone: mode dense (the default for it). With "
        "'query' too: mode hybrid, the vector for the dense side and the text for BM25. Mode lexical takes no "
        "vector"))
    queries: list[Text] | None = Field(None, min_length=1, max_length=MAX_TEXTS)
    top_k: StrictInt = Field(10, ge=1, le=MAX_TOP_K, description=(  # strict: "5", 5.0 and true are 422s
        "hits per query; left out: 10, or the collection's max_top_k (collection.json) when that is lower"))
    filter: Annotated[dict[str, Any] | None, AfterValidator(_within_limits)] = Field(
        None, description=FILTER_DOC, examples=[
        {"bucket": 1}, {"bucket": {"in": [1, 2]}}, {"year": {"gte": 2000, "lt": 2010}},
        {"and": [{"lang": "en"}, {"or": [{"year": {"gte": 2020}}, {"bucket": 0}]}]}])


def _knob_doc(knob: Knob) -> str:
    kinds = [k for k, spec in KIND_SPECS.items() if spec.knob is knob]
    return (f"{' and '.join(k.upper() for k in kinds)} only: {knob.what} for this request (default: the served "
            f"{knob.name})")


# Per-request search parameters of the served index's kind (GET /stats: `index.kind`), one field per kind's knob
# (`ann.KNOBS`). One the kind does not take is a 422 naming what it takes, not silently ignored: a sweep of nprobe
# against a flat version would otherwise measure the same exact search at every setting and look like a finding.
_SearchParamFields: type[_SearchBody] = create_model(  # type: ignore[call-overload]
    "_SearchParamFields", __base__=_SearchBody,
    **{k.name: (StrictInt | None, Field(None, ge=1, le=k.max_request, description=_knob_doc(k))) for k in KNOBS})


class SearchRequest(_SearchParamFields):  # type: ignore[misc,valid-type]
    mode: Literal["dense", "lexical", "hybrid"] | None = Field(
        None, description="dense: nearest vectors; lexical: BM25 (no encoder); hybrid: both, fused. Default: the "
        "served version's (`indexer build --default-mode`; hybrid when it has a lexical index, else dense)")
    fusion: Literal["rrf", "convex"] | None = Field(
        None, description="hybrid only. convex (default): alpha · dense + (1 − alpha) · lexical over min-max "
        "normalised scores; rrf: reciprocal-rank fusion, sum of 1/(k + rank)")
    # strict like top_k: "0.5", true and "60" are 422s (lax mode reads them as numbers); 60 is taken as 60.0
    k: StrictFloat | None = Field(None, gt=0, le=10_000,
                                  description="rrf's rank constant (default 60); alone, it selects rrf")
    alpha: StrictFloat | None = Field(None, ge=0, le=1, description="convex: the dense list's weight (default 0.5)")
    passages: StrictBool = Field(False, description="a version built with passages (`indexer build --chunk`): true "
                                 "returns the best passages themselves (several of one document may rank), false "
                                 "(default) their documents, each with its best passage")
    snippets: StrictBool = Field(True, description="a version built with passages: each hit's passage carries its "
                                 "'snippet' (default); false leaves it empty and saves its cost (tens of µs a hit: "
                                 "most of a lexical search's time at top_k 100)")

    @property
    def search_params(self) -> dict[str, int]:
        return {k.name: v for k in KNOBS if (v := getattr(self, k.name)) is not None}

    @model_validator(mode="after")
    def _one_of(self) -> SearchRequest:
        if self.vector is not None:
            if self.queries is not None:
                raise ValueError("'vector' is one query's vector: give it with 'query' (hybrid) or alone, not with "
                                 "'queries'")
            if self.query is None and self.mode not in (None, "dense"):
                raise ValueError(f"mode {self.mode!r} needs the query's text for BM25: give 'query' too (hybrid), "
                                 f"or use mode 'dense' with a vector alone")
            if self.query is not None and self.mode not in (None, "hybrid"):
                raise ValueError(f"'vector' and 'query' together run mode 'hybrid' (the vector for the dense side, "
                                 f"the text for BM25), not {self.mode!r}: give one of them for that mode")
        elif (self.query is None) == (self.queries is None):
            raise ValueError("give exactly one of 'query' (a string) or 'queries' (a list of strings), or a "
                             "'vector'")
        if self.mode in ("dense", "lexical") and (self.fusion, self.k, self.alpha) != (None, None, None):
            raise ValueError(f"'fusion', 'k' and 'alpha' apply to mode 'hybrid', not {self.mode!r}")
        if self.mode == "lexical" and self.search_params:
            raise ValueError(f"{' and '.join(repr(k) for k in self.search_params)} "
                             f"{'tune' if len(self.search_params) > 1 else 'tunes'}"
                             " the vector search; mode 'lexical' runs none")
        if self.k is not None and self.fusion == "convex":
            raise ValueError("'k' is rrf's rank constant; fusion 'convex' takes 'alpha'")
        if self.alpha is not None and (self.fusion == "rrf" or (self.fusion is None and self.k is not None)):
            raise ValueError("'alpha' is the convex fusion's dense weight; fusion 'rrf' takes 'k'")
        return self


class Hit(BaseModel):
    # Strict: a string id stays a string ("17") and an integer id an integer (17); lax mode would coerce one
    # into the other.
    id: StrictInt | StrictStr = Field(description="the document's id as the corpus gave it (string or integer)")
    text: str
    score: float
    metadata: dict[str, Any] = Field(description="the document's metadata ({} when it has none)")
    passage: PassageHit | None = Field(None, description="a version built with passages: the passage that matched "
                                       "('text' is its text); absent for a version of whole documents")


class PassageHit(BaseModel):
    index: int = Field(description="the passage's number in its document, from 0")
    start: int = Field(description="its first character's offset in the document")
    end: int = Field(description="the offset just past its last character: document[start:end] is 'text'")
    count: int = Field(description="the document's passages")
    snippet: str = Field(description="HTML: a window of the passage, the query's terms in <mark>, the rest escaped; "
                         "empty when the request's 'snippets' is false")


Hit.model_rebuild()


class QueryHits(BaseModel):
    query: str
    hits: list[Hit]
    truncated: bool = Field(description="cut to max_length tokens, or (a version of passages) fewer than top_k "
                            "documents though more may match: the deepening's bound stopped it")


class SearchStages(BaseModel):
    """Where the search's time went, in ms (0 for a stage its mode skips)."""

    encode_ms: float
    dense_ms: float = Field(description="the filter's store query and the FAISS search")
    lexical_ms: float
    fusion_ms: float
    lookup_ms: float = Field(description="the hits' texts and metadata read from the store")
    lexical_bounded: int = Field(0, description="hybrid: how many of the queries took the bounded lexical leg (a "
                                 "large collection, common terms: the selective terms' documents and the dense "
                                 "candidates scored by BM25) instead of the exact BM25 top 100")


class SearchResponse(BaseModel):
    hits: list[Hit] | None = Field(None, description="for a single 'query'")
    results: list[QueryHits] | None = Field(None, description="for 'queries', in request order")
    truncated: bool | None = Field(None, description="for a single 'query': cut to max_length tokens, or (a version "
                                   "of passages) fewer than top_k documents though more may match: the deepening's "
                                   "bound stopped it")
    took_ms: float
    encode_ms: float
    search_ms: float
    index_version: str
    mode: Literal["dense", "lexical", "hybrid"] = Field(description="the mode that ran")
    stages: SearchStages
