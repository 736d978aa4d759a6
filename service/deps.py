"""FastAPI dependencies: the lifespan-owned state, typed for route signatures.

All `async def`: FastAPI runs a plain `def` dependency in its thread pool, a thread hop per dependency per
request for what is an attribute read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request

from service.auth import Authorizer
from service.holder import EngineHolder
from service.metrics import Metrics
from service.settings import Settings

if TYPE_CHECKING:
    from service.batching import MicroBatcher
    from service.inference import Inference
    from service.reload import Reloader


@dataclass
class AppState:
    settings: Settings
    authorizer: Authorizer
    metrics: Metrics = field(default_factory=Metrics)
    holder: EngineHolder = field(default_factory=EngineHolder)
    inference: Inference | None = None  # created in the lifespan (it owns a thread pool)
    reloader: Reloader | None = None
    batcher: MicroBatcher | None = None

    @property
    def load_error(self) -> str | None:
        r = self.reloader
        return r.refused.reason if r and r.refused else None


async def get_state(request: Request) -> AppState:
    return request.app.state.strata


async def get_inference(state: Annotated[AppState, Depends(get_state)]) -> Inference:
    assert state.inference is not None  # set before the app accepts requests
    return state.inference


async def get_batcher(state: Annotated[AppState, Depends(get_state)]) -> MicroBatcher:
    assert state.batcher is not None
    return state.batcher


async def get_reloader(state: Annotated[AppState, Depends(get_state)]) -> Reloader:
    assert state.reloader is not None
    return state.reloader


StateDep = Annotated[AppState, Depends(get_state)]
InferenceDep = Annotated["Inference", Depends(get_inference)]
BatcherDep = Annotated["MicroBatcher", Depends(get_batcher)]
ReloaderDep = Annotated["Reloader", Depends(get_reloader)]
