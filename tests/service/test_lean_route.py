"""`service.lean_route.LeanRoute` answers every body exactly as FastAPI's own route does — the same status and the
same body, for valid requests and for every kind of bad one (malformed JSON, wrong types, NaN, lone surrogates,
bodies not typed JSON, empty ones, nesting past the parsers' limits) — and refuses at startup an endpoint whose
other parameters it would skip. A real FastAPI app with the service's error handlers, called in process."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi import APIRouter, Depends, FastAPI, Request, Response
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.auth import PUBLIC, READ_DEFAULT
from service.body_process import BodyProcess
from service.errors import install_error_handlers
from service.lean_route import OFF_LOOP_BYTES, LeanRoute
from service.schemas.documents import UpsertRequest
from service.schemas.search import SearchRequest


async def echo(body: SearchRequest, request: Request) -> Response:
    return Response(body.model_dump_json(), media_type="application/json")


def lean_and_plain(endpoint: Callable[..., Any]) -> FastAPI:
    """An app serving `endpoint` at /lean (a `LeanRoute`) and /plain (FastAPI's own route)."""
    app = FastAPI()
    install_error_handlers(app)
    lean, plain = APIRouter(route_class=LeanRoute), APIRouter()
    lean.add_api_route("/lean", endpoint, methods=["POST"], dependencies=[PUBLIC])
    plain.add_api_route("/plain", endpoint, methods=["POST"], dependencies=[PUBLIC])
    app.include_router(lean)
    app.include_router(plain)
    return app


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(lean_and_plain(echo)) as c:
        yield c


def both(client: TestClient, body: bytes, content_type: str | None = "application/json") -> None:
    headers = {"content-type": content_type} if content_type else {}
    lean = client.post("/lean", content=body, headers=headers)
    plain = client.post("/plain", content=body, headers=headers)
    assert (lean.status_code, lean.json()) == (plain.status_code, plain.json()), body[:200]
    assert lean.status_code in (200, 400, 422), (lean.status_code, lean.text)


VECTOR = [0.1] * 8
EXAMPLES = [
    b'{"vector": %s}' % json.dumps(VECTOR).encode(), b'{"query": "how to learn python", "mode": "hybrid"}',
    b'{"vector": [0.1, NaN]}', b'{"vector": [1e400]}', b'{"vector": ["0.5", true]}', b'{"vector": [null]}',
    b'{"vector": "abc"}', b'{"vector": []}', b'{"vector": %s}' % json.dumps([0.0] * 8193).encode(),
    b'{"query": "\\ud800"}', b'{"query": "a\x01b"}', b'{"query": "x"} trailing', b'{"query": ', b"[1]", b"",
    b'{"query": "a", "top_k": 5.0}', b'{"query": "a", "top_k": 10000000000000000000000}', b'{"query": "a", "k": 60}',
    b'{"query": "a", "bogus": 1}', b'{"queries": ["a", 1]}', b'{"vector": [0.1], "queries": ["a"]}',
    b'{"query": "a", "filter": %s}' % (b'{"and": [' * 300 + b"{}" + b"]}" * 300),
    b"\xff\xfe{}", '{"query": "h\u00e9"}'.encode("utf-16"),
    # past OFF_LOOP_BYTES: parsed on a thread, with the same answers
    b'{"vector": [%s]}' % b", ".join([b"0.25"] * 20000), b'{"vector": [%s, "x"]}' % b", ".join([b"0.25"] * 20000),
    b'{"query": "%s"}' % (b"a" * 70000), b'{"query": "a", "filter": {"and": [%s]}' % b", ".join([b"{}"] * 30000),
]


@pytest.mark.parametrize("body", EXAMPLES)
def test_the_same_answer_as_fastapi(client: TestClient, body: bytes) -> None:
    both(client, body)


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded",
                                          "application/vnd.api+json", "application/json; charset=utf-8"])
