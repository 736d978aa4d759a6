"""Request and response bodies. Limits are part of the API contract (see docs/http-api.md)."""

from __future__ import annotations

from datetime import datetime
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
    WithJsonSchema,
    create_model,
    model_validator,
)

from indexer.runtime.ann import KIND_SPECS, KNOBS, Knob
from indexer.runtime.collection_config import MAX_TOP_K
from indexer.runtime.filters import LIMITS, FilterError, check_limits
from indexer.runtime.metadata import INT64_MAX, INT64_MIN, MAX_BYTES, MAX_DEPTH, MetadataError, check_metadata
from service.compaction_schemas import CompactionState

MAX_TEXTS = 64  # texts per /encode call, queries per /search call
MAX_TEXT_CHARS = 2000  # longer texts are refused; texts over the model's token limit are truncated and flagged


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



class EncodeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    texts: list[Text] = Field(min_length=1, max_length=MAX_TEXTS, description=f"1..{MAX_TEXTS} texts")


class EncodeResponse(BaseModel):
    vectors: list[list[float]]
    dim: int
    took_ms: float
    truncated: list[bool] = Field(description="per text: cut to the model's max_length tokens")
    index_version: str = Field(description="the index version whose encoder produced these vectors")


MAX_VECTOR_DIM = 8192
VECTOR_DOC = ("this document's vector, brought instead of encoding its text: it must come from the served "
              "encoder's space (same model, pooling and normalisation: docs/own-corpus.md), of its dimension "
              "(GET /stats), finite and not all zeros; it is L2-normalised as the encoder's are")


class _SearchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: Text | None = None
    vector: list[float] | None = Field(None, min_length=1, max_length=MAX_VECTOR_DIM, description=(
        "a query vector instead of encoding text, from the served encoder's space (its dimension, finite, not all "
        "zeros). Alone: mode dense (the default for it). With 'query' too: mode hybrid, the vector for the "
        "dense side and the text for BM25. Mode lexical takes no vector"))
    queries: list[Text] | None = Field(None, min_length=1, max_length=MAX_TEXTS)
    top_k: StrictInt = Field(10, ge=1, le=MAX_TOP_K)  # strict: "5", 5.0 and true are 422s
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
    snippet: str = Field(description="HTML: a window of the passage, the query's terms in <mark>, the rest escaped")


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


class SwapRefusal(BaseModel):
    version: str | None
    kind: str = Field(description="corrupt (a file fails its checksum or does not load; the file is named) | "
                      "mismatch | quality | shrink (STRATA_MAX_SHRINK) | probe | missing | writes | error")
    reason: str
    at: datetime


class ChainStage(BaseModel):
    name: str
    started_at: float = Field(description="Unix time")
    finished_at: float | None = None
    seconds: float | None = None
    done: int | None = Field(None, description="the stage's last progress count, of `total` `unit`")
    total: int | None = None
    unit: str | None = None


class ChainSwap(BaseModel):
    outcome: Literal["pending", "swapped", "refused"]
    version: str = Field(description="the version the chain built")
    at: datetime | None = Field(None, description="when the API swapped to it, or refused it")
    reason: str | None = Field(None, description="why it was refused (the served version keeps answering)")


class TrainingProgress(BaseModel):
    """A background in-domain training (`python -m service demo --train`), read from its status file."""

    stage: str = Field(description="base | mine | train | export (`encoder adapt`), index (the build), swap "
                       "(waiting for the API's swap), then done (see `swap`) or failed")
    step: int = Field(0, description="progress of the stage, in `unit` (texts, anchors, steps)")
    total_steps: int = 0
    unit: str | None = None
    eta_s: float | None = Field(None, description="seconds left for the whole remaining chain, up to the swap")
    eta_at: datetime | None = Field(None, description="when the whole chain is expected to end")
    stage_eta_s: float | None = Field(None, description="seconds left in the running stage")
    stage_number: int | None = Field(None, description="1-based, of `stages_total`")
    stages_total: int | None = None
    progress: str | None = Field(None, description="the running job's progress line")
    message: str = ""
    best_dev: float | None = Field(None, description="the training's best Quora dev MRR@10 so far")
    built_version: str | None = None
    swap: ChainSwap | None = Field(None, description="the API's swap to the version the chain built")
    stages: list[ChainStage] = Field(default_factory=list, description="the stages so far, with their times")
    updated_at: float | None = Field(None, description="Unix time of the status file's last update")


DAMAGED_DOC = ("a file of the served version is missing or resized on disk: it keeps answering from the files it "
               "has open, but a restart or swap will refuse it (rebuild, or `indexer rollback`)")


