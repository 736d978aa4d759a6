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
the search page's chart need no secret; a route that needs `admin` at such a path still needs its key. The search
page itself (`/` and `/static/…`) holds no data and always loads without a key: it asks for one and sends it with
its calls.

Each route declares what it needs, as one of the dependencies below in its `dependencies=[...]`: `PUBLIC` (never a
key: the page), `ANY_KEY` (any valid key; the route itself filters by the key's grants: `GET /collections`, `/v1/*`;
and the operations routes, which the default `public_paths` open), `READ_DEFAULT`/`ADMIN_DEFAULT` (that scope on
the default collection) and `READ_NAMED`/`ADMIN_NAMED` (that scope on the collection of the path's `{name}`);
`WRITE_DEFAULT`/`WRITE_NAMED` are the admin scope for writes of documents; `ADMIN_ALL` is admin on every
collection (a key without `@`): creating a collection. A collection-scoped router (served at
the default collection's paths and under `/collections/{name}`) names the pair once, in its own dependencies:
`READ_COLLECTION`, `ADMIN_COLLECTION`, `WRITE_COLLECTION`.

A collection's own `access` (its `collection.json`, `indexer.runtime.collection_config`) narrows what the grants
allow there, never widens it: the scope reading needs, writes refused to every key, the only keys (by fingerprint)
that may use it (`Authorizer.narrowed`; 403 with the reason).
`check_routes` refuses an app with a route that declares none, or more than one (`create_app` and the lifespan call
it): a route added without a declaration fails closed, at startup. The dependency leaves the key's `Grants` on
`request.state.grants` for the routes that list or choose collections. An open API leaves `None` there: everything
is allowed.
"""

from __future__ import annotations

import hmac
import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi import Path as PathParam
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.routing import BaseRoute, Mount, Route

from indexer.runtime.collection_config import Access, fingerprint
from service.engine import NAME_PATTERN
from service.settings import Settings

READ, ADMIN = "read", "admin"
PAGE_PATH = "/"  # the search page (see service.routers.page)
NAME_PARAM = "name"  # the path parameter naming the collection of a `*_NAMED` route
ALL_COLLECTIONS = "*"  # what an `ADMIN_ALL` route acts on: no collection's grant alone allows it
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
log = logging.getLogger(__name__)


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


_COMMENT = re.compile(r"\s#.*$")  # a keys file's comment after a line's key and scopes
_SCOPE = re.compile(r"(read|admin)(@[a-z0-9][a-z0-9_-]{0,63})?")  # what a grant looks like, never a key


def _parse(entry: str, sep: str | None, origin: str) -> tuple[str, list[str]]:
    key, _, scopes = entry.strip().partition(sep) if sep else entry.strip().partition(" ")
    key = key.strip()
    if _SCOPE.fullmatch(key):
        # `KEY:admin@faq,read@notes` in STRATA_API_KEYS (the keys file's syntax): `read@notes` would be a key of its
        # own, one anybody could guess, reading every collection
        raise KeyConfigError(f"{origin}: {key!r} is a scope, not an API key: " + (
            f"each grant is an entry of its own (KEY{sep}admin@faq,KEY{sep}read@notes)" if sep
            else "a line is KEY followed by its scopes (KEY admin@faq,read@notes)"))
    if len(key) < 8:
        raise KeyConfigError(f"{origin}: API keys must be at least 8 characters")
    return key, [s.strip() for s in scopes.replace(" ", ",").split(",") if s.strip()]


def _grant(grants: Grants, scopes: list[str], origin: str) -> None:
    if not scopes:  # a key without a scope reads every collection, as before scopes had collections
        grants.everywhere.add(READ)
    # an entry granting on named collections only: a word it holds that is no scope must not widen it to every
    # collection (`read@faq,Admin`; before comments were cut, a comment's words did it too)
    on_collections = any("@" in scope for scope in scopes) and not any(scope in (READ, ADMIN) for scope in scopes)
    for scope in scopes:
        name, at, collection = scope.partition("@")
        if not at:
            if name not in (READ, ADMIN):  # `ADMIN`, `adm`, `admin:read`: said, since the key gets read only
                log.warning("%s: scope %r is not one this server knows (read, admin): %s", origin, name,
                            "it adds nothing to the entry's collection grants" if on_collections
                            else "the key may read only")
                if on_collections:
                    continue
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
        entries = [entry for entry in settings.api_keys.split(",") if entry.strip()]
        for n, entry in enumerate(entries, 1):
            # named by its position: no part of a key is ever written to a log or an error
            origin = f"STRATA_API_KEYS entry {n}"
            key, scopes = _parse(entry, ":", origin)
            _grant(keys.setdefault(key, Grants()), scopes, origin)
    if settings.api_keys_file:
        path = Path(settings.api_keys_file)
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise KeyConfigError(f"STRATA_API_KEYS_FILE {path}: cannot be read "
                                 f"({getattr(exc, 'strerror', None) or exc})") from exc
        for n, line in enumerate(lines, 1):
            line = _COMMENT.sub("", line)  # `KEY read@faq  # the faq team`: the comment is no scope
            if line.strip() and not line.lstrip().startswith("#"):
                key, scopes = _parse(line, None, f"{path}:{n}")
                _grant(keys.setdefault(key, Grants()), scopes, f"{path}:{n}")
    if not keys and (settings.api_keys_file or (settings.api_keys or "").strip()):
        # keys were asked for and none came (a secret not written yet, every line commented out): serving would
        # open the API to anybody, the opposite of what setting them meant
        given = f"STRATA_API_KEYS_FILE {settings.api_keys_file}" if settings.api_keys_file else "STRATA_API_KEYS"
        raise KeyConfigError(f"{given} holds no API key (only blank lines, commas or comments): the API would be "
                             f"open to anybody; add a key, or unset it to serve an open API")
    return keys


class Authorizer:
    def __init__(self, settings: Settings, default_collection: Callable[[], str | None] = lambda: "default",
                 access: Callable[[str], Access | None] = lambda name: None) -> None:
        self.keys = load_keys(settings)
        self.public = set(settings.public_paths) | {PAGE_PATH}
        self.default_collection = default_collection
        self.access = access  # a collection's own narrowing (collection.json `access`), None: none

    def narrowed(self, grants: Grants | None, key: str | None, scope: str, collection: str, *,
                 write: bool = False) -> str | None:
        """Why the collection's own `access` refuses what the key's grants allow (None: it does not). It only ever
        narrows: `write: none` refuses every writer (an open API's too); `read: admin` and `keys` act on keys."""
        access = self.access(collection)
        if access is None:
            return None
        where = f"collection {collection!r}"
        if write and access.write == "none":
            return f"{where} takes no writes (its collection.json sets access.write: none)"
        if grants is None or key is None:  # an open API: no key to narrow
            return None
        if access.keys is not None and fingerprint(key) not in access.keys:
            return f"this API key may not use {where} (not in its collection.json access.keys)"
        if scope == READ and access.read == ADMIN and not grants.may(ADMIN, collection):
            return f"reading {where} needs the 'admin' scope (its collection.json sets access.read: admin)"
        return None

    def may_read(self, request: Request, collection: str) -> bool:
        """Whether the request's key may read `collection`: its grants (`request.state.grants`, left by the route's
        declared scope), narrowed by the collection's access."""
        grants = getattr(request.state, "grants", None)
        if grants is not None and not grants.may(READ, collection):
            return False
        return self.narrowed(grants, getattr(request.state, "key", None), READ, collection) is None

    @property
    def enabled(self) -> bool:
        return bool(self.keys)

    def grants(self, presented: str) -> Grants | None:
        found = None
        for key, grants in self.keys.items():  # compare every key in constant time; few keys, no early exit
            if hmac.compare_digest(key.encode(), presented.encode()):
                found = grants
        return found

    def check(self, path: str, credentials: HTTPAuthorizationCredentials | None,
              aim: tuple[str | None, str] | None, method: str = "") -> Grants | None:
        """The key's grants (None: no keys, or a public path); raises 401/403. `aim`: the collection the route acts
        on and the scope it needs there (None: any valid key); `method` and `path` name the request in a 403."""
        # a public path opens what reads there, never a route that needs `admin` at the same path (listing
        # "/collections" to open GET /collections left POST /collections, creating one, to anybody)
        if not self.keys or (path in self.public and (aim is None or aim[1] != ADMIN)):
            return None
        challenge = {"WWW-Authenticate": "Bearer"}
        if credentials is None:
            raise HTTPException(401, detail="missing API key: send 'Authorization: Bearer <key>'",
                                headers=challenge)
        grants = self.grants(credentials.credentials)
        if grants is None:
            raise HTTPException(401, detail="invalid API key", headers=challenge)
        if aim is not None:
            collection, scope = aim
            if not grants.may(scope, collection):
                raise HTTPException(403, detail=self._denied(grants, scope, collection, f"{method} {path}".strip()))
        return grants

    @staticmethod
    def _denied(grants: Grants, scope: str, collection: str | None, request: str = "") -> str:
        if collection == ALL_COLLECTIONS:
            return (f"this API key may not act on every collection ({ALL_COLLECTIONS!r}): creating a collection "
                    f"needs the 'admin' scope on all collections, and its grants name some only" if grants.restricted
                    else "this API key lacks the 'admin' scope needed to create a collection")
        if scope == ADMIN and grants.may(READ, collection):
            # the request itself, not a list of the admin routes (deleting a collection, its config, snapshots)
            return f"this API key lacks the 'admin' scope needed for {request or 'this request'}" + (
                f" on collection {collection!r}" if grants.restricted and collection else "")
        return f"this API key may not use collection {collection!r}" if collection else \
            "this API key may not use the default collection (none is set)"


@dataclass(frozen=True)
class Requires:
    """A route's declared scope, and the dependency that enforces it (`check_routes` looks for it on every route).

    `scope`: "public" (no key, whatever the keys), "key" (any valid key), READ or ADMIN; `on` (READ and ADMIN
    only): the collection the route acts on, the default one or the path's `{name}`."""

    scope: Literal["public", "key", "read", "admin"]
    on: Literal["default", "named", "all"] | None = None
    write: bool = False  # a write of documents (the collection's access.write applies)

    async def __call__(self, request: Request,
                       credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> None:
        if self.scope == "public":
            request.state.grants = None
            return
        authorizer: Authorizer = request.app.state.authorizer
        aim = None
        if self.on == "default":
            aim = authorizer.default_collection(), self.scope
        elif self.on == "named":
            aim = request.path_params[NAME_PARAM], self.scope
        elif self.on == "all":
            aim = ALL_COLLECTIONS, self.scope
        # the URL is built only where keys make the path matter (public paths): a few µs per request otherwise
        path = request.url.path if authorizer.keys else ""
        request.state.grants = grants = authorizer.check(path, credentials, aim, request.method)
        request.state.key = key = credentials.credentials if grants is not None and credentials else None
        if aim is not None and aim[0] not in (None, ALL_COLLECTIONS):
            denied = authorizer.narrowed(grants, key, self.scope, aim[0], write=self.write)
            if denied:
                raise HTTPException(403, detail=denied)


# What a route puts in its `dependencies=[...]`: exactly one of these.
PUBLIC = Depends(Requires("public"))
ANY_KEY = Depends(Requires("key"))
READ_DEFAULT = Depends(Requires(READ, "default"))
ADMIN_DEFAULT = Depends(Requires(ADMIN, "default"))
READ_NAMED = Depends(Requires(READ, "named"))
ADMIN_NAMED = Depends(Requires(ADMIN, "named"))
WRITE_DEFAULT = Depends(Requires(ADMIN, "default", write=True))
WRITE_NAMED = Depends(Requires(ADMIN, "named", write=True))
ADMIN_ALL = Depends(Requires(ADMIN, "all"))  # admin on every collection: creating one


@dataclass(frozen=True)
class CollectionScope:
    """A collection-scoped router's scope (`service.routers.scoped`), in its `dependencies=[...]`: what each of its
    two inclusions declares, `default` at the default collection's paths and `named` under `/collections/{name}`.
    Itself no scope (it checks nothing): a route of such a router served without an inclusion's scope stops the app
    at startup like any route without one."""

    default: Any
    named: Any

    async def __call__(self) -> None:
        return None


READ_COLLECTION = Depends(CollectionScope(READ_DEFAULT, READ_NAMED))
ADMIN_COLLECTION = Depends(CollectionScope(ADMIN_DEFAULT, ADMIN_NAMED))
WRITE_COLLECTION = Depends(CollectionScope(WRITE_DEFAULT, WRITE_NAMED))


async def collection_name(name: Annotated[str, PathParam(description=f"a collection's name (its folder's: "
                                                                      f"{NAME_PATTERN})")]) -> str:
    """Declares the path's `{name}` for the routes included under `/collections/{name}` (their handlers take the
    collection from `service.deps`, not the name). No `pattern`: a name that cannot be a collection's is answered
    like an unknown one (404, saying why)."""
    return name


NAMED_PATH = Depends(collection_name)


class RouteScopeError(RuntimeError):
    """A route that declares no scope, or several: the app refuses to start."""


def declared(dependant: Dependant) -> list[Requires]:
    """The scopes a route declares: its own dependencies, its routers' and the app's, and theirs."""
    found, todo = [], list(dependant.dependencies)
    while todo:
        dep = todo.pop()
        if isinstance(dep.call, Requires):
            found.append(dep.call)
        todo.extend(dep.dependencies)
    return found


def served_routes(app: FastAPI) -> Iterator[tuple[BaseRoute, Any]]:
    """Every route as served: (the route as written, the route with the dependencies and prefix of the routers that
    include it). FastAPI >= 0.160 keeps included routers whole and combines them lazily; in older versions
    `app.routes` holds copies already combined."""
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:  # an older FastAPI
        yield from ((route, route) for route in app.routes)
        return
    for context in iter_route_contexts(app.routes):
        yield context.original_route, context


def check_routes(app: FastAPI) -> None:
    """Raises RouteScopeError unless every route declares exactly one scope. Not routes: FastAPI's own schema and
    docs pages (no data), and mounts (the page's static files)."""
    own = {app.openapi_url, app.docs_url, app.redoc_url, app.swagger_ui_oauth2_redirect_url} - {None}
    bad = []
    for original, route in served_routes(app):
        if isinstance(original, APIRoute):
            scopes = declared(route.dependant)
            where = f"{','.join(sorted(route.methods))} {route.path}"
            if len(scopes) != 1:
                bad.append(f"{where}: declares {len(scopes)} scopes, not one")
            elif scopes[0].on == "named" and f"{{{NAME_PARAM}}}" not in route.path_format:
                bad.append(f"{where}: acts on a named collection but has no {{{NAME_PARAM}}} in its path")
        elif not isinstance(original, Mount) and not (isinstance(original, Route) and original.path in own):
            bad.append(f"{getattr(route, 'path', original)}: not an API route, so it cannot declare a scope")
    if bad:
        raise RouteScopeError("routes without exactly one declared scope (service.auth: add one of PUBLIC, ANY_KEY, "
                              "READ_DEFAULT, ADMIN_DEFAULT, WRITE_DEFAULT, READ_NAMED, ADMIN_NAMED, WRITE_NAMED, "
                              "ADMIN_ALL to its dependencies): "
                              + "; ".join(bad))