def test_the_same_content_type_rule(client: TestClient, content_type: str | None) -> None:
    both(client, b'{"query": "a"}', content_type)


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_a_json_body_not_typed_json_is_refused_saying_why(client: TestClient, content_type: str | None) -> None:
    """`curl -d '{"query": "a"}'` sends application/x-www-form-urlencoded: FastAPI does not read the body as JSON,
    and its 422 said only "Input should be a valid dictionary"; it names the Content-Type to send instead."""
    headers = {"content-type": content_type} if content_type else {}
    for path in ("/lean", "/plain"):
        r = client.post(path, content=b'{"query": "a"}', headers=headers)
        assert r.status_code == 422, r.text
        [error] = r.json()["detail"]
        assert error["loc"] == ["body"] and "not read as JSON" in error["msg"], error
        assert "'Content-Type: application/json'" in error["msg"] and (content_type or "no Content-Type") in \
            error["msg"], error


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                                max_size=3), max_leaves=12)
FIELDS = ("query", "queries", "vector", "top_k", "mode", "fusion", "k", "alpha", "filter", "passages", "nprobe")
VALUES = {"vector": st.lists(st.floats(width=32) | st.integers() | st.text(max_size=3), max_size=9),
          "query": st.text(max_size=12), "mode": st.sampled_from(["dense", "lexical", "hybrid", "DENSE"]),
          "top_k": st.integers(-2, 200) | st.floats()}


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    keys = draw(st.lists(st.sampled_from(FIELDS), max_size=4, unique=True))
    doc = {k: draw(VALUES.get(k, JSON) | JSON) for k in keys}
    raw = json.dumps(doc).encode()
    cut = draw(st.none() | st.integers(0, len(raw)))  # sometimes cut short: JSON that does not parse
    return raw if cut is None else raw[:cut]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies())
def test_generated_bodies_get_the_same_answer(client: TestClient, body: bytes) -> None:
    both(client, body)


async def needs_something(body: SearchRequest, request: Request, other: int = Depends(lambda: 1)) -> Response:
    return Response()


async def has_a_query_parameter(body: SearchRequest, request: Request, limit: int = 1) -> Response:
    return Response()


@pytest.mark.parametrize(("endpoint", "dependencies", "says"), [
    (needs_something, [PUBLIC], "no other dependency"),
    (echo, [PUBLIC, READ_DEFAULT], "one declared scope"),
    (echo, [], "one declared scope"),
    (has_a_query_parameter, [PUBLIC], "'limit'"),
])
def test_what_it_would_skip_is_refused_at_startup(endpoint: object, dependencies: list[object], says: str) -> None:
    router = APIRouter(route_class=LeanRoute)
    with pytest.raises(TypeError, match=says):
        router.add_api_route("/x", endpoint, methods=["POST"], dependencies=dependencies)  # type: ignore[arg-type]


async def echo_upsert(body: UpsertRequest, request: Request) -> Response:
    docs = [{"id": d.id, "text": d.text, "metadata": d.metadata,
             "vector": None if d.vector is None else [float(x) for x in d.vector]} for d in body.documents]
    return Response(json.dumps({"documents": docs}), media_type="application/json")


def write_body(docs: int = 128, dim: int = 384, **change: object) -> bytes:
    rows = [{"id": i if i % 2 else f"doc-{i}", "text": f"document {i}", "metadata": {"n": i, "tag": ["a", "b"]},
             "vector": [((i * 31 + j) % 97) / 97 - 0.5 for j in range(dim)]} for i in range(docs)]
    rows[-1] |= change
    return json.dumps({"documents": rows}).encode()


# large write bodies: validated in the body process (`service.body_process`), refused ones re-read in-process
WRITE_BODIES = [write_body(), write_body(vector=None), write_body(vector=[0.5] * 12), write_body(vector=[1e400] * 384),
                write_body(metadata={"n": {"deep": [1, {"x": None}]}}), write_body(id=1.5), write_body(bogus=1),
                write_body(text=None), write_body(docs=300), write_body(vector=["0.5"] * 384),
                write_body().replace(b'"document 0"', b'"\\ud800"'), write_body()[:-3]]


@pytest.fixture(scope="module")
def write_client() -> Iterator[TestClient]:
    app = lean_and_plain(echo_upsert)
    app.state.body_process = BodyProcess(0)
    try:
        with TestClient(app) as c:
            yield c
    finally:
        app.state.body_process.close()


@pytest.mark.parametrize("body", WRITE_BODIES, ids=range(len(WRITE_BODIES)))
def test_large_write_bodies_from_the_body_process_get_the_same_answer(write_client: TestClient, body: bytes) -> None:
    """The child's validation and the rebuilt models (vectors as one array, `model_construct`) give what FastAPI
    gives: the same documents, vectors to the last bit, and the same refusals."""
    assert len(body) >= OFF_LOOP_BYTES
    process = write_client.app.state.body_process  # type: ignore[attr-defined]
    before = process.validated
    both(write_client, body)
    ok = write_client.post("/plain", content=body, headers={"content-type": "application/json"}).status_code == 200
    assert process.validated == before + ok  # a valid body came from the child; a refused one was re-read here
