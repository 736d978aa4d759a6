"""Collections: `GET|POST /collections`, `GET|DELETE /collections/{name}` and `GET|PUT
/collections/{name}/config`. Each collection's search, writes and reload are the collection-scoped routers'
(`service.routers.scoped`), served under `/collections/{name}` as at the default collection's paths. An unknown
collection is a 404 naming the ones served; so is a name that cannot be a collection's, saying why. Keys restricted
to collections (`service.auth`) see only theirs."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request

from service.auth import ADMIN_ALL, ADMIN_NAMED, ANY_KEY, NAMED_PATH, READ_NAMED
from service.deps import CollectionDep, CollectionsDep
from service.engine import Collection, CollectionConfig, Collections, listed
from service.schemas.collections import CollectionInfo, CollectionList, CreateCollection, DeletedCollection
from service.schemas.common import SwapRefusal
from service.schemas.compaction import CompactionState

SHARDED_501 = {"description": "the sharded backend: it serves one index root, and no collections folder"}

router = APIRouter(prefix="/collections", tags=["collections"],
                   responses={404: {"description": "no collection of that name"}})


def describe(collections: Collections, collection: Collection) -> CollectionInfo:
    s = collection.status()
    r = s.refused
    refused = SwapRefusal(version=r.version, kind=r.kind, reason=r.reason, at=r.at) if r else None
    info = CollectionInfo(name=collection.name, default=collection.name == collections.default_name(), ready=s.ready,
                          reason=s.reason, swap_refused=refused,
                          compaction=CompactionState.of(collection.compactor.report()))
    if not s.ready or s.manifest is None:
        return info
    manifest = s.manifest
    model = next((lm.model for lm in listed(collections) if collection.name in lm.collections), None)
    served = collection.served_model()
    return info.model_copy(update={
        "documents": s.documents, "passages": s.passages, "fields": collection.fields(), "version": s.version,
        "since": s.since,
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


@router.post("", response_model=CollectionInfo, status_code=201, dependencies=[ADMIN_ALL],
             responses={409: {"description": "a collection of that name exists, or the server serves one index root "
                                             "(no STRATA_COLLECTIONS_DIR)"}, 501: SHARDED_501})
async def create_collection(body: CreateCollection, collections: CollectionsDep) -> CollectionInfo:
    """Create a collection (a key with the 'admin' scope on every collection): an empty first version of `encoder`
    with `settings` as its collection.json, durable before the 201 and served at once — it takes writes
    (`PUT /collections/{name}/documents`) and searches (no hits until its first write)."""
    collection = await collections.create(body.name, body.encoder, body.settings)
    return describe(collections, collection)


@router.get("/{name}", response_model=CollectionInfo, dependencies=[NAMED_PATH, READ_NAMED])
async def get_collection(collection: CollectionDep, collections: CollectionsDep) -> CollectionInfo:
    """One collection (403 for a key that may not read it, 404 when there is none of that name)."""
    return describe(collections, collection)


@router.delete("/{name}", response_model=DeletedCollection, dependencies=[NAMED_PATH, ADMIN_NAMED],
               responses={409: {"description": "the server serves one index root (no STRATA_COLLECTIONS_DIR)"},
                          501: SHARDED_501})
async def delete_collection(name: str, collections: CollectionsDep) -> DeletedCollection:
    """Delete a collection (a key with the 'admin' scope on it): no longer served, and removed from the disk
    durably — a crash in the middle leaves the collection whole or nothing of it. One left unserved because its
    collection.json does not validate is deleted too."""
    await collections.remove(name)
    return DeletedCollection(name=name)


@router.get("/{name}/config", response_model=CollectionConfig, tags=["admin"],
            dependencies=[NAMED_PATH, ADMIN_NAMED])
async def get_config(collection: CollectionDep) -> CollectionConfig:
    """This collection's own settings (its `collection.json`; all defaults when it has none): default mode, fusion,
    search parameters, limits and access. A request's own values win over them, and they over the process's settings."""
    return collection.config


@router.put("/{name}/config", response_model=CollectionConfig, tags=["admin"],
            dependencies=[NAMED_PATH, ADMIN_NAMED])
async def put_config(body: CollectionConfig, collection: CollectionDep) -> CollectionConfig:
    """Replace this collection's settings: validated (422 naming the field; also a search knob its served index
    kind does not take, a default mode it cannot run), written atomically to its `collection.json`, and applied
    from the next request, without a restart."""
    await asyncio.to_thread(collection.set_config, body)
    return collection.config
