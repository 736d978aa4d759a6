"""Reading documents back: `GET /documents/{id}`, `POST /documents/get`, `/documents/count` and `/documents/scroll`,
on the default collection and under `/collections/{name}`, with a read key. Each answers the collection as it is
served at that moment — its version under the write overlay: a write is read back as soon as it is acknowledged,
a deleted document never is (`service.engine.reading`, `indexer.runtime.reading`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Query
from starlette.convertors import PathConvertor, register_url_convertor

from service.auth import READ_COLLECTION
from service.deps import CollectionDep
from service.engine import (
    StoredDocument,
    count_documents,
    get_document,
    get_documents,
    path_ids,
    scroll_documents,
)
from service.schemas.reading import (
    CountRequest,
    CountResponse,
    DocumentBody,
    GetRequest,
    GetResponse,
    PassageBody,
    ScrollRequest,
    ScrollResponse,
)

# collection-scoped: `/documents/…` and `/collections/{name}/documents/…` (`service.routers.scoped`)
router = APIRouter(prefix="/documents", tags=["documents"], dependencies=[READ_COLLECTION])

READ_ERRORS: dict[int | str, dict[str, object]] = {
    403: {"description": "the API key may not read this collection (only when keys are configured)"},
    404: {"description": "no such collection"},
    422: {"description": "a bad body: the ids, the limit, a cursor this API did not make, a filter that does not "
                         "fit the served version's metadata"},
}


def document_body(doc: StoredDocument) -> DocumentBody:
    passages = None if doc.passages is None else [
        PassageBody(index=p.index, start=p.start, end=p.end, text=p.text,
                    vector=None if p.vector is None else p.vector.tolist()) for p in doc.passages]
    return DocumentBody(id=doc.id, text=doc.text, metadata=doc.metadata, passages=passages,
                        vector=None if doc.vector is None else doc.vector.tolist())


@router.post("/get", response_model=GetResponse, responses=READ_ERRORS)
async def get_many(body: GetRequest, collection: CollectionDep) -> GetResponse:
    """The documents with these ids, in the order asked (an id asked twice, once), and the ids no live document
    has; right after a write, its written state."""
    docs, missing = await get_documents(collection, body.ids, with_vector=body.with_vector)
    return GetResponse(documents=[document_body(d) for d in docs], not_found=missing)


@router.post("/count", response_model=CountResponse, responses=READ_ERRORS)
async def count(collection: CollectionDep, body: Annotated[CountRequest | None, Body()] = None) -> CountResponse:
    """How many live documents the collection serves, those matching the filter when one is given (no body: all of
    them, as Elasticsearch's `_count`)."""
    body = body or CountRequest()
    return CountResponse(count=await count_documents(collection, body.filter))


@router.post("/scroll", response_model=ScrollResponse, responses=READ_ERRORS)
async def scroll(collection: CollectionDep, body: Annotated[ScrollRequest | None, Body()] = None) -> ScrollResponse:
    """A page of the collection in id order after the cursor; paging on with each next_cursor visits every
    document live throughout exactly once, whatever is written meanwhile (no body: the first page at the default
    limit)."""
    body = body or ScrollRequest()
    page = await scroll_documents(collection, body.limit, body.cursor, body.filter, with_vector=body.with_vector)
    return ScrollResponse(documents=[document_body(d) for d in page.documents], next_cursor=page.next_cursor)


class DocIdConvertor(PathConvertor):
    """The rest of the path, whatever it holds: Starlette's `path` (`.*`) stops at a newline, so an id holding one
    (`"x\\ny"`, sent as `x%0Ay`) matched no route, and one ending in one (`"x\\n"`) was read as `"x"`."""

    regex = "(?s:.*)"


register_url_convertor("doc_id", DocIdConvertor())


@router.get("/{doc_id:doc_id}", response_model=DocumentBody,
            responses=READ_ERRORS | {404: {"description": "no live document has the id, or no such collection"}})
async def get_one(doc_id: str, collection: CollectionDep,
                  with_vector: Annotated[bool, Query(description="also the document's vector")] = False
                  ) -> DocumentBody:
    """One document: the path's id names the string id if a document has it, else the integer id it spells."""
    return document_body(await get_document(collection, path_ids(doc_id), with_vector=with_vector))
