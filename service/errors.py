"""The one module that turns errors into HTTP responses: the engine's refusals and request validation.

    Overloaded   -> 429 with Retry-After       NotReady, NotServing -> 503
    TimedOut     -> 504                        SwapRefused  -> 409 (a ReloadResponse: the old version serves)
    ShardUnavailable -> 503 (sharded: a shard's replica raised, died or is gone, or did not answer in time: named)
    BadFilter    -> 422 (the filter does not fit the served version's metadata)
    BadVector    -> 422 (a brought vector outside the served encoder's space: dimension, NaN/inf, zeros)
    BadSearchParams -> 422 (a search parameter the served index kind does not take, e.g. nprobe of a flat index)
    ModeUnavailable -> 422 (lexical/hybrid on a version without a lexical index)
    BadConfig    -> 422 (over the collection's own limits, or a collection.json that does not validate: the field)
    WriteRefused, CollectionConflict -> 409    WritesUnsupported -> 501 (a version without an overlay)
    WritesUnavailable -> 503
    BackendUnsupported -> 501 (what the serving backend never does: collections made over HTTP on the sharded one)
    StorageFull -> 507 Insufficient Storage    StorageUnavailable -> 503 (an I/O error, a failed fsync, a read-only
                                               root); both with Retry-After and the reason naming the file
    RequestValidationError -> 422 without the echoed input (400 on /v1/*, as OpenAI answers)
    UnknownModel -> 404 `model_not_found`      DimensionChanged -> 410 `model_dimension_changed` (/v1 only)
    SnapshotNotFound -> 404   SnapshotConflict -> 409 (the name is taken)   SnapshotTooLarge -> 413 (an upload)
    SnapshotError -> 422 (a bad name; an uploaded archive that is damaged, truncated, or whose encoder is not here)
    DocumentNotFound -> 404   BadCursor -> 422 (at body.cursor)
    UnknownCollection -> 404 (no collection of that name, or no default collection for the routes without one)

Every body is JSON with a `detail` that says why (or the ReloadResponse), never a stack trace — except under
`/v1/` (the OpenAI-compatible routes), where every error, from the key check and the body cap to validation and
the engine's refusals, has OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`, which its clients
turn into typed exceptions (`openai.BadRequestError`, `AuthenticationError`, `RateLimitError`, ...).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse as _JSONResponse
from fastapi.utils import is_body_allowed_for_status_code
from starlette.exceptions import HTTPException
from starlette.routing import get_route_path

from indexer.runtime.metadata import json_safe
from service import engine
from service.auth import served_routes
from service.engine.errors import SnapshotTooLarge
from service.lean_route import is_json_body
from service.schemas.admin import ReloadResponse
from service.schemas.openai import OpenAIRequestError


class JSONResponse(_JSONResponse):
    """Every error body of this module: one that echoes what the client sent (a model id, a field, a collection
    name) renders even when that holds what UTF-8 cannot encode (a lone surrogate: "\\ud800" in the request's
    JSON), with U+FFFD in its place, instead of a UnicodeEncodeError and a 500."""

    def render(self, content: Any) -> bytes:  # noqa: ANN401
        try:
            return super().render(content)
        except (UnicodeEncodeError, ValueError, TypeError):
            return super().render(json_safe(content)[0])

OPENAI_PREFIX = "/v1/"
# OpenAI's `code` for the statuses every route may answer (a route's own refusals name theirs)
_OPENAI_CODES = {401: "invalid_api_key", 404: "unknown_url", 413: "request_too_large", 429: "rate_limit_exceeded",
                 503: "not_ready", 504: "timeout"}

# Documented on every route of the OpenAPI schema.
ERROR_RESPONSES: dict[int | str, dict[str, object]] = {
    400: {"description": "the body is not UTF-8 or not parseable"},
    401: {"description": "missing or invalid API key (only when keys are configured)"},
    413: {"description": "request body over the size cap"},
    429: {"description": "too many requests in flight; see Retry-After"},
    503: {"description": "no index loaded"},
    504: {"description": "inference timed out"},
}


def is_openai(path: str) -> bool:
    return path.startswith(OPENAI_PREFIX)


def openai_error(status: int, message: str, *, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error body; `type` as its API sets it for the status."""
    kind = "requests" if status == 429 else "server_error" if status >= 500 else "invalid_request_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": code or _OPENAI_CODES.get(status)}}


def error_body(path: str, status: int, message: str) -> dict[str, Any]:
    """An error's JSON body for `path`: OpenAI's shape under /v1/, `{"detail": message}` elsewhere (also used by
    the ASGI middleware, which answer before any route)."""
    return openai_error(status, message) if is_openai(path) else {"detail": message}


def _error(request: Request, status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(request.url.path, status, message), status_code=status, headers=headers)


