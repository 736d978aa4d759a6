"""`/docs` (Swagger UI) and `/redoc` served from this process, so that they render without the internet.

FastAPI's own pages load their scripts from a CDN (a blank page offline). The assets come from the
`fastapi-offline` wheel instead (Swagger UI 5, Apache-2.0; ReDoc 2, MIT; their licence notices are in the files
and in that package's metadata), mounted under `DOCS_STATIC`. Like FastAPI's pages, they need no key (they declare
`PUBLIC`: the OpenAPI schema they load is `/openapi.json`, also open), and they are not in the schema."""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Mount

from service.auth import PUBLIC
from service.routers.page import NamedStaticFiles

ASSETS_DIR = Path(fastapi_offline.__file__).resolve().parent / "static"
DOCS_STATIC = "/static-docs"
DOCS_PATH, REDOC_PATH = "/docs", "/redoc"


def mount_docs(app: FastAPI) -> None:
    """Add `/docs`, its OAuth2 redirect and `/redoc` to an app created with `docs_url=None, redoc_url=None`."""
    files = NamedStaticFiles(directory=ASSETS_DIR)
    files.mount = Mount(DOCS_STATIC, app=files, name="static-docs")
    app.router.routes.append(files.mount)
    assert app.openapi_url is not None and app.swagger_ui_oauth2_redirect_url is not None
    openapi_url, redirect_url = app.openapi_url, app.swagger_ui_oauth2_redirect_url

    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(openapi_url=f"{root}{openapi_url}", title=f"{app.title} - Swagger UI",
                                   oauth2_redirect_url=f"{root}{redirect_url}",
                                   swagger_js_url=f"{root}{DOCS_STATIC}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{root}{DOCS_STATIC}/swagger-ui.css",
                                   swagger_favicon_url=f"{root}{DOCS_STATIC}/favicon.png",
                                   swagger_ui_parameters=app.swagger_ui_parameters)

    async def oauth2_redirect(request: Request) -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(openapi_url=f"{root}{openapi_url}", title=f"{app.title} - ReDoc",
                              redoc_js_url=f"{root}{DOCS_STATIC}/redoc.standalone.js",
                              redoc_favicon_url=f"{root}{DOCS_STATIC}/favicon.png", with_google_fonts=False)

    for path, page in ((DOCS_PATH, swagger_ui), (redirect_url, oauth2_redirect), (REDOC_PATH, redoc)):
        app.add_api_route(path, page, methods=["GET"], include_in_schema=False, response_class=HTMLResponse,
                          dependencies=[PUBLIC])
