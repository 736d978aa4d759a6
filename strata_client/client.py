"""The synchronous client (httpx.Client): one connection pool, reused by every call; close it or use `with`."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any

import httpx

from strata_client import _calls
from strata_client._base import DEFAULT_TIMEOUT_S, Attempts, Base
from strata_client.errors import APIError, TransportError
from strata_client.retry import RetryPolicy
from strata_client.types import (
    CollectionInfo,
    DeleteResult,
    DocId,
    Document,
    Embeddings,
    Found,
    Fusion,
    Mode,
    Readiness,
    ReloadResult,
    ScrollPage,
    SearchResult,
    Stats,
    StoredDocument,
    UpsertResult,
)


class Client(Base):
    """A Strata server's API: search, encode, writes, readiness, stats and collections.

    >>> with Client("http://127.0.0.1:8000") as strata:
    ...     for hit in strata.search("How do I learn Python?", top_k=3):
    ...         print(hit.id, round(hit.score, 3), hit.text)
    """

    def __init__(self, url: str, api_key: str | None = None, collection: str | None = None, *,
                 timeout: float = DEFAULT_TIMEOUT_S, retry: RetryPolicy | None = None,
                 http: httpx.Client | None = None) -> None:
        super().__init__(url, api_key, collection, timeout=timeout, retry=retry)
        self._owns_http = http is None
        self._http = http or httpx.Client(**self._http_options())

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def with_collection(self, name: str) -> Client:
        """A client for collection `name` sharing this one's connections, key and settings (close this one)."""
        return Client(self.url, self.api_key, name, timeout=self.timeout, retry=self.retry, http=self._http)

    def _send(self, call: _calls.Call) -> Any:
        tries = Attempts(self, call)
        while True:
            try:
                delay = tries.answered(self._http.request(**tries.request()))
            except httpx.TransportError as exc:
                delay = tries.failed(exc)
            if delay is None:
                return tries.answer
            time.sleep(delay)

    def _send_all(self, calls: list[_calls.Call]) -> list[Any]:
        return [self._send(c) for c in calls]

    # -- search and encode -------------------------------------------------------------------------------------------

    def search(self, query: str, *, top_k: int | None = None, filter: dict[str, Any] | None = None,
               mode: Mode | None = None, fusion: Fusion | None = None, k: float | None = None,
               alpha: float | None = None, nprobe: int | None = None, ef_search: int | None = None,
               passages: bool | None = None, snippets: bool | None = None) -> SearchResult:
        """The `top_k` (1..100; None: the server's default, 10 or the collection's `max_top_k` when lower) best
        documents for `query`, among those whose metadata match `filter`
        (docs/search.md#filtered-search), by `mode` (default: the served version's); hybrid fuses by `fusion`
        (convex with the dense weight `alpha`, or rrf with rank constant `k`). On a version built with passages
        each hit carries its `passage` (offsets, `snippet`); `passages=True` returns the passages themselves,
        `snippets=False` leaves the snippets empty (their cost saved)."""
        if not isinstance(query, str):
            raise TypeError("search takes one query string; search_many takes several")
        texts, calls = _calls.search_calls(self.collection, query, top_k=top_k, filter=filter, mode=mode,
                                           fusion=fusion, k=k, alpha=alpha, nprobe=nprobe, ef_search=ef_search,
                                           passages=passages, snippets=snippets)
        return self._search(texts, self._send_all(calls))[0]

    def search_many(self, queries: Iterable[str], *, top_k: int | None = None, filter: dict[str, Any] | None = None,
                    mode: Mode | None = None, fusion: Fusion | None = None, k: float | None = None,
                    alpha: float | None = None, nprobe: int | None = None,
                    ef_search: int | None = None, passages: bool | None = None, snippets: bool | None = None
                    ) -> list[SearchResult]:
        """`search` for several queries, in order (sent 64 per request)."""
        texts, calls = _calls.search_calls(self.collection, list(queries), top_k=top_k, filter=filter, mode=mode,
                                           fusion=fusion, k=k, alpha=alpha, nprobe=nprobe, ef_search=ef_search,
                                           passages=passages, snippets=snippets)
        return self._search(texts, self._send_all(calls))

    def encode(self, texts: str | Iterable[str]) -> Embeddings:
        """L2-normalised vectors of `texts` by the collection's encoder (the vectors its index holds)."""
        wanted = self._texts(texts)  # type: ignore[arg-type]
        if self.collection is None:
            return self._encoded(self._send_all(_calls.encode_calls(wanted)))
        info = self.collection_info()
        if info.model is None:
            raise APIError(503, f"collection {info.name!r} serves no encoder yet: {info.reason}", method="GET",
                           url=f"{self.url}/collections/{info.name}")
        return self._embedded(self._send_all(_calls.embeddings_calls(wanted, info.model)), info.version or "")

    # -- writes ------------------------------------------------------------------------------------------------------

    def upsert(self, documents: Iterable[Document | dict[str, Any] | tuple[Any, ...]], *,
               batch_size: int = _calls.MAX_WRITE_DOCS) -> UpsertResult:
        """Add or replace documents by id (encoded by the server). Durable and searchable when it returns; more
        than `batch_size` documents go in several requests, each durable on its own."""
        return self._upserted(self._send_all(_calls.upsert_calls(self.collection, documents, batch_size)))

    def delete(self, ids: Iterable[DocId], *, batch_size: int = _calls.MAX_DELETE_IDS) -> DeleteResult:
        """Delete documents by id; durable and applied when it returns."""
        return self._deleted(self._send_all(_calls.delete_calls(self.collection, ids, batch_size)))

    # -- reading documents back --------------------------------------------------------------------------------------

    def get(self, id: DocId, *, with_vector: bool = False) -> StoredDocument | None:
        """The document with this id as the collection serves it now (a write is read back as soon as it is
        acknowledged); None when no document has it (never written, or deleted). `with_vector`: its vector too."""
        if not isinstance(id, str | int) or isinstance(id, bool):
            raise TypeError("get takes one id (a string or an integer); get_many takes several")
        found = self.get_many([id], with_vector=with_vector)
        return found.documents[0] if found.documents else None

    def get_many(self, ids: Iterable[DocId], *, with_vector: bool = False) -> Found:
        """The documents with these ids, in their order, and the ids no document has (sent 1,000 per request)."""
        return self._found(self._send_all(_calls.get_calls(self.collection, ids, with_vector)))

    def count(self, filter: dict[str, Any] | None = None) -> int:
        """The documents served, those whose metadata match `filter` when given (the language of search)."""
        return int(self._send(_calls.count_call(self.collection, filter))["count"])

    def scroll(self, *, limit: int = 100, cursor: str | None = None, filter: dict[str, Any] | None = None,
               with_vector: bool = False) -> ScrollPage:
        """One page (1..1,000 documents) of the collection in id order, after `cursor` (the previous page's
        `next_cursor`; None: from the start); pages visit every document live throughout exactly once."""
        return self._page(self._send(_calls.scroll_call(self.collection, limit, cursor, filter, with_vector)))

    def iter_documents(self, *, filter: dict[str, Any] | None = None, batch_size: int = 256,
                       with_vector: bool = False) -> Iterator[StoredDocument]:
        """Every document (matching `filter`), scrolled `batch_size` at a time."""
        cursor = None
        while True:
            page = self.scroll(limit=batch_size, cursor=cursor, filter=filter, with_vector=with_vector)
            yield from page.documents
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    # -- operations --------------------------------------------------------------------------------------------------

    def health(self) -> bool:
        return self._send(_calls.Call("GET", "/health"))["status"] == "ok"

    def ready(self) -> Readiness:
        """`GET /ready`: ready or not, and why not (not an error: `ready` is false)."""
        return Readiness.from_json(self._send(_calls.ready_call()))

    def wait_ready(self, timeout: float = 60.0, interval: float = 0.5) -> Readiness:
        """Poll /ready until the server serves; TimeoutError (with the last reason) after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                state = self.ready()
            except TransportError as exc:  # not listening yet
                state = Readiness(False, f"unreachable: {exc}", None, None, None, {}, {})
            if state.ready:
                return state
            if time.monotonic() + interval > deadline:
                raise TimeoutError(f"{self.url} not ready after {timeout} s: {state.reason}")
            time.sleep(interval)

    def stats(self) -> Stats:
        return Stats.from_json(self._send(_calls.Call("GET", "/stats")))

    def collections(self) -> list[CollectionInfo]:
        """The collections served that this key may read."""
        return self._collections(self._send(_calls.Call("GET", "/collections")))

    def collection_info(self, name: str | None = None) -> CollectionInfo:
        """One collection (this client's when `name` is None)."""
        return CollectionInfo.from_json(self._send(_calls.Call("GET", _calls.route(self._collection_name(name), ""))))

    def create_collection(self, name: str, *, encoder: str | None = None,
                          settings: dict[str, Any] | None = None) -> CollectionInfo:
        """Create an empty collection that takes writes and searches at once (needs `admin` on every collection):
        `encoder` names an exported encoder the server knows (None: its default), `settings` its collection.json
        fields. ConflictError when it exists, ValidationError for an unknown encoder, a bad name or settings."""
        return CollectionInfo.from_json(self._send(_calls.create_collection_call(name, encoder, settings)))

    def delete_collection(self, name: str) -> None:
        """Delete a collection durably (needs `admin` on it); NotFoundError when there is none."""
        self._send(_calls.delete_collection_call(name))

    def reload(self, *, force: bool = False) -> ReloadResult:
        """Swap to what the index root's `current` points to (needs `admin`); a refused swap is a ConflictError
        whose reason says why (the served version keeps serving)."""
        return self._reloaded(self._send(_calls.reload_call(self.collection, force)))
