"""The asynchronous client (httpx.AsyncClient): the same surface as `Client`, every call awaited; close it with
`await client.aclose()` or use `async with`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

import httpx

from strata_client import _calls
from strata_client import types as t
from strata_client._base import DEFAULT_TIMEOUT_S, Attempts, Base
from strata_client.errors import APIError, TransportError
from strata_client.retry import RetryPolicy


class AsyncClient(Base):
    """`Client`'s API, async: `hits = (await strata.search("How do I learn Python?", top_k=3)).hits`."""

    def __init__(self, url: str, api_key: str | None = None, collection: str | None = None, *,
                 timeout: float = DEFAULT_TIMEOUT_S, retry: RetryPolicy | None = None,
                 http: httpx.AsyncClient | None = None) -> None:
        super().__init__(url, api_key, collection, timeout=timeout, retry=retry)
        self._owns_http = http is None
        self._http = http or httpx.AsyncClient(**self._http_options())

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    def with_collection(self, name: str) -> AsyncClient:
        """A client for collection `name` sharing this one's connections, key and settings (close this one)."""
        return AsyncClient(self.url, self.api_key, name, timeout=self.timeout, retry=self.retry, http=self._http)

    async def _send(self, call: _calls.Call) -> Any:
        tries = Attempts(self, call)
        while True:
            try:
                delay = tries.answered(await self._http.request(**tries.request()))
            except httpx.TransportError as exc:
                delay = tries.failed(exc)
            if delay is None:
                return tries.answer
            await asyncio.sleep(delay)

    async def _send_all(self, calls: list[_calls.Call]) -> list[Any]:
        return [await self._send(c) for c in calls]

    # -- search and encode -------------------------------------------------------------------------------------------

    async def search(self, query: str, *, top_k: int | None = None, filter: dict[str, Any] | None = None,
                     mode: t.Mode | None = None, fusion: t.Fusion | None = None, k: float | None = None,
                     alpha: float | None = None, nprobe: int | None = None,
                     ef_search: int | None = None, passages: bool | None = None,
                     snippets: bool | None = None) -> t.SearchResult:
        """`Client.search`, awaited: the `top_k` (1..100) best documents for `query` among those whose metadata match
        `filter`, by `mode`, with its fusion's parameters, the index's search parameters and the passages' options."""
        if not isinstance(query, str):
            raise TypeError("search takes one query string; search_many takes several")
        texts, calls = _calls.search_calls(self.collection, query, top_k=top_k, filter=filter, mode=mode,
                                           fusion=fusion, k=k, alpha=alpha, nprobe=nprobe, ef_search=ef_search,
                                           passages=passages, snippets=snippets)
        return self._search(texts, await self._send_all(calls))[0]

    async def search_many(self, queries: Iterable[str], *, top_k: int | None = None,
                          filter: dict[str, Any] | None = None, mode: t.Mode | None = None,
                          fusion: t.Fusion | None = None, k: float | None = None, alpha: float | None = None,
                          nprobe: int | None = None, ef_search: int | None = None, passages: bool | None = None,
                          snippets: bool | None = None) -> list[t.SearchResult]:
        """`search` for several queries, in order (sent 64 per request)."""
        texts, calls = _calls.search_calls(self.collection, list(queries), top_k=top_k, filter=filter, mode=mode,
                                           fusion=fusion, k=k, alpha=alpha, nprobe=nprobe, ef_search=ef_search,
                                           passages=passages, snippets=snippets)
        return self._search(texts, await self._send_all(calls))

    async def encode(self, texts: str | Iterable[str]) -> t.Embeddings:
        """L2-normalised vectors of `texts` by the collection's encoder (the vectors its index holds)."""
        wanted = self._texts(texts)  # type: ignore[arg-type]
        if self.collection is None:
            return self._encoded(await self._send_all(_calls.encode_calls(wanted)))
        info = await self.collection_info()
        if info.model is None:
            raise APIError(503, f"collection {info.name!r} serves no encoder yet: {info.reason}", method="GET",
                           url=f"{self.url}/collections/{info.name}")
        return self._embedded(await self._send_all(_calls.embeddings_calls(wanted, info.model)), info.version or "")

    # -- writes ------------------------------------------------------------------------------------------------------

    async def upsert(self, documents: Iterable[t.Document | dict[str, Any] | tuple[Any, ...]], *,
                     batch_size: int = _calls.MAX_WRITE_DOCS) -> t.UpsertResult:
        """Add or replace documents by id (encoded by the server). Durable and searchable when it returns; more
        than `batch_size` documents go in several requests, each durable on its own."""
        return self._upserted(await self._send_all(_calls.upsert_calls(self.collection, documents, batch_size)))

    async def delete(self, ids: Iterable[t.DocId], *, batch_size: int = _calls.MAX_DELETE_IDS) -> t.DeleteResult:
        """Delete documents by id; durable and applied when it returns."""
        return self._deleted(await self._send_all(_calls.delete_calls(self.collection, ids, batch_size)))

    # -- reading documents back --------------------------------------------------------------------------------------

    async def get(self, id: t.DocId, *, with_vector: bool = False) -> t.StoredDocument | None:
        """The document with this id as the collection serves it now; None when no document has it."""
        if not isinstance(id, str | int) or isinstance(id, bool):
            raise TypeError("get takes one id (a string or an integer); get_many takes several")
        found = await self.get_many([id], with_vector=with_vector)
        return found.documents[0] if found.documents else None

    async def get_many(self, ids: Iterable[t.DocId], *, with_vector: bool = False) -> t.Found:
        """The documents with these ids, in their order, and the ids no document has (sent 1,000 per request)."""
        return self._found(await self._send_all(_calls.get_calls(self.collection, ids, with_vector)))

    async def count(self, filter: dict[str, Any] | None = None) -> int:
        """The documents served, those whose metadata match `filter` when given (the language of search)."""
        return int((await self._send(_calls.count_call(self.collection, filter)))["count"])

    async def scroll(self, *, limit: int = 100, cursor: str | None = None, filter: dict[str, Any] | None = None,
                     with_vector: bool = False) -> t.ScrollPage:
        """One page (1..1,000 documents) of the collection in id order, after `cursor` (None: from the start)."""
        return self._page(await self._send(_calls.scroll_call(self.collection, limit, cursor, filter, with_vector)))

    async def iter_documents(self, *, filter: dict[str, Any] | None = None, batch_size: int = 256,
                             with_vector: bool = False) -> AsyncIterator[t.StoredDocument]:
        """Every document (matching `filter`), scrolled `batch_size` at a time: `async for doc in ...`."""
        cursor = None
        while True:
            page = await self.scroll(limit=batch_size, cursor=cursor, filter=filter, with_vector=with_vector)
            for doc in page.documents:
                yield doc
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    # -- operations --------------------------------------------------------------------------------------------------

    async def health(self) -> bool:
        return (await self._send(_calls.Call("GET", "/health")))["status"] == "ok"

    async def ready(self) -> t.Readiness:
        """`GET /ready`: ready or not, and why not (not an error: `ready` is false)."""
        return t.Readiness.from_json(await self._send(_calls.ready_call()))

    async def wait_ready(self, timeout: float = 60.0, interval: float = 0.5) -> t.Readiness:
        """Poll /ready until the server serves; TimeoutError (with the last reason) after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                state = await self.ready()
            except TransportError as exc:  # not listening yet
                state = t.Readiness(False, f"unreachable: {exc}", None, None, None, {}, {})
            if state.ready:
                return state
            if time.monotonic() + interval > deadline:
                raise TimeoutError(f"{self.url} not ready after {timeout} s: {state.reason}")
            await asyncio.sleep(interval)

    async def stats(self) -> t.Stats:
        return t.Stats.from_json(await self._send(_calls.Call("GET", "/stats")))

    async def collections(self) -> list[t.CollectionInfo]:
        """The collections served that this key may read."""
        return self._collections(await self._send(_calls.Call("GET", "/collections")))

    async def collection_info(self, name: str | None = None) -> t.CollectionInfo:
        """One collection (this client's when `name` is None)."""
        path = _calls.route(self._collection_name(name), "")
        return t.CollectionInfo.from_json(await self._send(_calls.Call("GET", path)))

    async def create_collection(self, name: str, *, encoder: str | None = None,
                                settings: dict[str, Any] | None = None) -> t.CollectionInfo:
        """Create an empty collection (see `Client.create_collection`)."""
        return t.CollectionInfo.from_json(await self._send(_calls.create_collection_call(name, encoder, settings)))

    async def delete_collection(self, name: str) -> None:
        """Delete a collection durably (see `Client.delete_collection`)."""
        await self._send(_calls.delete_collection_call(name))

    async def reload(self, *, force: bool = False) -> t.ReloadResult:
        """Swap to what the index root's `current` points to (needs `admin`); a refused swap is a ConflictError
        whose reason says why (the served version keeps serving)."""
        return self._reloaded(await self._send(_calls.reload_call(self.collection, force)))
