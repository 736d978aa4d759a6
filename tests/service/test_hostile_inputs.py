"""Hostile inputs against a real server (uvicorn on 127.0.0.1, the real encoder, a real corpus index with metadata
built by `indexer build --data`, real FAISS and SQLite): no metadata, filter or text turns a request into a 5xx,
a bad request fails alone (its micro-batch neighbours are answered), and a document stored with poisoned metadata
by an older version never blocks a search.

The defects first, each reproduced as it was found; then a property-based suite (hypothesis) that generates
hostile metadata, filters, texts and ids for every endpoint, each sent beside well-formed neighbours whose query
hits the poisoned documents. It is bounded (`HOSTILE`: a fixed number of examples, no deadline) so that it runs
in CI in well under a minute once the index is built."""

from __future__ import annotations

import json
import operator
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer.quora import read_rows
from indexer.runtime.filters import LIMITS, FilterError, check_limits
from indexer.runtime.layout import IndexRoot
from indexer.runtime.metadata import MAX_BYTES, MAX_DEPTH
from tests.conftest import REPO, Server, start_server, stop_server

DOCS = 240
GOOD_QUERY = "How do I learn Python?"
# documents written through the API, whose metadata is then rewritten in the write log as an older version,
# which took anything JSON can spell, stored it
POISON: dict[str, dict[str, Any]] = {
    "p-2pow64": {"x": 2**64},
    "p-below": {"x": -(2**63) - 1},
    "p-1e30": {"x": 10**30, "ok": "kept"},
    "p-deep": {"d": json.loads("[" * 300 + "1" + "]" * 300)},
}
POISON_TEXT = {pid: f"Zebra quartz poison probe {n}: how do glaciers carve {w} valleys?"
               for n, (pid, w) in enumerate(zip(POISON, ("granite", "limestone", "basalt", "marble"), strict=True))}


def nested(levels: int, leaf: object = 1) -> object:
    value = leaf
    for _ in range(levels):
        value = [value]
    return value


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "indexer.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600)


def post_json(c: httpx.Client, path: str, body: object, method: str = "POST") -> httpx.Response:
    """`body` as Python's json writes it: lone surrogates as \\ud800 escapes, NaN and Infinity as such (httpx's own
    encoder refuses both, a client in another language need not)."""
    return c.request(method, path, content=json.dumps(body), headers={"Content-Type": "application/json"})


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, quora_file: Path) -> Path:
    """240 distinct Quora questions (rows < 300,000) with int, float, str, bool and nested metadata."""
    path = tmp_path_factory.mktemp("hostile-data") / "docs.jsonl"
    seen: list[str] = []
    for row in read_rows(quora_file):
        for text in (row.question1, row.question2):
            if text and text.strip() and text not in seen and len(seen) < DOCS:
                seen.append(text)
        if len(seen) >= DOCS:
            break
    with open(path, "w") as fh:
        for i, text in enumerate(seen):
            fh.write(json.dumps({"id": i if i % 3 else f"d{i}", "text": text, "n": i * 1000, "f": i / 7,
                                 "tag": ("red", "green", "blue")[i % 3], "bucket": i % 5, "flag": i % 2 == 0,
                                 "extra": {"tags": ["a", "b"], "depth": {"k": i}}}) + "\n")
    return path


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory, corpus: Path, minilm_mean: Path) -> Path:
    """The corpus built, then the POISON documents written through the API and their metadata rewritten in the
    write log (what an older version accepted and logged)."""
    tmp = tmp_path_factory.mktemp("hostile-root")
    root = tmp / "root"
    r = cli("build", "--root", str(root), "--data", str(corpus), "--model", str(minilm_mean), "--nlist", "8",
            "--nprobe", "2", "--threads", "1")
    assert r.returncode == 0, r.stderr
    server = serve(tmp, root)
    try:
        with server.client() as c:
            docs = [{"id": pid, "text": POISON_TEXT[pid], "metadata": {"x": 1}} for pid in POISON]
            assert c.put("/documents", json={"documents": docs}).status_code == 200
    finally:
        stop_server(server)
    with sqlite3.connect(root / "writes" / "log.sqlite") as con:
        for pid, meta in POISON.items():
            n = con.execute("UPDATE entries SET metadata = ? WHERE ext_id = ?", (json.dumps(meta), pid)).rowcount
            assert n == 1
    return root