class CollectionReady(BaseModel):
    ready: bool
    index_version: str | None = None
    index_size: int | None = Field(None, description="the served vectors, writes included (a version of passages: "
                                   "its passages)")
    documents: int | None = Field(None, description="the documents served, writes included")
    passages: int | None = Field(None, description="a version built with passages: its passages (absent: documents "
                                 "are indexed whole)")
    reason: str | None = None
    damaged: str | None = Field(None, description=DAMAGED_DOC)
    swap_refused: SwapRefusal | None = None
    compaction: CompactionState | None = None


class EncoderAdaptation(BaseModel):
    """How the served encoder was adapted to a corpus (`encoder adapt --data`), from its `encoder.json`."""

    recipe: str = Field(description="crops | simcse | sgopt")
    adapted: bool = Field(description="false: the gate kept the stock encoder (no checkpoint's gain over it passed)")
    verified: bool = Field(description="false: selected on a label-free proxy only, no dev queries measured it")
    selected_on: str
    served: str | None = Field(None, description="the vector served: mean, or cls (sgopt)")
    gate: str | None = Field(None, description="the gate's rule: significant (a paired 95 % interval of the gain "
                             "above 0) | better (any gain)")
    gain: float | None = Field(None, description="the selected checkpoint's mean gain over stock on `selected_on`")
    gain_ci: list[float] | None = Field(None, description="its paired bootstrap 95 % interval")
    note: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _flatten_gate(cls, data: Any) -> Any:
        """encoder.json keeps the gate's record nested (`gate: {rule, delta, ci, ...}`)."""
        if isinstance(data, dict) and isinstance(data.get("gate"), dict):
            gate = data["gate"]
            data = {**data, "gate": gate.get("rule"), "gain": gate.get("delta"), "gain_ci": gate.get("ci")}
        return data


class ModeFigures(BaseModel):
    """One `/search` mode's figures on the version's evaluation set (the manifest's `eval_modes`)."""

    mrr_at_10: float
    exact_mrr_at_10: float | None = Field(None, description="exact search's (BM25 for lexical: its own)")
    recall_at_10: float | None = None
    ndcg_at_10: float | None = Field(None, description="graded qrels (corpus builds) only")
    avg_retrieval_ms: float | None = Field(None, description="one query at a time, offline")
    n_queries: int | None = None


class ReadyEvaluation(BaseModel):
    """The served version's evaluations: the gate's MRR@10 (measured before it was published) and the report's
    figures by mode, which a build measures after publishing (`indexer.report`) and appear here when done."""

    state: Literal["pending", "running", "done", "failed"] = Field(
        description="the report's: pending/running (the gate's figure only so far), done, failed (see `error`)")
    mrr_at_10: float | None = Field(None, description="dense MRR@10: what the swap gate compares")
    modes: dict[str, ModeFigures] = Field(default_factory=dict, description="the report's figures, by mode")
    started_at: datetime | None = None
    finished_at: datetime | None = None
    seconds: float | None = Field(None, description="the report's time, after publishing")
    error: str | None = None


class Ready(BaseModel):
    ready: bool
    index_version: str | None = None
    index_size: int | None = Field(None, description="the served vectors, writes included (a version of passages: "
                                   "its passages)")
    documents: int | None = Field(None, description="the documents served, writes included")
    passages: int | None = Field(None, description="a version built with passages: its passages (absent: documents "
                                 "are indexed whole)")
    model: str | None = Field(None, description="the served encoder's folder")
    model_name: str | None = Field(None, description="its name (the folder's)")
    model_source: str | None = Field(None, description="what it was exported from (`encoder.json`'s source)")
    pooling: str | None = None
    evaluation: ReadyEvaluation | None = Field(None, description="the served version's figures (none: built "
                                               "with --no-eval)")
    reason: str | None = None
    damaged: str | None = Field(None, description=DAMAGED_DOC)
    swap_refused: SwapRefusal | None = Field(None, description="the latest swap attempt, when it was refused")
    training: TrainingProgress | None = Field(None, description="a background training, when one was started")
    collections: dict[str, CollectionReady] | None = Field(None, description="per collection (with "
                                                           "STRATA_COLLECTIONS_DIR): is it serving, which version")
    adaptation: EncoderAdaptation | None = Field(None, description="the served encoder's corpus adaptation, when "
                                                 "it has one (`verified: false` = unverified)")
    compaction: CompactionState | None = Field(None, description="the default collection's background compaction")


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


# Strict: a string id stays a string ("17") and an integer id an integer (17); 17.0 and true are refused.
DocId = Annotated[StrictInt | StrictStr, AfterValidator(_check_id)]


class WriteDocument(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: DocId = Field(description="a string or a 64-bit integer, kept as given (17 and \"17\" are two documents)")
    text: Text
    metadata: dict[str, Any] = Field(default_factory=dict, description=METADATA_DOC)
    vector: list[float] | None = Field(None, max_length=MAX_VECTOR_DIM, description=VECTOR_DOC)

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
