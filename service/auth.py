"""Optional API keys: `Authorization: Bearer <key>`. No keys configured = open API.

Keys come from `STRATA_API_KEYS` ("key1:admin,key2,key3:read@garden") and/or `STRATA_API_KEYS_FILE` (lines
`KEY [grant,...]`, `#` comments). A grant is a scope, optionally restricted to one collection with `@NAME`:
- `read` (what a key without a scope may do): search and encode; `admin`: also writes (`/documents`,
  `/documents/*`) and reloads (`/admin/*`); `admin` implies `read`;
- `SCOPE@NAME` grants SCOPE on collection NAME only; a key may have several entries (`k:read@a,k:admin@b`); a
  key with no grant without `@` may use only its collections: 403 on every route of another one (`/collections/b`,
  `/collections/b/*`, the routes without `/collections/` when b is the default collection, and the `/v1` models of
  b's encoder unless a collection it may read uses that encoder). A key without `@` applies to all collections.

`public_paths` (by default `/health`, `/ready`, `/metrics`, `/stats`) answer without a key so probes, scrapers and
the search page's chart need no secret. The search page itself (`/` and `/static/…`) holds no data and always loads
without a key: it asks for one and sends it with its calls.

The check is app-wide (`authorize`): it finds the collection a path acts on and the scope it needs, and leaves the
key's `Grants` on `request.state.grants` for the routes that list or choose collections (`GET /collections`,
`/v1/*`). An open API leaves `None` there: everything is allowed.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.settings import Settings

READ, ADMIN = "read", "admin"
ADMIN_PREFIX = "/admin/"
PAGE_PATH = "/"  # the search page (see service.routers.page)
WRITES_PATH = "/documents"
COLLECTIONS_PATH = "/collections"
DEFAULT_ROUTES = ("/search", "/encode")  # read routes of the default collection
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


def needs_admin(path: str) -> bool:
    return path.startswith(ADMIN_PREFIX) or path == WRITES_PATH or path.startswith(WRITES_PATH + "/")


bearer = HTTPBearer(auto_error=False, description="API key (only when the server is configured with keys)")


class KeyConfigError(ValueError):
    pass


@dataclass
class Grants:
    """What one key may do: scopes on every collection, and per collection."""

    everywhere: set[str] = field(default_factory=set)
    per_collection: dict[str, set[str]] = field(default_factory=dict)

    def may(self, scope: str, collection: str | None) -> bool:
        scopes = self.everywhere | (self.per_collection.get(collection, set()) if collection else set())
        return scope in scopes or (scope == READ and ADMIN in scopes)

    @property
    def restricted(self) -> bool:
        return not self.everywhere


def _parse(entry: str, sep: str | None, origin: str) -> tuple[str, list[str]]:
    key, _, scopes = entry.strip().partition(sep) if sep else entry.strip().partition(" ")
    key = key.strip()
    if len(key) < 8:
        raise KeyConfigError(f"{origin}: API keys must be at least 8 characters")
    return key, [s.strip() for s in scopes.replace(" ", ",").split(",") if s.strip()]


def _grant(grants: Grants, scopes: list[str], origin: str) -> None:
    if not scopes:  # a key without a scope reads every collection, as before scopes had collections
        grants.everywhere.add(READ)
    for scope in scopes:
        name, at, collection = scope.partition("@")
        if not at:
            # an unrestricted entry always reads (a scope this server does not know adds nothing, as before)
            grants.everywhere |= {READ, name}
            continue
        if name not in (READ, ADMIN):
            raise KeyConfigError(f"{origin}: {scope!r}: a collection grant is read@NAME or admin@NAME")
        if not _NAME.fullmatch(collection):
            raise KeyConfigError(f"{origin}: {scope!r}: {collection!r} is not a collection name "
                                 f"([a-z0-9][a-z0-9_-]{{0,63}})")
        grants.per_collection.setdefault(collection, set()).add(name)


def load_keys(settings: Settings) -> dict[str, Grants]:
    keys: dict[str, Grants] = {}
    if settings.api_keys:
        for entry in settings.api_keys.split(","):
            if entry.strip():
                key, scopes = _parse(entry, ":", "STRATA_API_KEYS")
                _grant(keys.setdefault(key, Grants()), scopes, f"STRATA_API_KEYS entry {entry.strip()[:4]}…")
    if settings.api_keys_file:
        path = Path(settings.api_keys_file)
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip() and not line.lstrip().startswith("#"):
                key, scopes = _parse(line, None, f"{path}:{n}")
                _grant(keys.setdefault(key, Grants()), scopes, f"{path}:{n}")
    return keys


def target(path: str, default: Callable[[], str | None]) -> tuple[str | None, str] | None:
    """The collection a path acts on and the scope it needs; None for a path of no collection (any valid key)."""
    if path.startswith(COLLECTIONS_PATH + "/"):
        name, _, rest = path[len(COLLECTIONS_PATH) + 1:].partition("/")
        rest = "/" + rest
        return name, ADMIN if needs_admin(rest) else READ
    if needs_admin(path):
        return default(), ADMIN
    if path in DEFAULT_ROUTES:
        return default(), READ
    return None


class Authorizer:
    def __init__(self, settings: Settings, default_collection: Callable[[], str | None] = lambda: "default") -> None:
        self.keys = load_keys(settings)
        self.public = set(settings.public_paths) | {PAGE_PATH}
        self.default_collection = default_collection

    @property
    def enabled(self) -> bool:
        return bool(self.keys)

    def grants(self, presented: str) -> Grants | None:
        found = None
        for key, grants in self.keys.items():  # compare every key in constant time; few keys, no early exit
            if hmac.compare_digest(key.encode(), presented.encode()):
                found = grants
        return found

    def check(self, path: str, credentials: HTTPAuthorizationCredentials | None) -> Grants | None:
        """The key's grants (None: no keys, or a public path); raises 401/403."""
        if not self.keys or path in self.public:
            return None
        challenge = {"WWW-Authenticate": "Bearer"}
        if credentials is None:
            raise HTTPException(401, detail="missing API key: send 'Authorization: Bearer <key>'",
                                headers=challenge)
        grants = self.grants(credentials.credentials)
        if grants is None:
            raise HTTPException(401, detail="invalid API key", headers=challenge)
        aim = target(path, self.default_collection)
        if aim is not None:
            collection, scope = aim
            if not grants.may(scope, collection):
                raise HTTPException(403, detail=self._denied(grants, scope, collection))
        return grants

    @staticmethod
    def _denied(grants: Grants, scope: str, collection: str | None) -> str:
        if scope == ADMIN and grants.may(READ, collection):
            return "this API key lacks the 'admin' scope needed for /admin/* and /documents (writes)" + (
                f" on collection {collection!r}" if grants.restricted and collection else "")
        return f"this API key may not use collection {collection!r}" if collection else \
            "this API key may not use the default collection (none is set)"


async def authorize(request: Request,
                    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> None:
    """App-wide dependency: every route checks the key (public paths and an open API pass)."""
    authorizer: Authorizer = request.app.state.authorizer
    request.state.grants = authorizer.check(request.url.path, credentials)