def serve(tmp: Path, root: Path) -> Server:
    return start_server(tmp, {"STRATA_INDEX_ROOT": str(root), "STRATA_WATCH_INTERVAL_S": "0", "STRATA_THREADS": "1",
                              "STRATA_WORKERS": "2"})


@pytest.fixture(scope="module")
def server(template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("hostile-server")
    root = tmp / "root"
    shutil.copytree(template, root, symlinks=True)
    srv = serve(tmp, root)
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client() as c:
        yield c


@pytest.fixture(scope="module")
def model(client: httpx.Client) -> str:
    return str(client.get("/v1/models").json()["data"][0]["id"])


def assert_poison_served(c: httpx.Client) -> None:
    """Every poisoned document is the top hit for its own text, its values repaired, never a 500."""
    for pid in POISON:
        r = c.post("/search", json={"query": POISON_TEXT[pid], "top_k": 3})
        assert r.status_code == 200, (pid, r.text[:300])
        top = r.json()["hits"][0]
        assert top["id"] == pid, (pid, top)
        if pid == "p-deep":
            assert isinstance(top["metadata"]["d"], list)
        else:
            assert top["metadata"]["x"] == str(POISON[pid]["x"])  # the integer as its decimal string
    assert c.post("/search", json={"query": "Zebra quartz poison probe", "top_k": 100}).status_code == 200


def reason(r: httpx.Response) -> str:
    detail = r.json()["detail"]
    return detail if isinstance(detail, str) else " ".join(str(d["msg"]) for d in detail)


# --- the defects, reproduced --------------------------------------------------------------------------------------

BAD_FILTERS: list[tuple[str, str]] = [  # (the filter as JSON text, the reason's words)
    ('{"n": 1180591620717411303424}', "does not fit in 64 bits"),
    ('{"n": {"lt": 18446744073709551616}}', "does not fit in 64 bits"),
    ('{"n": {"gt": -1208925819614629174706176}}', "does not fit in 64 bits"),
    ('{"n": {"lte": 9223372036854775808}}', "does not fit in 64 bits"),
    ('{"bucket": {"in": [1, 36893488147419103232]}}', "does not fit in 64 bits"),
    ('{"f": {"gte": NaN}}', "not a finite number"),
    ('{"n": Infinity}', "not a finite number"),
    ('{"n": {"lt": -Infinity}}', "not a finite number"),
    ('{"tag": "\\ud800"}', "lone surrogate"),
    ('{"tag": {"in": ["red", "x\\udfff"]}}', "lone surrogate"),
]


def search_raw(c: httpx.Client, flt: str, query: str = GOOD_QUERY) -> httpx.Response:
    body = f'{{"query": {json.dumps(query)}, "top_k": 5, "filter": {flt}}}'
    return c.post("/search", content=body, headers={"Content-Type": "application/json"})


@pytest.mark.parametrize(("flt", "words"), BAD_FILTERS, ids=[f for f, _ in BAD_FILTERS])
def test_filter_values_outside_the_schema_are_422_and_their_batch_neighbours_200(client: httpx.Client, flt: str,
                                                                                  words: str) -> None:
    """Defects 1 and 2: a filter value beyond 64 bits, NaN/infinite or with a lone surrogate was a 500
    (OverflowError / UnicodeEncodeError in the store) and took batch neighbours down (14 of 320 good requests).
    Now: 1 such request among 16 good ones sent together, 4 rounds: it gets a 422 with the reason, every good one
    a 200."""
    good_filters = [None, {"bucket": 1}, {"n": {"lt": 2**63 - 1}}, {"tag": "red"}]
    with ThreadPoolExecutor(17) as pool:
        for _ in range(4):
            bad = pool.submit(search_raw, client, flt)
            good = [pool.submit(client.post, "/search", json={"query": GOOD_QUERY, "top_k": 5,
                                                              **({"filter": f} if f else {})})
                    for f in good_filters * 4]
            r = bad.result()
            assert r.status_code == 422 and words in reason(r), r.text
            assert [g.result().status_code for g in good] == [200] * 16


def test_in_range_filter_values_still_work(client: httpx.Client) -> None:
    """The edges of the schema are accepted: 2^63-1 and -2^63 bind, 1e40 on an integer field matches nothing."""
    assert len(search_raw(client, '{"n": {"lte": 9223372036854775807}}').json()["hits"]) == 5
    assert len(search_raw(client, '{"n": {"gte": -9223372036854775808}}').json()["hits"]) == 5
    r = search_raw(client, '{"n": {"gte": 1e40}}')
    assert r.status_code == 200 and r.json()["hits"] == []
    r = search_raw(client, '{"f": {"lt": 1e40}, "tag": "red"}')
    assert r.status_code == 200 and {h["metadata"]["tag"] for h in r.json()["hits"]} == {"red"}


POISONING_METADATA: list[tuple[dict[str, Any], str]] = [
    ({"x": 2**64}, "metadata field 'x': integer 18446744073709551616 does not fit in 64 bits"),
    ({"x": -(2**63) - 1}, "metadata field 'x': integer -9223372036854775809 does not fit in 64 bits"),
    ({"x": 10**30}, "metadata field 'x': integer 1000000000000000000000000000000 does not fit in 64 bits"),
    ({"x": {"y": [1, 2**63]}}, "metadata field 'x.y[1]': integer 9223372036854775808 does not fit"),
    ({"d": nested(300)}, f"metadata field 'd' nests deeper than {MAX_DEPTH} levels"),
    ({"d": nested(MAX_DEPTH)}, f"nests deeper than {MAX_DEPTH} levels"),  # with the metadata object: 33 levels
    ({"s": "a\ud800"}, "metadata field 's': string 'a\\ud800' is not valid Unicode"),
    ({"big": "x" * (MAX_BYTES + 1)}, f"the limit is {MAX_BYTES:,}"),
    ({" ": 1}, "metadata field names must not be empty or blank"),
    # compaction (SQLite's json_each) cut `k\0z` to `k`; build, writes and compaction now agree: refused
    ({"k\x00z": 1}, "metadata field name 'k\\x00z' in 'metadata' holds a NUL character"),
    ({"m": {"k\x00": [1]}}, "metadata field name 'k\\x00' in 'm' holds a NUL character"),
    ({"s": "a\x00b"}, "metadata field 's': string 'a\\x00b' holds a NUL character"),
]


@pytest.mark.parametrize(("meta", "words"), POISONING_METADATA, ids=[w[:40] for _, w in POISONING_METADATA])
def test_put_refuses_metadata_that_would_poison_searches(client: httpx.Client, meta: dict[str, Any],
                                                         words: str) -> None:
    """Defect 3: PUT /documents took integers beyond 64 bits and 300-deep nesting, and every later /search whose
    hits held the document was a 500. Now the write is a 422 naming the document and the field, nothing is
    written, and searches answer."""
    text = "poison probe zebra quartz refused"
    r = post_json(client, "/documents", {"documents": [{"id": "ok-1", "text": "fine"},
                                                       {"id": "p1", "text": text, "metadata": meta}]}, "PUT")
    assert r.status_code == 422, r.text[:300]
    assert "document 'p1': " in reason(r) and words in reason(r), reason(r)[:300]
    hits = client.post("/search", json={"query": text, "top_k": 100}).json()["hits"]
    assert {"p1", "ok-1"}.isdisjoint(h["id"] for h in hits)  # nothing of the refused call was written


def test_metadata_at_the_schema_edges_is_written_and_served_intact(client: httpx.Client) -> None:
    meta = {"lo": -(2**63), "hi": 2**63 - 1, "deep": nested(MAX_DEPTH - 1), "f": 1e308, "s": "café \U0001f600",
            "fill": "x" * (MAX_BYTES - 200)}
    text = "Edge of the metadata schema: which kite flies highest over the dunes?"
    r = client.put("/documents", json={"documents": [{"id": "edge", "text": text, "metadata": meta}]})
    assert r.status_code == 200, r.text[:300]
    top = client.post("/search", json={"query": text, "top_k": 1}).json()["hits"][0]
    assert top["id"] == "edge" and top["metadata"] == meta


def test_a_document_poisoned_by_an_older_version_never_blocks_a_search(template: Path, tmp_path: Path) -> None:
    """Values an older version logged (2^64, -2^63-1, 10^30, 300-deep nesting) are served repaired, through
    restarts and after `indexer compact` folds them into a version's store."""
    root = tmp_path / "root"
    shutil.copytree(template, root, symlinks=True)
    server = serve(tmp_path, root)
    try:
        with server.client() as c:
            assert_poison_served(c)
            r = cli("compact", "--root", str(root), "--threads", "1", "--no-eval")
            assert r.returncode == 0, r.stderr
            assert "folded in as written" in r.stderr  # each poisoned entry is named in a warning
            assert c.post("/admin/reload").json()["outcome"] == "swapped"
            assert_poison_served(c)  # now from the compacted version's store, not the overlay
        stop_server(server)
        server = serve(tmp_path, root)
        with server.client() as c:
            assert c.get("/ready").json()["index_version"] == IndexRoot(root).current_version()
            assert_poison_served(c)
    finally:
        stop_server(server)
    assert "sent repaired" in server.log.read_text()  # the operator is told


def test_numeric_request_fields_are_strict(client: httpx.Client, model: str) -> None:
    for top_k in ("5", True, 5.0, "five"):
        r = client.post("/search", json={"query": GOOD_QUERY, "top_k": top_k})
        assert r.status_code == 422 and "top_k" in r.text, (top_k, r.text)
    assert len(client.post("/search", json={"query": GOOD_QUERY, "top_k": 5}).json()["hits"]) == 5
    # alpha and k once took "0.5", true and "60"
    for name, bad in (("alpha", "0.5"), ("alpha", True), ("alpha", [0.5]), ("k", "60"), ("k", True), ("k", False)):
        r = client.post("/search", json={"query": GOOD_QUERY, "mode": "hybrid", name: bad})
        assert r.status_code == 422 and [d["loc"] for d in r.json()["detail"]] == [["body", name]], (name, bad, r.text)
    for name, good in (("alpha", 0.5), ("alpha", 1), ("alpha", 0), ("k", 60), ("k", 60.5)):
        r = client.post("/search", json={"query": GOOD_QUERY, "mode": "hybrid", name: good})
        assert r.status_code == 200, (name, good, r.text)
    for dims in ("384", True, 384.0):
        r = client.post("/v1/embeddings", json={"input": "ok", "model": model, "dimensions": dims})
        assert r.status_code == 400 and r.json()["error"]["param"] == "dimensions", (dims, r.text)
    assert client.post("/v1/embeddings", json={"input": "ok", "model": model, "dimensions": 384}).status_code == 200


def test_a_lone_surrogate_in_model_is_a_404_not_a_500(client: httpx.Client) -> None:
    """`/v1/embeddings` with `"model": "\\ud800"` was a 500 (UnicodeEncodeError rendering the 404 that names it).
    Every error that echoes what the client sent now renders, the surrogate as U+FFFD."""
    for asked in ("\ud800", "strata-\udfff", "a\udbff\udbffb", "strata-384\ud83d"):
        r = post_json(client, "/v1/embeddings", {"input": GOOD_QUERY, "model": asked})
        assert r.status_code == 404, r.text[:300]
        err = r.json()["error"]
        assert err["code"] == "model_not_found" and err["param"] == "model" and "\ufffd" in err["message"], err
    r = client.get("/v1/models/%ED%A0%80")  # the surrogate's bytes in the path
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found", r.text[:300]
    r = client.post("/collections/%ED%A0%80/search", json={"query": GOOD_QUERY})
    assert 400 <= r.status_code < 500 and r.json()["detail"], r.text[:300]


# --- property-based: every endpoint, hostile values, well-formed neighbours ---------------------------------------

HOSTILE = settings(max_examples=50, deadline=None, derandomize=True, database=None,
                   suppress_health_check=list(HealthCheck))
# STRATA_HYPOTHESIS_PROFILE=long (tests/conftest.py): 2,000 randomized examples per route, each request alone
LONG = os.environ.get("STRATA_HYPOTHESIS_PROFILE") == "long"
PER_ROUTE = settings.get_profile("long") if LONG else settings(
    max_examples=12, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))

