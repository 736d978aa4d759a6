"""Reading documents back over HTTP on real servers (uvicorn on 127.0.0.1, the real ONNX encoder, FAISS IVF and
SQLite built by `indexer build`): `GET /documents/{id}`, `POST /documents/get`, `/documents/count` and
`/documents/scroll`, on the default collection's routes and under `/collections/{name}` alike, answer what a model
of the collection holds — on the built version, right after upserts and deletes (read-your-writes), after
`indexer compact` and a reload, and after a restart; a scroll visits every document live throughout exactly once
while writes land between its pages; vectors come back as written; bad requests get a 4xx with the reason."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.conftest import Server, start_server, stop_server
from tests.service.test_writes import base_docs, corpus, indexer_cli, kill, root, serve, template  # noqa: F401

Model = dict[int | str, tuple[str, dict[str, Any]]]  # id -> (text, metadata) served


def order(ids: list[int | str]) -> list[int | str]:
    return sorted(ids, key=lambda e: (isinstance(e, str), e))


def model_of(data: Path) -> Model:
    return {d["id"]: (d["text"], {"bucket": d["bucket"]}) for d in base_docs(data)}


def scroll_ids(c: httpx.Client, prefix: str = "", limit: int = 37, flt: dict | None = None) -> list[int | str]:
    seen: list[int | str] = []
    body: dict[str, Any] = {"limit": limit} | ({"filter": flt} if flt else {})
    while True:
        r = c.post(f"{prefix}/documents/scroll", json=body)
        assert r.status_code == 200, r.text
        seen += [d["id"] for d in r.json()["documents"]]
        if r.json()["next_cursor"] is None:
            return seen
        body["cursor"] = r.json()["next_cursor"]


def assert_reads(c: httpx.Client, model: Model, gone: list[int | str], prefix: str = "") -> None:
    """Every way of reading back answers the model: by id, many ids, count, a scroll (filtered too)."""
    ids = list(model)
    sample = [ids[0], ids[1], ids[-1], *random.Random(1).sample(ids, 12)]
    for doc_id in sample[:4]:
        r = c.get(f"{prefix}/documents/{doc_id}")
        assert r.status_code == 200, r.text
        body = r.json()
        assert (body["id"], body["text"], body["metadata"]) == (doc_id, *model[doc_id])
        assert body["vector"] is None and body["passages"] is None
    for doc_id in gone:
        r = c.get(f"{prefix}/documents/{doc_id}")
        assert r.status_code == 404 and f"no document with id '{doc_id}'" in r.json()["detail"], r.text
    r = c.post(f"{prefix}/documents/get", json={"ids": [*sample, *gone, sample[0]]})
    assert r.status_code == 200, r.text
    assert [(d["id"], d["text"], d["metadata"]) for d in r.json()["documents"]] == [
        (i, *model[i]) for i in dict.fromkeys(sample)]
    assert r.json()["not_found"] == list(dict.fromkeys(gone))
    assert c.post(f"{prefix}/documents/count", json={}).json() == {"count": len(model)}
    assert c.post(f"{prefix}/documents/count").json() == {"count": len(model)}  # no body: all, as ES's _count
    first = c.post(f"{prefix}/documents/scroll")  # no body: the first page at the default limit
    assert first.status_code == 200, first.text
    assert [d["id"] for d in first.json()["documents"]] == order(ids)[: len(first.json()["documents"])]
    in_bucket = [i for i, (_, m) in model.items() if m.get("bucket") == 2]
    assert c.post(f"{prefix}/documents/count", json={"filter": {"bucket": 2}}).json() == {"count": len(in_bucket)}
    assert scroll_ids(c, prefix) == order(ids)
    assert scroll_ids(c, prefix, 50, {"bucket": 2}) == order(in_bucket)


def test_documents_read_back_after_writes_compaction_and_restart(root: Path, corpus: Path,  # noqa: F811
                                                                   tmp_path: Path) -> None:
    model = model_of(corpus)
    ints = [i for i in model if isinstance(i, int)]
    server = serve(tmp_path, root)
    try:
        with server.client() as c:
            assert_reads(c, model, [987654321, "nope"])
            assert_reads(c, model, [987654321], prefix="/collections/default")  # one handler, both paths
            # writes: read back at once, before any compaction
            vec = np.random.default_rng(3).standard_normal(384)
            new = [{"id": 20_000_001, "text": "A written document about kites.", "metadata": {"bucket": 2}},
                   {"id": "fresh/one", "text": "Another one, with a slash in its id.", "metadata": {"lang": "en"}},
                   {"id": ints[0], "text": "A replacement text.", "metadata": {"bucket": 2}},
                   {"id": "brought", "text": "Its vector was brought.", "metadata": {}, "vector": vec.tolist()}]
            r = c.put("/documents", json={"documents": new})
            assert r.status_code == 200, r.text
            for d in new:
                model[d["id"]] = (d["text"], d["metadata"])
            gone = [ints[1], ints[2], [i for i in model if isinstance(i, str)][0]]
            assert c.post("/documents/delete", json={"ids": gone}).json()["deleted"] == 3
            for g in gone:
                model.pop(g)
            assert_reads(c, model, gone)
            assert c.get("/documents/fresh/one").json()["text"] == "Another one, with a slash in its id."
            back = c.get("/documents/brought", params={"with_vector": "true"}).json()["vector"]
            np.testing.assert_allclose(back, vec / np.linalg.norm(vec), atol=1e-6)
            encoded = c.post("/encode", json={"texts": [model[ints[5]][0]]}).json()["vectors"][0]
            stored = c.post("/documents/get", json={"ids": [ints[5]], "with_vector": True}).json()
            assert float(np.dot(stored["documents"][0]["vector"], encoded)) > 0.999  # IVF's float16 codes
            # compaction folds the log into a version of its own; the reload serves it with nothing replayed
            r = indexer_cli("compact", "--root", str(root), "--threads", "1", "--no-eval")
            assert r.returncode == 0, r.stderr
            assert c.post("/admin/reload").json()["outcome"] == "swapped"
            assert_reads(c, model, gone)
            np.testing.assert_allclose(c.get("/documents/brought?with_vector=true").json()["vector"],
                                       vec / np.linalg.norm(vec), atol=1e-3)  # now in the IVF's float16 codes
    finally:
        kill(server)
    restarted = serve(tmp_path, root)
    try:
        with restarted.client() as c:
            assert_reads(c, model, gone)
    finally:
        stop_server(restarted)


def test_a_scroll_visits_each_live_document_once_while_writes_land(root: Path, corpus: Path,  # noqa: F811
                                                                   tmp_path: Path) -> None:
    model = model_of(corpus)
    churn = [i for n, i in enumerate(model) if n % 6 == 0]  # replaced, deleted and written again meanwhile
    stable = set(model) - set(churn)
    server = serve(tmp_path, root)
    rng = random.Random(7)
    try:
        with server.client() as c:
            seen: list[int | str] = []
            body: dict[str, Any] = {"limit": 25}
            while True:
                r = c.post("/documents/scroll", json=body)
                assert r.status_code == 200, r.text
                seen += [d["id"] for d in r.json()["documents"]]
                ups = [{"id": rng.choice([*churn, f"late-{len(seen)}-{k}"]), "text": f"churn text {len(seen)} {k}"}
                       for k in range(4)]
                ups.append({"id": rng.choice(sorted(stable, key=str)), "text": f"stable, replaced {len(seen)}"})
                assert c.put("/documents", json={"documents": ups}).status_code == 200
                assert c.post("/documents/delete", json={"ids": rng.sample(churn, 3)}).status_code == 200
                if r.json()["next_cursor"] is None:
                    break
                body["cursor"] = r.json()["next_cursor"]
            assert len(seen) == len(set(seen)), "a document visited twice"
            assert stable <= set(seen), "a document live throughout was missed"
            assert seen == order(seen)
    finally:
        stop_server(server)


@pytest.mark.parametrize("path,body,where", [
    ("get", {"ids": []}, ["body", "ids"]),
    ("get", {"ids": list(range(1001))}, ["body", "ids"]),
    ("get", {"ids": [1.5]}, ["body", "ids", 0, "int"]),
    ("get", {"ids": [1], "with_vector": "yes"}, ["body", "with_vector"]),
    ("scroll", {"limit": 0}, ["body", "limit"]),
    ("scroll", {"limit": 1001}, ["body", "limit"]),
    ("scroll", {"cursor": "not-a-cursor"}, ["body", "cursor"]),
    ("scroll", {"cursor": "WyJcdWQ4MDAiXQ"}, ["body", "cursor"]),  # base64 of ["\ud800"]: a lone surrogate
    ("scroll", {"filter": {"nope": {"near": 1}}}, ["body", "filter"]),
    ("count", {"filter": {"bucket": {"gt": "x"}}}, ["body", "filter"]),
    ("count", {"extra": 1}, ["body", "extra"]),
])
def test_bad_requests_are_422s_that_say_where(server_on_root: Server, path: str, body: dict, where: list) -> None:
    with server_on_root.client() as c:
        r = c.post(f"/documents/{path}", json=body)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert detail[0]["loc"] == where and detail[0]["msg"], detail


@pytest.fixture(scope="module")
def server_on_root(template: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:  # noqa: F811
    """A server on the built version, read only: the bad requests' tests share it."""
    import shutil

    tmp = tmp_path_factory.mktemp("reading-refusals")
    dst = Path(shutil.copytree(template, tmp / "root", symlinks=True))
    srv = serve(tmp, dst)
    yield srv
    stop_server(srv)


