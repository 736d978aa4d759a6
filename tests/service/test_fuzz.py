"""Property-based attacks on the real server: whatever the body, the answer is never a 5xx, never hangs, and
every error is JSON with a reason. Hypothesis drives raw and near-valid bodies; schemathesis drives the
app's own OpenAPI schema."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.schemas.common import MAX_TEXT_CHARS, MAX_TEXTS
from tests.conftest import Server, start_server, stop_server

EXAMPLES = 80
sent: Counter[str] = Counter()

# JSON the standard library will write, NaN/Infinity and lone surrogates included (they broke the 422 path).
scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=50)
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.text(max_size=8), inner, max_size=4), max_leaves=12)
texts = st.one_of(st.text(max_size=80), st.text(min_size=MAX_TEXT_CHARS - 2, max_size=MAX_TEXT_CHARS + 2),
                  st.sampled_from(["", " ", "\u3000", "\x00", "\ud800", "How can I be a good geologist?"]))
search_bodies = st.fixed_dictionaries({}, optional={
    "query": texts | json_values,
    "queries": st.lists(texts, max_size=MAX_TEXTS + 2) | json_values,
    "top_k": st.integers(-5, 105) | json_values,
    "extra": json_values,
})
encode_bodies = st.fixed_dictionaries({}, optional={"texts": st.lists(texts, max_size=MAX_TEXTS + 2) | json_values})


def check(r: httpx.Response) -> None:
    assert r.status_code < 500, r.text[:500]
    body = r.json()  # every answer is JSON
    if r.status_code >= 400:
        assert body["detail"], body  # with a reason
    else:
        assert body["index_version"]


def post(server: Server, path: str, **kwargs: object) -> httpx.Response:
    sent[path] += 1
    return httpx.post(f"{server.url}{path}", timeout=60, **kwargs)  # type: ignore[arg-type]


fuzz = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))


@fuzz
@given(body=search_bodies)
def test_search_never_fails_on_any_body(server: Server, body: dict) -> None:
    check(post(server, "/search", content=json.dumps(body), headers={"Content-Type": "application/json"}))


@fuzz
@given(body=encode_bodies)
def test_encode_never_fails_on_any_body(server: Server, body: dict) -> None:
    check(post(server, "/encode", content=json.dumps(body), headers={"Content-Type": "application/json"}))


@fuzz
@given(raw=st.binary(max_size=300) | json_values.map(lambda v: json.dumps(v).encode()),
       path=st.sampled_from(["/search", "/encode"]),
       content_type=st.sampled_from(["application/json", "text/plain", "application/x-www-form-urlencoded"]))
def test_any_bytes_are_refused_cleanly(server: Server, raw: bytes, path: str, content_type: str) -> None:
    check(post(server, path, content=raw, headers={"Content-Type": content_type}))


def test_hypothesis_example_count() -> None:
    """Runs after the three properties above (file order): they really sent what they claim."""
    if not sent:
        pytest.skip("run with the property tests above")
    print(f"\nhypothesis requests: {dict(sent)}")
    assert sum(sent.values()) >= 2 * EXAMPLES


SCHEMATHESIS_CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"


def test_schemathesis_against_the_openapi_schema(server: Server, tmp_path) -> None:  # noqa: ANN001
    # the writes (tag "documents") are fuzzed on a root of their own (tests/service/test_writes.py): here they would
    # change the shared session index that other tests search; the snapshots' routes (tag "snapshots": no body, a
    # name) would write archives of it (tests/service/test_snapshots.py runs them)
    # the collections' routes run on one worker of their own (below): with two, schemathesis' coverage phase
    # crashes in CPython 3.11's ast.parse (SystemError: AST constructor recursion depth mismatch, from hypothesis
    # describing a filter lambda on two threads) when /search and /collections/{name}/search share a body schema
    r = subprocess.run([sys.executable, "-m", "schemathesis.cli", "run", f"{server.url}/openapi.json",
                        "--checks", SCHEMATHESIS_CHECKS, "--exclude-tag", "documents", "--exclude-tag", "collections",
                        "--exclude-tag", "snapshots", "--max-examples", "30", "--seed", "20260101", "--workers", "2",
                        "--request-timeout", "60", "--no-color", "--generation-database", "none"],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    summary = re.search(r"(\d+) generated", r.stdout)
    print(f"\nschemathesis: {summary.group(0) if summary else '?'}; exit {r.returncode}")
    assert r.returncode == 0, r.stdout[-4000:]
    assert summary and int(summary.group(1)) > 100


@pytest.fixture(scope="module")
def own_server(tmp_path_factory: pytest.TempPathFactory, quora_root: Path) -> Iterator[Server]:
    """A server on a copy of the session's root: the collections' routes include `PUT /collections/{name}/config`,
    whose fuzzed bodies are written to the root's collection.json (random `access.keys` on the shared root refused
    every key of the tests after it)."""
    root = tmp_path_factory.mktemp("fuzz-root") / "quora"
    shutil.copytree(quora_root, root, symlinks=True)
    srv = start_server(tmp_path_factory.mktemp("fuzz-server"), {"STRATA_INDEX_ROOT": str(root)})
    yield srv
    stop_server(srv)


def test_schemathesis_against_the_collections_routes(own_server: Server, tmp_path) -> None:  # noqa: ANN001
    """/collections, /collections/{name}, each collection's search, reload and config (its writes are fuzzed with
    the other writes' roots): on one worker, see above; on a root of its own (`own_server`)."""
    r = subprocess.run([sys.executable, "-m", "schemathesis.cli", "run", f"{own_server.url}/openapi.json",
                        "--checks", SCHEMATHESIS_CHECKS, "--include-tag", "collections", "--exclude-tag", "documents",
                        "--max-examples", "30", "--seed", "20260101", "--workers", "1",
                        "--request-timeout", "60", "--no-color", "--generation-database", "none"],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    summary = re.search(r"(\d+) generated", r.stdout)
    print(f"\nschemathesis: {summary.group(0) if summary else '?'}; exit {r.returncode}")
    assert r.returncode == 0, r.stdout[-4000:]
    assert summary and int(summary.group(1)) > 100