surrogates = st.sampled_from(["\ud800", "a\udfffb", "\udbff\udbff", "x\ud83d"])
hostile_text = st.text(max_size=30) | surrogates | st.text(max_size=10).map(lambda s: s + "\ud800")
edge_ints = st.sampled_from([2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64 - 1, 2**64, 10**30, -(10**40)])
scalars = (st.none() | st.booleans() | st.integers(-(2**80), 2**80) | edge_ints | st.floats() | hostile_text)
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    hostile_text, inner, max_size=3), max_leaves=8)
deep_values = st.builds(nested, st.integers(MAX_DEPTH - 2, 400), scalars)
metadata = st.dictionaries(hostile_text, json_values | deep_values, max_size=4)
fields = st.sampled_from(["n", "f", "tag", "bucket", "flag", "extra", "nope", "and", "or"]) | hostile_text
conditions = scalars | st.dictionaries(st.sampled_from(["eq", "in", "gt", "gte", "lt", "lte", "between"]),
                                      scalars | st.lists(scalars, max_size=3), min_size=1, max_size=2)
filters = st.recursive(st.dictionaries(fields, conditions, min_size=1, max_size=2),
                       lambda inner: st.dictionaries(st.sampled_from(["and", "or"]), st.lists(inner, max_size=3),
                                                     min_size=1, max_size=1), max_leaves=6) | json_values
