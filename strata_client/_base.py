"""What the sync and the async client share: settings, and turning answers into results."""

from __future__ import annotations

from typing import Any

import httpx

from strata_client import _calls
from strata_client.errors import APIError, TransportError, error_from
from strata_client.retry import RetryPolicy
from strata_client.types import (
    CollectionInfo,
    DeleteResult,
    Embeddings,
    Found,
    ReloadResult,
    ScrollPage,
    SearchResult,
    StoredDocument,
    UpsertResult,
    merge_writes,
    search_results,
)

# above the server's own deadline (STRATA_REQUEST_TIMEOUT_S, 30 s by default): a call the server gives up on
# answers its 504 and reason before the client's read times out
DEFAULT_TIMEOUT_S = 40.0
# what a failed connection attempt raises before a byte of the request is sent: always safe to try again
RETRIED_TRANSPORT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


class Base:
    """`url` the server's base URL; `api_key` sent as `Authorization: Bearer`; `collection` the collection the
    calls act on (None: the server's default collection); `timeout` seconds per request; `retry` when to send a
    refused (429/503) or unconnected request again."""

    def __init__(self, url: str, api_key: str | None = None, collection: str | None = None, *,
                 timeout: float = DEFAULT_TIMEOUT_S, retry: RetryPolicy | None = None) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https://, not {url!r}")
        self.url, self.api_key, self.collection = url.rstrip("/"), api_key, collection
        self.timeout, self.retry = timeout, retry or RetryPolicy()
        # sent with every request, also through an `http` client the caller made (its own headers apply too)
        self._headers = _calls.headers(api_key)

    def __repr__(self) -> str:
        on = f", collection={self.collection!r}" if self.collection else ""
        return f"{type(self).__name__}({self.url!r}{on})"

    def _http_options(self) -> dict[str, Any]:
        return {"base_url": self.url, "timeout": self.timeout}

    # -- answers into results ----------------------------------------------------------------------------------------

    @staticmethod
    def _search(texts: list[str], answers: list[dict[str, Any]]) -> list[SearchResult]:
        out: list[SearchResult] = []
        for part, body in zip(_calls.chunks(texts, _calls.MAX_TEXTS), answers, strict=True):
            out += search_results(part, body)
        return out

    @staticmethod
    def _encoded(answers: list[dict[str, Any]]) -> Embeddings:
        vectors = [v for a in answers for v in a["vectors"]]
        return Embeddings(vectors, int(answers[0]["dim"]), [t for a in answers for t in a["truncated"]],
                          answers[-1]["index_version"], sum(float(a["took_ms"]) for a in answers))

    @staticmethod
    def _embedded(answers: list[dict[str, Any]], version: str) -> Embeddings:
        """/v1/embeddings' answers (a collection's encoder): no truncation flags there, so none are claimed."""
        vectors = [d["embedding"] for a in answers for d in sorted(a["data"], key=lambda d: d["index"])]
        return Embeddings(vectors, len(vectors[0]), [], version, 0.0)

    @staticmethod
    def _upserted(answers: list[dict[str, Any]]) -> UpsertResult:
        return merge_writes(UpsertResult, answers)  # type: ignore[return-value]

    @staticmethod
    def _deleted(answers: list[dict[str, Any]]) -> DeleteResult:
        return merge_writes(DeleteResult, answers)  # type: ignore[return-value]

    @staticmethod
    def _found(answers: list[dict[str, Any]]) -> Found:
        return Found([StoredDocument.from_json(d) for a in answers for d in a["documents"]],
                     [i for a in answers for i in a["not_found"]])

    @staticmethod
    def _page(body: dict[str, Any]) -> ScrollPage:
        return ScrollPage([StoredDocument.from_json(d) for d in body["documents"]], body.get("next_cursor"))

    @staticmethod
    def _collections(body: dict[str, Any]) -> list[CollectionInfo]:
        return [CollectionInfo.from_json(c) for c in body["collections"]]

    @staticmethod
    def _reloaded(body: dict[str, Any]) -> ReloadResult:
        return ReloadResult(body["outcome"], body.get("index_version"), body.get("candidate"))

    @staticmethod
    def _texts(texts: str | list[str]) -> list[str]:
        return [texts] if isinstance(texts, str) else list(texts)

    def _collection_name(self, name: str | None) -> str:
        name = name or self.collection
        if name is None:
            raise ValueError("no collection named (pass one, or make the client with collection=...)")
        return name


class Attempts:
    """One call's tries under its retry policy, what the sync and async clients share (they only send and sleep):
    after each try, `answered` or `failed` gives the seconds to wait before the next one, None when done (the
    answer in `answer`); an error that ends the call is raised."""

    def __init__(self, client: Base, call: _calls.Call) -> None:
        self.call, self.headers = call, client._headers
        self.policy = client.retry if call.retry else RetryPolicy(max_attempts=1)
        self.waited, self.attempt, self.answer = 0.0, 0, None

    def request(self) -> dict[str, Any]:
        """The next try's arguments of `httpx.Client.request`."""
        self.attempt += 1
        call = self.call
        return {"method": call.method, "url": call.path, "json": call.json, "params": call.params,
                "headers": self.headers}

    def answered(self, response: httpx.Response) -> float | None:
        """After an answer: the wait before sending again when it refused a call that may be retried (429/503 of the
        policy), else None with the answer kept (or its `APIError` raised)."""
        refused = self._refused(response)
        delay = None if refused is None else self.policy.next_wait(self.attempt, refused.retry_after_s, self.waited)
        if delay is None:
            if response.status_code not in self.call.answers:
                error = error_from(response)
                error.attempts = self.attempt
                raise error
            self.answer = response.json()
        return self._waiting(delay)

    def failed(self, exc: httpx.TransportError) -> float:
        """After a transport error: the wait before sending again when the request was not sent (no connection),
        else `TransportError` (a request sent, or partly, is not known to be safe to send twice)."""
        delay = self.policy.next_wait(self.attempt, None, self.waited) if isinstance(exc, RETRIED_TRANSPORT) else None
        if delay is None:
            raise TransportError(f"{self.call.method} {self.call.path}: {type(exc).__name__}: {exc} (after "
                                 f"{self.attempt} attempt{'s' if self.attempt > 1 else ''})") from exc
        return self._waiting(delay)

    def _refused(self, response: httpx.Response) -> APIError | None:
        """The error to retry on, or None when the answer is final."""
        status = response.status_code
        if self.call.retry and status in self.policy.statuses and status not in self.call.answers:
            return error_from(response)
        return None

    def _waiting(self, delay: float | None) -> float | None:
        self.waited += delay or 0.0
        return delay
