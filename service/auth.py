"""Optional API keys: `Authorization: Bearer <key>`. No keys configured = open API.

Keys come from `STRATA_API_KEYS` ("key1:admin,key2") and/or `STRATA_API_KEYS_FILE` (lines `KEY [scope,...]`,
`#` comments). Any valid key may call the API; `/admin/*` and the writes (`/documents`, `/documents/*`) also need
the `admin` scope. `public_paths` (by default `/health`, `/ready`, `/metrics`, `/stats`) answer without a key so
probes, scrapers and the search page's chart need no secret. The search page itself (`/` and `/static/…`) holds
no data and always loads without a key: it asks for one and sends it with its calls.
"""

from __future__ import annotations

import hmac
from pathlib import Path
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.settings import Settings

ADMIN = "admin"
ADMIN_PREFIX = "/admin/"
PAGE_PATH = "/"  # the search page (see service.routers.page)
WRITES_PATH = "/documents"


def needs_admin(path: str) -> bool:
    return path.startswith(ADMIN_PREFIX) or path == WRITES_PATH or path.startswith(WRITES_PATH + "/")

bearer = HTTPBearer(auto_error=False, description="API key (only when the server is configured with keys)")


class KeyConfigError(ValueError):
    pass


def _parse(entry: str, sep: str | None, origin: str) -> tuple[str, frozenset[str]]:
    key, _, scopes = entry.strip().partition(sep) if sep else entry.strip().partition(" ")
    key = key.strip()
    if len(key) < 8:
        raise KeyConfigError(f"{origin}: API keys must be at least 8 characters")
    return key, frozenset(s.strip() for s in scopes.replace(" ", ",").split(",") if s.strip())


def load_keys(settings: Settings) -> dict[str, frozenset[str]]:
    keys: dict[str, frozenset[str]] = {}
    if settings.api_keys:
        for entry in settings.api_keys.split(","):
            if entry.strip():
                key, scopes = _parse(entry, ":", "STRATA_API_KEYS")
                keys[key] = scopes
    if settings.api_keys_file:
        path = Path(settings.api_keys_file)
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip() and not line.lstrip().startswith("#"):
                key, scopes = _parse(line, None, f"{path}:{n}")
                keys[key] = scopes
    return keys


class Authorizer:
    def __init__(self, settings: Settings) -> None:
        self.keys = load_keys(settings)
        self.public = set(settings.public_paths) | {PAGE_PATH}

    @property
    def enabled(self) -> bool:
        return bool(self.keys)

    def scopes(self, presented: str) -> frozenset[str] | None:
        found = None
        for key, scopes in self.keys.items():  # compare every key in constant time; few keys, no early exit
            if hmac.compare_digest(key.encode(), presented.encode()):
                found = scopes
        return found

    def check(self, path: str, credentials: HTTPAuthorizationCredentials | None) -> None:
        if not self.keys or path in self.public:
            return
        challenge = {"WWW-Authenticate": "Bearer"}
        if credentials is None:
            raise HTTPException(401, detail="missing API key: send 'Authorization: Bearer <key>'",
                                headers=challenge)
        scopes = self.scopes(credentials.credentials)
        if scopes is None:
            raise HTTPException(401, detail="invalid API key", headers=challenge)
        if needs_admin(path) and ADMIN not in scopes:
            raise HTTPException(403, detail="this API key lacks the 'admin' scope needed for /admin/* and "
                                "/documents (writes)")


async def authorize(request: Request,
              credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> None:
    """App-wide dependency: every route checks the key (public paths and an open API pass)."""
    authorizer: Authorizer = request.app.state.authorizer
    authorizer.check(request.url.path, credentials)