ids = st.integers(-(2**70), 2**70) | hostile_text | edge_ints | json_values


def with_neighbours(client: httpx.Client, hostile: httpx.Request) -> httpx.Response:
    """Send `hostile` beside 3 well-formed searches whose hits hold every poisoned document; the neighbours must
    all be answered, whatever becomes of it."""
    poisoned = " ".join(POISON_TEXT.values())
    with ThreadPoolExecutor(4) as pool:
        answer = pool.submit(client.send, hostile)
        neighbours = [pool.submit(client.post, "/search", json={"query": q, "top_k": 10}) for q in
                      (POISON_TEXT["p-2pow64"], POISON_TEXT["p-deep"], poisoned)]
        for n in neighbours:
            r = n.result()
            assert r.status_code == 200, r.text[:300]
            assert r.json()["hits"], r.text[:300]
        r = answer.result()
    assert r.status_code < 500, (hostile.url.path, r.status_code, r.text[:500])
    body = r.json()  # every answer is JSON
    if r.status_code >= 400:
        assert body.get("detail") or body.get("error"), body
    return r


def request(client: httpx.Client, method: str, path: str, body: object) -> httpx.Request:
    return client.build_request(method, path, content=None if body is None else json.dumps(body),
                                headers={"Content-Type": "application/json"})


