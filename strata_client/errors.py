"""The client's exceptions: one per kind of refusal, each carrying the server's reason.

Every error of the API is a JSON body with `detail` (a string, or for a 422 FastAPI's list of `{loc, msg}`);
`APIError.reason` is that reason as one readable line, and `str(error)` starts with the status and the route."""

from __future__ import annotations

from typing import Any

import httpx


class StrataError(Exception):
    """Base class of everything this package raises."""


class TransportError(StrataError):
    """The server could not be reached, or the connection broke (after the retries; the cause is chained)."""


class APIError(StrataError):
    """An HTTP error answer. `status`, `reason` (the server's `detail`, as one line), `detail` (as sent),
    `request_id` (the server's X-Request-ID: quote it when reading its logs), `retry_after_s` (429s), `attempts`
    (how many times the request was sent: a 429 or 503 raised here outlasted the client's retries)."""

    attempts = 1

    def __init__(self, status: int, reason: str, *, method: str, url: str, detail: Any = None,
                 request_id: str | None = None, retry_after_s: float | None = None) -> None:
        super().__init__(f"{status} on {method} {url}: {reason}")
        self.status, self.reason, self.detail = status, reason, detail
        self.method, self.url, self.request_id, self.retry_after_s = method, url, request_id, retry_after_s


class BadRequestError(APIError):
    """400: the body was not UTF-8 or not JSON."""


class AuthenticationError(APIError):
    """401: no API key, or one the server does not know."""


class PermissionDeniedError(APIError):
    """403: the key lacks the scope (writes and reloads need `admin`) or may not use that collection."""


class NotFoundError(APIError):
    """404: no such collection (the reason names those served) or route."""


class ConflictError(APIError):
    """409: a write the served version cannot take, or a reload refused by its gates."""


class RequestTooLargeError(APIError):
    """413: the body is over the server's STRATA_MAX_BODY_BYTES."""


class ValidationError(APIError):
    """422: the request breaks a limit or a rule (text length, top_k, an unknown filter field...)."""


class RateLimitError(APIError):
    """429: too many requests in flight on the server (retried by the client first)."""


class ServiceUnavailableError(APIError):
    """503: no index loaded yet, or the write log cannot be written (retried by the client first)."""


class GatewayTimeoutError(APIError):
    """504: inference took longer than the server's request timeout."""


class NotImplementedByServer(APIError):
    """501: the server's backend does not take this call (vectors read back on the sharded backend)."""


_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequestError, 401: AuthenticationError, 403: PermissionDeniedError, 404: NotFoundError,
    409: ConflictError, 413: RequestTooLargeError, 422: ValidationError, 429: RateLimitError,
    501: NotImplementedByServer, 503: ServiceUnavailableError, 504: GatewayTimeoutError,
}


def reason_of(detail: Any) -> str:
    """The server's `detail` as one line: a 422's list becomes `body.filter: x: unknown operator 'near' ...; ...`."""
    if isinstance(detail, list):
        parts = []
        for item in detail:
            if isinstance(item, dict):
                loc = ".".join(str(p) for p in item.get("loc", ()))
                parts.append(f"{loc}: {item.get('msg', item)}" if loc else str(item.get("msg", item)))
            else:
                parts.append(str(item))
        return "; ".join(parts)
    return str(detail)


def retry_after(response: httpx.Response) -> float | None:
    """Retry-After in seconds (the delay form; an HTTP date is not sent by Strata and is ignored)."""
    value = response.headers.get("Retry-After")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def error_from(response: httpx.Response) -> APIError:
    """The exception for an error answer, with the reason the server gave."""
    detail: Any = None
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        if "detail" in body:
            detail = body["detail"]
        elif isinstance(body.get("error"), dict):  # OpenAI's shape, under /v1/
            detail = body["error"].get("message")
        elif "reason" in body:  # a refused reload: a ReloadResponse
            detail = body["reason"]
    reason = reason_of(detail) if detail is not None else (response.text.strip()[:500] or response.reason_phrase)
    cls = _BY_STATUS.get(response.status_code, APIError)
    return cls(response.status_code, reason, method=response.request.method, url=str(response.request.url),
               detail=body if detail is None else detail, request_id=response.headers.get("X-Request-ID"),
               retry_after_s=retry_after(response))
