"""`LeanRoute`: the hot routes' handler (`/search` and the writes, `PUT /documents`, `POST /documents/delete`, at
both paths) without FastAPI's per-request dependency solving; the same contract, documented the same way.

Why (docs/decisions.md#the-request-path-after-the-peers-comparison): on a `/search` with a 384-float query vector,
FastAPI's request handler (solving the route's dependencies, its scope's and the bearer's, introspecting each one on
every request; `json.loads` then validating the Python objects) cost more CPU than the FAISS search it served. A
`LeanRoute` is an `APIRoute` — its OpenAPI operation, body schema, response model and declared scope are built by
FastAPI as for any route, and `service.auth.check_routes` sees its scope — whose handler does only what such a route
needs, in this order:

1. the scope: the route's one declared `Requires`, called directly with the bearer credentials (FastAPI's 401/403);
2. the body: the raw bytes validated by pydantic-core's JSON parser (`model_validate_json`, in Rust: no Python
   objects for the parse). Anything it refuses is re-read the way FastAPI reads a body (its content-type rule,
   `json.loads`, `model_validate`), so a bad body gets exactly the 422 (or 400) FastAPI gives it, reason included:
   only valid bodies take the fast path, and a body is valid on one path exactly when it is on the other (the same
   model; tests/service/test_lean_route.py checks it on generated bodies). A large body (`OFF_LOOP_BYTES` or more: a
   write's 128 documents with vectors) is validated off the event loop, so that it answers searches meanwhile
   (docs/decisions.md has what a parse on the loop costs them): in the app's body process
   (`service.body_process`, which holds none of this process's GIL), else, and for what that child refuses, on a
   thread below the searches' CPU priority (`write_nice`, as the write lane's encoding: `parse_below`);
3. the endpoint, called with the body model, the request and the path parameters.

It refuses at startup (TypeError) an endpoint that asks for anything else (a dependency, a query parameter, a
second body): those would be skipped silently otherwise.
"""

from __future__ import annotations

import asyncio
import email.message
import inspect
import json
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, get_type_hints

from fastapi import HTTPException, Request, Response
from fastapi.dependencies.utils import get_missing_field_error
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError

from indexer.runtime.priority import lower_thread
from service.auth import CollectionScope, Requires, bearer, collection_name, declared

if TYPE_CHECKING:
    from fastapi._compat import ModelField

    from service.body_process import BodyProcess

Handler = Callable[[Request], Coroutine[Any, Any, Response]]
# Bodies this large are parsed off the event loop: its cost (~4 ms at 0.5 MB unloaded, several times that on busy
# cores) would otherwise delay every request the loop holds; a search's body (~8 KB) is parsed in place, where a
# thread's hand-off would cost more than the parse.
OFF_LOOP_BYTES = 64 * 1024
# One thread parses them, in turn: a parse holds the GIL (pydantic-core's), so parsing several at once would go no
# faster, and each more thread that wants the GIL makes the event loop wait longer for it.
# Its thread runs `_parse_nice[0]` nice levels below the searches' (set by `parse_below` before the first large body).
_parse_nice = [10]


def parse_below(nice: int) -> None:
    """The nice levels the large bodies' parse runs below the searches (the app's `write_nice`); for a thread
    started after this call (the parser's starts with the first large body)."""
    _parse_nice[0] = nice


def _lower_parser() -> None:
    lower_thread(_parse_nice[0])


_PARSER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="body-parse", initializer=_lower_parser)


class LeanRoute(APIRoute):
    """An `APIRoute` for an `async def endpoint(<path params>, body: Model, request: Request) -> Response` with one
    declared scope and nothing else; see the module docstring."""

    def get_route_handler(self) -> Handler:
        route = _effective(self)
        scope = _one_scope(route, included=route is not self)
        body_name, model, path_names = _signature(self.endpoint)
        endpoint, field = self.endpoint, self.body_field
        assert field is not None  # `_signature` found the body model FastAPI made this field of

        async def handler(request: Request) -> Response:
            await scope(request, await bearer(request))
            body = await read_body(request, model, field)
            kwargs = {n: request.path_params[n] for n in path_names}
            return await endpoint(**kwargs, **{body_name: body}, request=request)

        return handler


def _effective(route: APIRoute) -> Any:  # noqa: ANN401 (the route, or FastAPI's view of it as included)
    """The route with the dependencies of the routers that include it: FastAPI >= 0.160 builds an included route's
    handler once per inclusion, the combined view in a context variable (as `APIRoute.get_route_handler` reads it)."""
    try:
        from fastapi.routing import _effective_route_context_var
    except ImportError:  # an older FastAPI: included routes are copies, their dependencies already combined
        return route
    context = _effective_route_context_var.get()
    return context if context is not None and context.original_route is route else route