@HOSTILE
@given(meta=metadata, text=hostile_text | st.just("A hostile but valid document about kites and dunes"))
def test_hostile_metadata_is_refused_or_served_intact(client: httpx.Client, meta: dict[str, Any], text: str) -> None:
    r = with_neighbours(client, request(client, "PUT", "/documents",
                                        {"documents": [{"id": "h1", "text": text, "metadata": meta}]}))
    if r.status_code == 200:  # accepted: it fits the schema, and comes back as sent
        hits = client.post("/search", json={"query": text, "top_k": 5}).json()["hits"]
        assert any(h["id"] == "h1" and h["metadata"] == meta for h in hits), (meta, hits[:1])
    else:
        assert r.status_code == 422, r.text[:300]
        if "metadata" in reason(r):  # a metadata refusal names the document
            assert "document 'h1': " in reason(r), reason(r)[:300]


@HOSTILE
@given(flt=filters, query=hostile_text | st.just(GOOD_QUERY))
def test_hostile_filters_are_answered_or_refused_alone(client: httpx.Client, flt: object, query: str) -> None:
    r = with_neighbours(client, request(client, "POST", "/search", {"query": query, "top_k": 5, "filter": flt}))
    assert r.status_code in (200, 422), r.text[:300]


@pytest.mark.parametrize("endpoint", ["/encode", "/search", "/v1/embeddings", "/v1/embeddings model",
                                      "/v1/models/{model}", "PUT /documents", "/documents/delete"])