def _param(loc: tuple[Any, ...]) -> str | None:
    """A validation error's location as OpenAI names a parameter: `input`, `input[3]` (the tags of a tagged
    union, strings after the field's name, are left out)."""
    fields = loc[1:] if loc and loc[0] in ("body", "query", "path") else loc
    if not fields or not isinstance(fields[0], str):
        return None
    return fields[0] + "".join(f"[{part}]" for part in fields[1:] if isinstance(part, int))


def _openai_validation_error(exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    first = errors[0] if errors else {}
    if first.get("type") == "json_invalid":
        reason = (first.get("ctx") or {}).get("error", "")
        return JSONResponse(openai_error(400, f"could not parse the JSON body: {reason}".rstrip(": ")), 400)
    parts = []
    for e in errors:
        msg = str(e.get("msg")).removeprefix("Value error, ")
        param = _param(tuple(e.get("loc", ())))
        parts.append(f"'{param}': {msg}" if param else f"request body: {msg}")
    return JSONResponse(openai_error(400, "; ".join(parts), param=_param(tuple(first.get("loc", ())))), 400)


async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    """422 with each error's type, location and message, without the echoed `input`: it may hold what JSON
    cannot carry back (NaN, 1e400, lone surrogates), which turned a 422 into a 500 (found by the property-based
    tests). Under /v1/: a 400 in OpenAI's shape naming the first bad parameter, as OpenAI answers."""
    if is_openai(request.url.path):
        return _openai_validation_error(exc)
    errors = [{"type": e.get("type"), "loc": list(e.get("loc", ())), "msg": str(e.get("msg"))}
              for e in exc.errors()]
    if not is_json_body(request):
        for error in errors:
            if error["loc"] == ["body"] and error["type"] == "model_attributes_type":
                error["msg"] = _not_json(request)
    return JSONResponse({"detail": errors}, status_code=422)


def _not_json(request: Request) -> str:
    """Why a JSON object sent without JSON's Content-Type is "not a valid dictionary": FastAPI did not read it as
    JSON (curl's `-d` alone sends application/x-www-form-urlencoded)."""
    sent = request.headers.get("content-type")
    return (f"the body was not read as JSON: its Content-Type is {sent[:80]!r}" if sent else
            "the body was not read as JSON: the request has no Content-Type") + \
        "; send it with 'Content-Type: application/json'"


def _allow(request: Request, exc: HTTPException) -> dict[str, str] | None:
    """A 405's headers with `Allow` naming the methods of every route of the path: Starlette names those of the
    first route that matched the path alone (`GET` for `/collections/{name}/config`, whose `PUT` is another
    route)."""
    if exc.status_code != 405:
        return exc.headers
    path, methods = get_route_path(request.scope), set[str]()
    for _, route in served_routes(request.app):
        if getattr(route, "methods", None) and route.path_regex.match(path):
            methods |= route.methods
    return (exc.headers or {}) | ({"Allow": ", ".join(sorted(methods))} if methods else {})


async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
    """The key check's 401/403 and routing's 404/405: OpenAI's shape under /v1/, FastAPI's elsewhere."""
    exc.headers = _allow(request, exc)
    if not is_openai(request.url.path):
        if not is_body_allowed_for_status_code(exc.status_code):
            return Response(status_code=exc.status_code, headers=exc.headers)  # type: ignore[return-value]
        # FastAPI's own handler, with the response that renders whatever `detail` echoes
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)
    message = str(exc.detail)
    if exc.status_code == 404:
        message = f"Invalid URL ({request.method} {request.url.path})"
    return JSONResponse(openai_error(exc.status_code, message), status_code=exc.status_code, headers=exc.headers)


async def openai_refusal(request: Request, exc: OpenAIRequestError) -> JSONResponse:
    return JSONResponse(openai_error(exc.status, exc.message, param=exc.param, code=exc.code), exc.status)


async def overloaded(request: Request, exc: engine.Overloaded) -> JSONResponse:
    return _error(request, 429, str(exc), headers={"Retry-After": str(exc.retry_after_s)})


async def not_ready(request: Request, exc: engine.NotReady | engine.NotServing) -> JSONResponse:
    return _error(request, 503, str(exc))


async def shard_unavailable(request: Request, exc: engine.ShardUnavailable) -> JSONResponse:
    return _error(request, 503, str(exc))


async def timed_out(request: Request, exc: engine.TimedOut) -> JSONResponse:
    return _error(request, 504, str(exc))


async def bad_filter(request: Request, exc: engine.BadFilter) -> JSONResponse:
    """422 shaped like a request validation error (the OpenAPI schema's), the reason in `msg`."""
    return JSONResponse({"detail": [{"type": "filter", "loc": ["body", "filter"], "msg": str(exc)}]},
                        status_code=422)


async def bad_search_params(request: Request, exc: engine.BadSearchParams) -> JSONResponse:
    """422 shaped like a request validation error, at the parameter the served version's index does not take."""
    return JSONResponse({"detail": [{"type": "search_params", "loc": ["body", exc.name or "nprobe"],
                                     "msg": str(exc)}]}, status_code=422)


