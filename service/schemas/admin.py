"""`POST /admin/reload`'s answer."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class ReloadResponse(BaseModel):
    outcome: Literal["swapped", "unchanged", "refused"]
    index_version: str | None = Field(description="the version served after this call")
    candidate: str | None = Field(description="what `current` pointed to")
    reason: str | None = None