@PER_ROUTE
@given(text=hostile_text, doc_id=ids, top_k=scalars)
def test_hostile_texts_and_ids_on_every_endpoint(client: httpx.Client, model: str, endpoint: str, text: str,
                                                doc_id: object, top_k: object) -> None:
    method, path, body = {
        "/encode": ("POST", "/encode", {"texts": [text, GOOD_QUERY]}),
        "/search": ("POST", "/search", {"queries": [GOOD_QUERY, text], "top_k": top_k}),
        "/v1/embeddings": ("POST", "/v1/embeddings", {"input": [text], "model": model, "dimensions": top_k}),
        "/v1/embeddings model": ("POST", "/v1/embeddings", {"input": GOOD_QUERY, "model": text}),
        "/v1/models/{model}": ("GET", f"/v1/models/{quote(text.encode('utf-8', 'surrogatepass'), safe='') or 'x'}",
                               None),
        "PUT /documents": ("PUT", "/documents", {"documents": [{"id": doc_id, "text": text}]}),
        "/documents/delete": ("POST", "/documents/delete", {"ids": [doc_id, "never-written"]}),
    }[endpoint]
    with_neighbours(client, request(client, method, path, body))


# --- the filter grammar's whole width and depth, on every route that takes a filter -------------------

FILTER_ROUTES = {  # name: (path, extra body)
    "dense": ("/search", {"mode": "dense"}),
    "lexical": ("/search", {"mode": "lexical"}),
    "hybrid": ("/search", {"mode": "hybrid"}),
    "default-mode": ("/search", {}),
    "collection-hybrid": ("/collections/default/search", {"mode": "hybrid"}),
    "collection-lexical": ("/collections/default/search", {"mode": "lexical"}),
}
# the corpus's fields (built by `indexer build --data`), each with conditions it matches
GOOD_LEAVES: list[dict[str, Any]] = [{"bucket": 1}, {"bucket": {"in": [0, 2, 4]}}, {"tag": "red"}, {"flag": True},
                                     {"n": {"gte": 1000, "lt": 90_000}}, {"f": {"lt": 10.5}}, {"tag": {"gte": "g"}},
                                     {"bucket": 3, "tag": "blue"}]


def nest(depth: int, leaf: dict[str, Any], sibling: dict[str, Any]) -> dict[str, Any]:
    """`leaf` under `depth` and/or lists (alternating and, or), each with `sibling` beside it."""
    flt = leaf
    for level in range(depth):
        flt = {("and", "or")[level % 2]: [flt, sibling]}
    return flt


def wide(n: int, op: str = "or") -> dict[str, Any]:
    """`n` filters of one condition each (n conditions in all)."""
    leaves = [leaf for leaf in GOOD_LEAVES if len(leaf) == 1]
    return {op: [leaves[i % len(leaves)] if i % 3 else {"n": i * 1000} for i in range(n)]}


def search_filtered(c: httpx.Client, route: str, flt: object, **extra: Any) -> httpx.Response:  # noqa: ANN401
    path, body = FILTER_ROUTES[route]
    return post_json(c, path, {"query": GOOD_QUERY, "top_k": 10, "filter": flt, **body, **extra})


@pytest.mark.parametrize("route", FILTER_ROUTES)
def test_filters_up_to_every_limit_answer_and_past_it_are_422(client: httpx.Client, route: str) -> None:
    """501 and/or terms were a 500 (`too many terms in compound SELECT`), and 15-16 levels too (`parser stack
    overflow`), in every mode: now each shape up to `FilterLimits` answers 200, whose hits all match, and each past
    it is a 422 naming the limit, the same in every mode and on the collection's route."""
    accepted = [wide(500), wide(501), wide(LIMITS.width), wide(LIMITS.width, "and"),
                nest(15, {"bucket": 1}, {"tag": "red"}), nest(16, {"bucket": 1}, {"tag": "red"}),
                nest(15, wide(600), {"flag": True}), {"bucket": {"in": list(range(LIMITS.values))}}]
    for flt in accepted:
        r = search_filtered(client, route, flt)
        assert r.status_code == 200, (route, r.text[:300])
        assert all(brute_match(flt, h["metadata"]) for h in r.json()["hits"]), route
    assert search_filtered(client, route, wide(501)).json()["hits"]  # the wide or matches most documents
    refused = [(wide(LIMITS.width + 1), "'or' has 1025 filters; the limit is 1024"),
               (nest(17, {"bucket": 1}, {"tag": "red"}), "deeper than 16 levels"),
               ({"or": [wide(600, "and"), wide(600)]}, "more than 1024 field conditions"),
               ({"bucket": {"in": list(range(LIMITS.values + 1))}}, "more than 10000 values"),
               (nest(400, {"bucket": 1}, {"tag": "red"}), "deeper than 16 levels")]
    for flt, words in refused:
        r = search_filtered(client, route, flt)
        assert r.status_code == 422 and words in reason(r), (route, r.text[:300])
    # deeper than any JSON parser should recurse: refused all the same, never a 500
    path = FILTER_ROUTES[route][0]
    raw = '{"query": "x", "filter": ' + '{"or": [' * 100_000 + '{"bucket": 1}' + "]}" * 100_000 + "}"
    r = client.post(path, content=raw, headers={"Content-Type": "application/json"})
    assert 400 <= r.status_code < 500 and r.json()["detail"], (route, r.status_code, r.text[:300])


