"""`GET /ready`'s body: readiness, the served version's evaluation, the background training's progress, the
collections' states."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from service.schemas.common import SwapRefusal
from service.schemas.compaction import CompactionState


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


class ServedCounts(BaseModel):
    """What /ready says of one served collection: its version and what it holds."""

    ready: bool
    index_version: str | None = None
    index_size: int | None = Field(None, description="the served vectors, writes included (a version of passages: "
                                   "its passages)")
    documents: int | None = Field(None, description="the documents served, writes included")
    passages: int | None = Field(None, description="a version built with passages: its passages (absent: documents "
                                 "are indexed whole)")


class CollectionReady(ServedCounts):
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


class Ready(ServedCounts):
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
