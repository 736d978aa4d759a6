"""FastAPI dependencies: what a route may ask for, each typed narrowly for its signature.

All `async def`: FastAPI runs a plain `def` dependency in its thread pool, a thread hop per dependency per
request for what is an attribute read."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from service.auth import Authorizer
from service.engine import Collection
from service.engine.metrics import Metrics
from service.engine.registry import Collections
from service.settings import Settings
from service.stats import LiveStats


async def get_default_collection(request: Request) -> Collection:
    """The default collection (routes without /collections/NAME); UnknownCollection (404) when there is
    none."""
    return request.app.state.collections.default()


async def get_collections(request: Request) -> Collections:
    return request.app.state.collections


def collection_stats(request: Request, name: str) -> LiveStats:
    """The live /search windows of one collection, started on its first search."""
    per: dict[str, LiveStats] = request.app.state.collection_stats
    if name not in per:
        per[name] = LiveStats()
    return per[name]


async def get_metrics(request: Request) -> Metrics:
    return request.app.state.metrics


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_stats(request: Request) -> LiveStats:
    return request.app.state.stats


async def get_authorizer(request: Request) -> Authorizer:
    return request.app.state.authorizer


DefaultCollectionDep = Annotated[Collection, Depends(get_default_collection)]
CollectionsDep = Annotated[Collections, Depends(get_collections)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
StatsDep = Annotated[LiveStats, Depends(get_stats)]
AuthorizerDep = Annotated[Authorizer, Depends(get_authorizer)]