def _one_scope(route: Any, *, included: bool) -> Requires:  # noqa: ANN401 (an APIRoute or an included view)
    """The route's declared scope; TypeError when it declares another dependency (it would not run) or a number
    of scopes other than one (`check_routes` says the same at startup, in its words). A collection-scoped router's
    route has none until it is included (`service.routers.scoped`): its included views get handlers of their own."""
    # the path's `{name}` declaration (`auth.collection_name`) validates nothing a str path parameter would not;
    # a collection-scoped router's scope (`auth.CollectionScope`) checks nothing: its inclusions declare the scope
    calls = [d.call for d in route.dependant.dependencies]
    others = [c for c in calls if not isinstance(c, (Requires, CollectionScope)) and c is not collection_name]
    scopes = declared(route.dependant)
    if not others and not scopes and not included and any(isinstance(c, CollectionScope) for c in calls):
        return Requires("key")  # never served as such: only its inclusions are, each with its scope
    if others or len(scopes) != 1:
        raise TypeError(f"LeanRoute {route.path}: one declared scope and no other dependency (it runs no others); "
                        f"found scopes {scopes}, other dependencies {others}")
    return scopes[0]


def _signature(endpoint: Callable[..., Any]) -> tuple[str, type[BaseModel], list[str]]:
    """(the body parameter's name, its model, the path parameters' names); TypeError for any other parameter."""
    hints = get_type_hints(endpoint, include_extras=False)
    body: list[tuple[str, type[BaseModel]]] = []
    path: list[str] = []
    for name in inspect.signature(endpoint).parameters:
        kind = hints.get(name)
        if name == "request" and kind is Request:
            continue
        if inspect.isclass(kind) and issubclass(kind, BaseModel):
            body.append((name, kind))
        elif kind is str:
            path.append(name)
        else:
            raise TypeError(f"LeanRoute endpoint {endpoint.__qualname__}: parameter {name!r} ({kind}) is not a body "
                            f"model, a str path parameter or `request: Request`")
    if len(body) != 1:
        raise TypeError(f"LeanRoute endpoint {endpoint.__qualname__}: one body model, not {len(body)}")
    return body[0][0], body[0][1], path


async def read_body(request: Request, model: type[BaseModel], field: ModelField) -> Any:  # noqa: ANN401
    """The request's JSON body as `model` (`field`: FastAPI's body field of it): pydantic-core's parse when it
    passes, else FastAPI's own reading and refusal. A body of `OFF_LOOP_BYTES` or more is parsed in the app's body
    process (or on a thread): the event loop serves other requests meanwhile."""
    raw = await request.body()
    is_json = is_json_body(request)
    if len(raw) < OFF_LOOP_BYTES:
        return validate_body(raw, is_json, model, field)
    process: BodyProcess | None = getattr(request.app.state, "body_process", None)
    if process is not None and is_json and (body := await process.validate(raw, model)) is not None:
        return body
    return await asyncio.get_running_loop().run_in_executor(_PARSER, validate_body, raw, is_json, model, field)


def validate_body(raw: bytes, is_json: bool, model: type[BaseModel], field: ModelField) -> Any:  # noqa: ANN401
    try:
        return model.model_validate_json(raw) if raw and is_json else _fastapi_body(raw, is_json, field)
    except ValidationError:  # refused: said as FastAPI says it (the same 422s, reasons and locations as before)
        return _fastapi_body(raw, is_json, field)


def is_json_body(request: Request) -> bool:
    """Whether FastAPI reads the request's body as JSON (its Content-Type is JSON's)."""
    value = request.headers.get("content-type")
    if not value:
        return False
    if value == "application/json":  # what nearly every client sends: the parse below costs ~20 µs
        return True
    message = email.message.Message()  # FastAPI's rule: application/json or application/*+json, parameters ignored
    message["content-type"] = value
    sub = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (sub == "json" or sub.endswith("+json"))


def _fastapi_body(raw: bytes, is_json: bool, field: ModelField) -> Any:  # noqa: ANN401
    """FastAPI's reading of a body (fastapi.routing.get_request_handler, strict content type): an empty body is a
    missing one, a body not typed JSON is validated as bytes, JSON that does not parse is a 422 `json_invalid` at
    its position, one that cannot be decoded at all a 400."""
    if not raw:
        raise RequestValidationError([get_missing_field_error(loc=("body",))], body=None)
    value: Any = raw
    if is_json:
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise RequestValidationError([{"type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error",
                                           "input": {}, "ctx": {"error": exc.msg}}], body=exc.doc) from None
        except Exception:  # noqa: BLE001 (undecodable bytes, nesting past the recursion limit: FastAPI's 400)
            raise HTTPException(400, detail="There was an error parsing the body") from None
    body, errors = field.validate(value, {}, loc=("body",))
    if errors:
        raise RequestValidationError(errors, body=value)
    return body