async def bad_config(request: Request, exc: engine.BadConfig) -> JSONResponse:
    """422 shaped like a request validation error, at the field over the collection's limits (or, for
    `PUT /collections/{name}/config`, the config's field)."""
    return JSONResponse({"detail": [{"type": "collection_config", "loc": ["body", *exc.loc], "msg": str(exc)}]},
                        status_code=422)


async def bad_vector(request: Request, exc: engine.BadVector) -> JSONResponse:
    """422 shaped like a request validation error, at the vector (for a write: the document's)."""
    return JSONResponse({"detail": [{"type": "vector", "loc": ["body", *exc.loc], "msg": str(exc)}]},
                        status_code=422)


async def mode_unavailable(request: Request, exc: engine.ModeUnavailable) -> JSONResponse:
    return JSONResponse({"detail": [{"type": "mode", "loc": ["body", "mode"], "msg": str(exc)}]}, status_code=422)


async def swap_refused(request: Request, exc: engine.SwapRefused) -> JSONResponse:
    body = ReloadResponse(outcome="refused", index_version=exc.served, candidate=exc.candidate, reason=exc.reason)
    return JSONResponse(body.model_dump(), status_code=409)


async def write_refused(request: Request, exc: engine.WriteRefused | engine.CollectionConflict) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=409)


async def writes_unsupported(request: Request, exc: engine.WritesUnsupported | engine.BackendUnsupported
                             ) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=501)


async def writes_unavailable(request: Request, exc: engine.WritesUnavailable) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=503)


async def storage_full(request: Request, exc: engine.StorageFull) -> JSONResponse:
    """507 Insufficient Storage (RFC 4918): the disk of the index root is full; nothing was written."""
    return _error(request, 507, f"insufficient storage: {exc}", headers={"Retry-After": str(exc.retry_after_s)})


async def storage_unavailable(request: Request, exc: engine.StorageUnavailable) -> JSONResponse:
    return _error(request, 503, f"storage unavailable: {exc}", headers={"Retry-After": str(exc.retry_after_s)})


async def snapshot_error(request: Request, exc: engine.SnapshotError) -> JSONResponse:
    status = (404 if isinstance(exc, engine.SnapshotNotFound) else 409 if isinstance(exc, engine.SnapshotConflict)
              else 413 if isinstance(exc, SnapshotTooLarge) else 422)
    return _error(request, status, str(exc))


async def document_not_found(request: Request, exc: engine.DocumentNotFound) -> JSONResponse:
    return _error(request, 404, str(exc))


async def bad_cursor(request: Request, exc: engine.BadCursor) -> JSONResponse:
    """422 shaped like a request validation error, at the cursor."""
    return JSONResponse({"detail": [{"type": "cursor", "loc": ["body", "cursor"], "msg": str(exc)}]},
                        status_code=422)


async def unknown_collection(request: Request, exc: engine.UnknownCollection) -> JSONResponse:
    return _error(request, 404, str(exc))


async def unknown_model(request: Request, exc: engine.UnknownModel) -> JSONResponse:
    return JSONResponse(openai_error(404, str(exc), param="model", code="model_not_found"), 404)


async def dimension_changed(request: Request, exc: engine.DimensionChanged) -> JSONResponse:
    """410 Gone: what the name served is gone for good (vectors of its dimension); the message names the new id."""
    return JSONResponse(openai_error(410, str(exc), param="model", code="model_dimension_changed"), 410)


# Each error the app answers, and its handler (an exception's subclasses take its handler).
_HANDLERS: dict[type[Exception], Callable[[Request, Any], Awaitable[Response]]] = {
    RequestValidationError: validation_error, HTTPException: http_error, OpenAIRequestError: openai_refusal,
    engine.Overloaded: overloaded, engine.NotReady: not_ready, engine.NotServing: not_ready,
    engine.TimedOut: timed_out, engine.SwapRefused: swap_refused, engine.ShardUnavailable: shard_unavailable,
    engine.BadFilter: bad_filter, engine.BadVector: bad_vector, engine.BadSearchParams: bad_search_params,
    engine.BadConfig: bad_config, engine.ModeUnavailable: mode_unavailable, engine.BadCursor: bad_cursor,
    engine.WriteRefused: write_refused, engine.CollectionConflict: write_refused,
    engine.WritesUnsupported: writes_unsupported, engine.BackendUnsupported: writes_unsupported,
    engine.WritesUnavailable: writes_unavailable,
    engine.StorageFull: storage_full, engine.StorageUnavailable: storage_unavailable,
    engine.SnapshotError: snapshot_error, engine.DocumentNotFound: document_not_found,
    engine.UnknownCollection: unknown_collection,
    engine.UnknownModel: unknown_model, engine.DimensionChanged: dimension_changed,
}


def install_error_handlers(app: FastAPI) -> None:
    for exc, handler in _HANDLERS.items():
        app.add_exception_handler(exc, handler)  # type: ignore[arg-type]