def brute_match(flt: dict[str, Any], meta: dict[str, Any]) -> bool:
    """The filter semantics, independently of `indexer.runtime.filters` (the shapes above use no mixed field)."""
    ok = True
    for key, cond in flt.items():
        if key in ("and", "or"):
            ok &= (all if key == "and" else any)(brute_match(f, meta) for f in cond)
        elif key not in meta:
            ok = False
        elif not isinstance(cond, dict):
            ok &= meta[key] == cond and isinstance(meta[key], bool) == isinstance(cond, bool)
        else:
            ok &= all(COMPARE[op](meta[key], b) for op, b in cond.items())
    return ok


COMPARE = {"eq": operator.eq, "in": lambda v, b: v in b, "gt": operator.gt, "gte": operator.ge, "lt": operator.lt,
           "lte": operator.le}


GRAMMAR = settings.get_profile("long") if LONG else settings(
    max_examples=8, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
hostile_leaves = st.dictionaries(fields, conditions, min_size=1, max_size=2)
widths = st.sampled_from([1, 2, 3, 499, 500, 501, 1023, 1024, 1025]) | st.integers(1, 40)
depths = st.integers(0, LIMITS.depth + 2) | st.sampled_from([14, 15, 16, 17, 40])


@st.composite
def grammar_filters(draw: st.DrawFn) -> dict[str, Any]:
    """A filter `depth` and/or levels deep whose widest list holds `width` filters: good leaves of the corpus's
    fields (seeded, so that a 1,024-wide list costs one draw), a hostile leaf or `in` list somewhere, maybe."""
    import random

    rng = random.Random(draw(st.integers(0, 2**32)))
    depth, width, wide_at = draw(depths), draw(widths), draw(st.integers(0, LIMITS.depth + 2))
    leaf = draw(hostile_leaves) if draw(st.booleans()) else rng.choice(GOOD_LEAVES)
    if draw(st.integers(0, 9)) == 0:
        leaf = {"bucket": {"in": list(range(draw(st.sampled_from([1, 9_999, 10_000, 10_001]))))}}
    flt: dict[str, Any] = leaf
    for level in range(depth):
        n = width if level == min(wide_at, depth - 1) else rng.randrange(1, 4)
        items = [flt] + [rng.choice(GOOD_LEAVES) for _ in range(n - 1)]
        rng.shuffle(items)
        flt = {rng.choice(["and", "or"]): items}
    return flt


@pytest.mark.parametrize("route", FILTER_ROUTES)
@GRAMMAR
@given(flt=grammar_filters(), knobs=st.fixed_dictionaries({}, optional={"alpha": scalars, "k": scalars}))
def test_the_filter_grammar_up_to_and_past_every_limit_never_fails(client: httpx.Client, route: str,
                                                                 flt: dict[str, Any], knobs: dict[str, Any]) -> None:
    """Never a 5xx: a 200, or a 422 with the reason (one past a limit names it); neighbours answered. In the long
    run (STRATA_HYPOTHESIS_PROFILE=long) one request per example, without neighbours."""
    hostile = request(client, "POST", FILTER_ROUTES[route][0],
                      {"query": GOOD_QUERY, "top_k": 10, "filter": flt, **FILTER_ROUTES[route][1], **knobs})
    r = client.send(hostile) if LONG else with_neighbours(client, hostile)
    assert r.status_code in (200, 422), (route, r.status_code, r.text[:300])
    try:
        check_limits(flt)
    except FilterError as exc:
        assert r.status_code == 422 and str(exc) in reason(r), (route, r.text[:300])


def test_the_poisoned_documents_are_still_served_after_the_attack(client: httpx.Client) -> None:
    assert_poison_served(client)
