"""Writes: `PUT /documents` (upsert) and `POST /documents/delete`. Both answer 200 only once the write is durable
(fsync'd to the root's write log) and visible to `/search`; see `indexer.runtime.writes`. Both are `LeanRoute`s
(`service.lean_route`): a write's large body is parsed off the event loop, so searches are answered meanwhile."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request, Response

from service.auth import WRITE_COLLECTION
from service.deps import collection_of
from service.engine import Document
from service.lean_route import LeanRoute
from service.responses import json_response
from service.schemas.documents import DeleteRequest, DeleteResponse, UpsertRequest, UpsertResponse

# collection-scoped: `/documents…` and `/collections/{name}/documents…` (`service.routers.scoped`)
router = APIRouter(prefix="/documents", tags=["documents"], route_class=LeanRoute, dependencies=[WRITE_COLLECTION])

WRITE_ERRORS: dict[int | str, dict[str, object]] = {
    403: {"description": "the API key lacks the 'admin' scope (only when keys are configured)"},
    409: {"description": "the served version cannot take this write (a string id or metadata for a Quora build)"},
    503: {"description": "no index loaded, or the write log cannot be written (a read-only index root, an I/O error "
                         "or a failed fsync): nothing was written; see Retry-After"},
    507: {"description": "the disk of the index root is full: nothing was written; see Retry-After"},
}


@router.put("", response_model=UpsertResponse, responses=WRITE_ERRORS)
async def upsert(body: UpsertRequest, request: Request) -> Response:
    """Add or replace documents by id. Their texts are encoded with the served encoder, unless a document brings
    its `vector` (of the served encoder's space: its dimension, finite, not all zeros; 422 naming the document
    otherwise, and nothing is written); the 200 comes once the write is in the write log (fsync'd) and
    searchable."""
    t0 = time.perf_counter()
    # a lean route runs no dependency: the collection comes from the same function `service.deps` wraps
    r = await collection_of(request).upsert([Document(d.id, d.text, d.metadata, d.vector) for d in body.documents])
    a = r.applied
    return json_response(UpsertResponse(
        seq=r.seq, index_version=r.version, index_size=r.size, took_ms=round((time.perf_counter() - t0) * 1000, 3),
        upserted=len(body.documents), created=a.created, replaced=a.replaced,
        **({} if r.passages is None else {"passages_written": r.passages.created + r.passages.replaced,
                                         "passages_deleted": r.passages.deleted})).model_dump(exclude_none=True))


@router.post("/delete", response_model=DeleteResponse, responses=WRITE_ERRORS)
async def delete(body: DeleteRequest, request: Request) -> Response:
    """Delete documents by id. Durable and applied before the 200; a deleted id stays deleted in later versions
    (even one rebuilt from source data that holds it) until it is written again."""
    t0 = time.perf_counter()
    r = await collection_of(request).delete(list(body.ids))
    a = r.applied
    return json_response(DeleteResponse(
        seq=r.seq, index_version=r.version, index_size=r.size, took_ms=round((time.perf_counter() - t0) * 1000, 3),
        deleted=a.deleted, missing=a.missing,
        **({} if r.passages is None else {"passages_deleted": r.passages.deleted})).model_dump(exclude_none=True))
