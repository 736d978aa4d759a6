"""What `/ready`, `GET /collections/{name}` and `/stats` say of a collection's background compaction
(`service.engine.compactor`): what is pending, what is running, what was last done, and when it is tried again."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class CompactionPending(BaseModel):
    entries: int = Field(description="write-log entries the served version does not hold yet")
    written_docs: int = Field(description="documents written or replaced since the served version")
    log_bytes: int = Field(description="bytes of those entries")
    deleted_share: float = Field(description="share of the served version's documents deleted or replaced since")
    due: str | None = Field(None, description="the policy's limit passed (null: none: nothing to do)")
    outgrown: bool = Field(False, description="due, and more documents written wait than the served version holds: "
                           "the next compaction starts without waiting for min_interval_s")


class CompactionOutcome(BaseModel):
    outcome: str = Field(description="swapped | unchanged (nothing to fold) | failed | refused (by a swap gate)")
    at: str
    seconds: float = Field(description="the compaction and its swap")
    version: str | None = Field(None, description="the version served after it")
    reason: str | None = Field(None, description="why it failed or was refused")
    index_kind: str | None = None
    trigger: str | None = Field(None, description="why it ran: the policy's limit passed (pending.due then), and "
                                "what started it before min_interval_s if anything")


class CompactionState(BaseModel):
    enabled: bool = Field(description="collection.json compaction.auto (and the server's STRATA_COMPACT_INTERVAL_S)")
    pending: CompactionPending
    running_since: str | None = Field(None, description="when the running compaction started (null: none runs)")
    last: CompactionOutcome | None = None
    failures: int = Field(0, description="failed or refused in a row")
    next_try_at: str | None = Field(None, description="after a failure: not tried again before then")

    @classmethod
    def of(cls, status: dict[str, Any]) -> CompactionState:
        return cls.model_validate(status)
