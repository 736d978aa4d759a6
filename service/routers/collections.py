"""Collections: `GET /collections`, `GET /collections/{name}`, and each collection's search, writes, reload and
config (`/collections/{name}/search`, `PUT /collections/{name}/documents`,
`POST /collections/{name}/documents/delete`, `POST /collections/{name}/admin/reload`,
`GET|PUT /collections/{name}/config`): the same bodies and answers as the routes without `/collections/{name}`,
which serve the default collection. An unknown collection is a 404 naming the ones served; so is a name that
cannot be a collection's, saying why. Keys restricted to collections (`service.auth`) see only theirs."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Path, Request, Response

from indexer.runtime.collection_config import CollectionConfig
from service.auth import ADMIN_NAMED, ANY_KEY, READ_NAMED, WRITE_NAMED
from service.collection_schemas import CollectionInfo, CollectionList
from service.compaction_schemas import CompactionState
from service.deps import CollectionsDep, collection_stats
from service.engine import Collection
from service.engine.model_catalog import listed
from service.engine.registry import NAME_PATTERN, Collections
from service.lean_route import LeanRoute
from service.routers.admin import FORCE, run_reload
from service.routers.documents import WRITE_ERRORS, run_delete, run_upsert
from service.routers.search import run_search
from service.schemas import (
    DeleteRequest,
    DeleteResponse,
    ReloadResponse,
    SearchRequest,
    SearchResponse,
    SwapRefusal,
    UpsertRequest,
    UpsertResponse,
)

router = APIRouter(prefix="/collections", tags=["collections"],
                   responses={404: {"description": "no collection of that name"}})

# no `pattern` in the schema: a name that cannot be a collection's is answered like an unknown one (404, with why)
Name = Annotated[str, Path(description=f"a collection's name (its folder's: {NAME_PATTERN})")]


def describe(collections: Collections, collection: Collection) -> CollectionInfo:
    s = collection.status()
    r = s.refused
    refused = SwapRefusal(version=r.version, kind=r.kind, reason=r.reason, at=r.at) if r else None
    info = CollectionInfo(name=collection.name, default=collection.name == collections.default_name(), ready=s.ready,
                          reason=s.reason, swap_refused=refused,
                          compaction=CompactionState.of(collection.compactor.status.to_json()))
    if not s.ready or s.manifest is None:
        return info
    manifest = s.manifest
    model = next((lm.model for lm in listed(collections) if collection.name in lm.collections), None)
    served = collection.served_model()
    return info.model_copy(update={
        "documents": s.documents, "passages": s.passages, "version": s.version, "since": s.since,
        "encoder": served.encoder,
        "model": model.name if model else served.name, "dim": served.dim, "pooling": served.pooling,
        "index_kind": manifest.index.kind, "default_mode": manifest.search_mode(),
        "mrr_at_10": manifest.eval.mrr_at_10 if manifest.eval else None,
        "ndcg_at_10": manifest.eval.ndcg_at_10 if manifest.eval else None})


def _may_read(request: Request, name: str) -> bool:
    return request.app.state.authorizer.may_read(request, name)


@router.get("", response_model=CollectionList, dependencies=[ANY_KEY])
async def list_collections(request: Request, collections: CollectionsDep) -> CollectionList:
    """The collections served (those this API key may read), with their size, encoder, index kind, version and
    quality figures."""
    return CollectionList(default=collections.default_name(),
                          collections=[describe(collections, collections.by_name[n]) for n in collections.names()
                                       if _may_read(request, n)])


@router.get("/{name}", response_model=CollectionInfo, dependencies=[READ_NAMED])
async def get_collection(name: Name, collections: CollectionsDep) -> CollectionInfo:
    """One collection (403 for a key that may not read it, 404 when there is none of that name)."""
    return describe(collections, collections.get(name))


async def search(name: Name, body: SearchRequest, request: Request) -> Response:
    """`POST /search` on this collection."""
    collections: Collections = request.app.state.collections
    return await run_search(body, collections.get(name), [request.app.state.stats, collection_stats(request, name)])


router.add_api_route("/{name}/search", search, methods=["POST"], response_model=SearchResponse,
                     response_model_exclude_none=True, dependencies=[READ_NAMED],
                     route_class_override=LeanRoute)  # the hot route: see `service.lean_route`


@router.put("/{name}/documents", response_model=UpsertResponse, responses=WRITE_ERRORS, tags=["documents"],
            dependencies=[WRITE_NAMED])
async def upsert(name: Name, body: UpsertRequest, collections: CollectionsDep) -> UpsertResponse:
    """`PUT /documents` on this collection: logged in its own write log, served by its versions."""
    return await run_upsert(body, collections.get(name))


@router.post("/{name}/documents/delete", response_model=DeleteResponse, responses=WRITE_ERRORS, tags=["documents"],
             dependencies=[WRITE_NAMED])
async def delete(name: Name, body: DeleteRequest, collections: CollectionsDep) -> DeleteResponse:
    """`POST /documents/delete` on this collection."""
    return await run_delete(body, collections.get(name))


@router.post("/{name}/admin/reload", response_model=ReloadResponse, responses={409: {"model": ReloadResponse}},
             dependencies=[ADMIN_NAMED])
async def reload(name: Name, collections: CollectionsDep, force: bool = FORCE) -> ReloadResponse:
    """`POST /admin/reload` on this collection: swap to what its `current` points to, behind its own gates."""
    return await run_reload(collections.get(name), force)


@router.get("/{name}/config", response_model=CollectionConfig, tags=["admin"], dependencies=[ADMIN_NAMED])
async def get_config(name: Name, collections: CollectionsDep) -> CollectionConfig:
    """This collection's own settings (its `collection.json`; all defaults when it has none): default mode, fusion,
    search parameters, limits and access. A request's own values win over them, and they over the process's settings."""
    return collections.get(name).config


@router.put("/{name}/config", response_model=CollectionConfig, tags=["admin"], dependencies=[ADMIN_NAMED])
async def put_config(name: Name, body: CollectionConfig, collections: CollectionsDep) -> CollectionConfig:
    """Replace this collection's settings: validated (422 naming the field; also a search knob its served index
    kind does not take, a default mode it cannot run), written atomically to its `collection.json`, and applied
    from the next request, without a restart."""
    collection = collections.get(name)
    await asyncio.to_thread(collection.set_config, body)
    return collection.config
