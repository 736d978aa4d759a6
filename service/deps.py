"""FastAPI dependencies: what a route may ask for, each typed narrowly for its signature.

All `async def`: FastAPI runs a plain `def` dependency in its thread pool, a thread hop per dependency per
request for what is an attribute read."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from service.auth import NAME_PARAM, Authorizer
from service.engine import Collection, Collections
from service.engine.metrics import Metrics
from service.settings import Settings
from service.stats import LiveStats


def collection_of(request: Request) -> Collection:
    """The collection a collection-scoped route acts on: the path's `{name}` under `/collections/{name}`, else the
    default collection. UnknownCollection (404, saying why) when there is none of that name, or no default."""
    collections: Collections = request.app.state.collections
    name = request.path_params.get(NAME_PARAM)
    return collections.default() if name is None else collections.get(name)


async def get_collection(request: Request) -> Collection:
    return collection_of(request)


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


CollectionDep = Annotated[Collection, Depends(get_collection)]  # the path's collection, or the default one
CollectionsDep = Annotated[Collections, Depends(get_collections)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
StatsDep = Annotated[LiveStats, Depends(get_stats)]
AuthorizerDep = Annotated[Authorizer, Depends(get_authorizer)]