def test_a_path_id_names_the_id_it_spells_exactly(tmp_path: Path, tiny_exported: Path) -> None:
    """`GET /documents/{id}` on a collection created over HTTP: "0" and "-17" find the integer ids, while "-0",
    "+17", "017" and "-017" are strings only, as "007" is (never integer 0 or 17); an id holding a newline,
    percent-encoded, is read back as itself (not "nl" for "nl\\n", not a 404 of no route)."""
    cdir = tmp_path / "collections"
    cdir.mkdir()
    srv = start_server(tmp_path, {"STRATA_COLLECTIONS_DIR": str(cdir), "STRATA_MODELS_DIR": str(tiny_exported.parent),
                                  "STRATA_WATCH_INTERVAL_S": "0", "STRATA_WORKERS": "1"})
    try:
        with srv.client() as c:
            assert c.post("/collections", json={"name": "ids", "encoder": tiny_exported.name}).status_code == 201
            docs = [{"id": i, "text": f"document {i!r}"} for i in (0, 17, -17, "-0x", "nl", "nl\n", "x\ny")]
            assert c.put("/collections/ids/documents", json={"documents": docs}).status_code == 200
            for path, found in [("0", 0), ("17", 17), ("-17", -17), ("-0x", "-0x"), ("nl%0A", "nl\n"),
                                ("x%0Ay", "x\ny"), ("nl", "nl")]:
                assert c.get(f"/collections/ids/documents/{path}").json()["id"] == found
            for path in ("-0", "+17", "017", "-017", "00"):
                r = c.get(f"/collections/ids/documents/{path}")
                assert r.status_code == 404 and f"no document with id '{path}' in" in r.json()["detail"], (path, r.text)
            # its metrics' endpoint is the route's template, not how its id is parsed (`{doc_id:doc_id}`)
            metrics = c.get("/metrics").text
            assert 'endpoint="/collections/{name}/documents/{doc_id}"' in metrics and "doc_id:" not in metrics
    finally:
        stop_server(srv)
