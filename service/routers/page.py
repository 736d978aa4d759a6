"""The search page: `/` and its static files (`/static/…`), plain HTML, CSS and one script — no build step, no
CDN, so it works offline. It holds no data and loads without an API key; it asks for one when the server needs
it and sends it with its own calls (`/search`, `/stats`)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from starlette.routing import Mount
from starlette.types import Receive, Scope, Send

from service.auth import PAGE_PATH, PUBLIC

STATIC_DIR = Path(__file__).resolve().parents[1] / "static"

# Everything comes from this origin: a hit's text can never run as script (the page also only ever sets
# textContent), and the page cannot be framed.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)


@router.get(PAGE_PATH, dependencies=[PUBLIC])
async def page() -> FileResponse:
    return FileResponse(STATIC_DIR / "index.html", media_type="text/html", headers=PAGE_HEADERS)


class NamedStaticFiles(StaticFiles):
    """Names its mount as the request's route, so that the access log and the metrics count `/static/…` under
    one label (`/static`, `/static-docs`) rather than as unmatched paths."""

    mount: Mount | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["route"] = self.mount
        await super().__call__(scope, receive, send)


def mount_static(app: FastAPI) -> None:
    # A mount is not a route: the app-wide key check (a route dependency) does not apply to these files.
    files = NamedStaticFiles(directory=STATIC_DIR)
    files.mount = Mount("/static", app=files, name="static")
    app.router.routes.append(files.mount)
