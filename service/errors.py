"""Error responses shared by the single-process service and the sharded (Ray Serve) ingress."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse


async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    """422 with each error's type, location and message, without the echoed `input`: it may hold what JSON
    cannot carry back (NaN, 1e400, lone surrogates), which turned a 422 into a 500 (found by the property-based
    tests)."""
    errors = [{"type": e.get("type"), "loc": list(e.get("loc", ())), "msg": str(e.get("msg"))}
              for e in exc.errors()]
    return JSONResponse({"detail": errors}, status_code=422)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, validation_error)  # type: ignore[arg-type]
