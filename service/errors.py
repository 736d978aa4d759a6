"""The one module that turns errors into HTTP responses: the engine's refusals and request validation.

    Overloaded   -> 429 with Retry-After       NotReady     -> 503
    TimedOut     -> 504                        SwapRefused  -> 409 (a ReloadResponse: the old version serves)
    WriteRefused -> 409                        WritesUnsupported -> 501      WritesUnavailable -> 503
    RequestValidationError -> 422 without the echoed input

Every body is JSON with a `detail` that says why (or the ReloadResponse), never a stack trace.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from service.engine import (
    NotReady,
    Overloaded,
    SwapRefused,
    TimedOut,
    WriteRefused,
    WritesUnavailable,
    WritesUnsupported,
)
from service.schemas import ReloadResponse

# Documented on every route of the OpenAPI schema.
ERROR_RESPONSES: dict[int | str, dict[str, object]] = {
    400: {"description": "the body is not UTF-8 or not parseable"},
    401: {"description": "missing or invalid API key (only when keys are configured)"},
    413: {"description": "request body over the size cap"},
    429: {"description": "too many requests in flight; see Retry-After"},
    503: {"description": "no index loaded"},
    504: {"description": "inference timed out"},
}


async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    """422 with each error's type, location and message, without the echoed `input`: it may hold what JSON
    cannot carry back (NaN, 1e400, lone surrogates), which turned a 422 into a 500 (found by the property-based
    tests)."""
    errors = [{"type": e.get("type"), "loc": list(e.get("loc", ())), "msg": str(e.get("msg"))}
              for e in exc.errors()]
    return JSONResponse({"detail": errors}, status_code=422)


async def overloaded(request: Request, exc: Overloaded) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=429, headers={"Retry-After": str(exc.retry_after_s)})


async def not_ready(request: Request, exc: NotReady) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=503)


async def timed_out(request: Request, exc: TimedOut) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=504)


async def swap_refused(request: Request, exc: SwapRefused) -> JSONResponse:
    body = ReloadResponse(outcome="refused", index_version=exc.served, candidate=exc.candidate, reason=exc.reason)
    return JSONResponse(body.model_dump(), status_code=409)


async def write_refused(request: Request, exc: WriteRefused) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=409)


async def writes_unsupported(request: Request, exc: WritesUnsupported) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=501)


async def writes_unavailable(request: Request, exc: WritesUnavailable) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=503)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(Overloaded, overloaded)  # type: ignore[arg-type]
    app.add_exception_handler(NotReady, not_ready)  # type: ignore[arg-type]
    app.add_exception_handler(TimedOut, timed_out)  # type: ignore[arg-type]
    app.add_exception_handler(SwapRefused, swap_refused)  # type: ignore[arg-type]
    app.add_exception_handler(WriteRefused, write_refused)  # type: ignore[arg-type]
    app.add_exception_handler(WritesUnsupported, writes_unsupported)  # type: ignore[arg-type]
    app.add_exception_handler(WritesUnavailable, writes_unavailable)  # type: ignore[arg-type]
