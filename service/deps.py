"""FastAPI dependencies: what a route may ask for, each typed narrowly for its signature.

All `async def`: FastAPI runs a plain `def` dependency in its thread pool, a thread hop per dependency per
request for what is an attribute read."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from service.auth import Authorizer
from service.engine import Engine
from service.metrics import Metrics
from service.settings import Settings
from service.stats import LiveStats


async def get_engine(request: Request) -> Engine:
    return request.app.state.engine


async def get_metrics(request: Request) -> Metrics:
    return request.app.state.metrics


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_stats(request: Request) -> LiveStats:
    return request.app.state.stats


async def get_authorizer(request: Request) -> Authorizer:
    return request.app.state.authorizer


EngineDep = Annotated[Engine, Depends(get_engine)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
StatsDep = Annotated[LiveStats, Depends(get_stats)]
AuthorizerDep = Annotated[Authorizer, Depends(get_authorizer)]
