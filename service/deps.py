"""FastAPI dependencies: the lifespan-owned state, typed for route signatures."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, HTTPException, Request

from service.engine import SearchEngine
from service.metrics import Metrics
from service.settings import Settings


@dataclass
class AppState:
    settings: Settings
    metrics: Metrics = field(default_factory=Metrics)
    engine: SearchEngine | None = None
    load_error: str | None = None


def get_state(request: Request) -> AppState:
    return request.app.state.strata


def get_engine(state: Annotated[AppState, Depends(get_state)]) -> SearchEngine:
    if state.engine is None:
        raise HTTPException(503, detail=f"not ready: {state.load_error or 'loading'}")
    return state.engine


StateDep = Annotated[AppState, Depends(get_state)]
EngineDep = Annotated[SearchEngine, Depends(get_engine)]
