"""Vectors a user brings, end to end on a real server (uvicorn on 127.0.0.1, real ONNX encoder, FAISS, SQLite):
a version built from a JSONL vector column (nothing encoded), `/search` by `"vector"` (dense alone, hybrid with
its text, lexical refused), `PUT /documents` with `"vector"` searchable at once, and bad vectors — another
dimension, NaN, all zeros — refused with a 422 naming the document, nothing written."""

from __future__ import annotations

import json
import shutil
import signal
import threading
from pathlib import Path

import httpx
import numpy as np
import pytest

from indexer.runtime.layout import IndexRoot
from indexer.runtime.manifest import Manifest
from service.lean_route import OFF_LOOP_BYTES
from tests.conftest import indexer_cli, start_server, stop_server
from tests.service.test_writes import until

N_DOCS = 400
DIM = 32  # the tiny encoder's
WORDS = "how what why can learn python money invest india sky blue sea green".split()


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, tiny_exported: Path) -> tuple[Path, np.ndarray, Manifest]:
    """An index root built from a JSONL vector column: (the root, its unit vectors, the version's manifest)."""
    tmp = tmp_path_factory.mktemp("brought")
    rng = np.random.default_rng(7)
    vecs = unit(rng, N_DOCS)
    data = tmp / "docs.jsonl"
    with open(data, "w") as f:
        for i in range(N_DOCS):
            text = " ".join(rng.choice(WORDS, 5)) + f" doc{i}"
            # unnormalised on purpose: the build normalises like the encoder does
            f.write(json.dumps({"id": i, "text": text, "bucket": i % 4, "vector": (vecs[i] * 3).tolist()}) + "\n")
    root = tmp / "root"
    r = indexer_cli("build", "--model", str(tiny_exported), "--data", str(data), "--root", str(root), "--index",
                    "flat", "--threads", "1")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "nothing encoded" in r.stdout
    version = IndexRoot(root).current_version()
    assert version is not None
    return root, vecs, Manifest.load(IndexRoot(root).version_dir(version))


@pytest.fixture(scope="module")
def served(built: tuple[Path, np.ndarray, Manifest]):
    root, vecs, manifest = built
    server = start_server(root.parent, {"STRATA_INDEX_ROOT": str(root), "STRATA_WATCH_INTERVAL_S": "0"})
    try:
        yield server, vecs, manifest
    finally:
        stop_server(server)


def test_a_version_built_from_brought_vectors_answers_them_exactly(served) -> None:
    server, vecs, manifest = served
    assert manifest.data.vectors == "brought" and manifest.build_seconds.encode_docs_s == 0.0
    with server.client() as c:
        for i in (0, 17, 399):
            r = c.post("/search", json={"vector": vecs[i].tolist(), "top_k": 3})
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["mode"] == "dense" and body["encode_ms"] == 0
            assert body["hits"][0]["id"] == i and body["hits"][0]["score"] == pytest.approx(1.0, abs=1e-5)
        # with a filter, and scaled: the query vector is normalised too
        r = c.post("/search", json={"vector": (vecs[5] * 0.01).tolist(), "filter": {"bucket": 1}, "top_k": 2})
        assert r.status_code == 200 and r.json()["hits"][0]["id"] == 5, r.text
        # vector + text: hybrid, the text feeds BM25
        r = c.post("/search", json={"vector": vecs[9].tolist(), "query": "doc9", "top_k": 1})
        assert r.status_code == 200 and r.json()["mode"] == "hybrid" and r.json()["hits"][0]["id"] == 9, r.text
        for body, says in (({"vector": vecs[0].tolist(), "mode": "lexical"}, "needs the query's text"),
                           ({"vector": vecs[0].tolist(), "mode": "hybrid"}, "needs the query's text"),
                           ({"vector": vecs[0].tolist(), "query": "x", "mode": "dense"}, "together"),
                           ({"vector": vecs[0].tolist(), "queries": ["x"]}, "not with 'queries'"),
                           ({"vector": [0.1] * (DIM + 1)}, f"dimension {DIM}"),
                           ({"vector": [0.0] * DIM}, "all zeros")):
            r = c.post("/search", json=body)
            assert r.status_code == 422 and says in r.text, (body.get("mode"), r.text)
        nan = c.post("/search", content=json.dumps({"vector": [float("nan")] * DIM}),
                     headers={"content-type": "application/json"})
        assert nan.status_code == 422 and "NaN or infinity" in nan.text, nan.text
        # refused by the body's schema (service.lean_route: FastAPI's own 422s), each naming where
        not_numbers = b'{"vector": ["x"' + b", 0.1" * (DIM - 1) + b"]}"
        for raw, loc, kind in ((not_numbers, ["body", "vector", 0], "float_type"),
                               (b'{"vector": [' + b"0.1, " * 8192 + b"0.1]}", ["body", "vector"], "too_long"),
                               (b'{"vector": [0.1, 0.2', ["body", 20], "json_invalid"),
                               (b'{"vector": [0.1], "top_k": "3"}', ["body", "top_k"], "int_type")):
            r = c.post("/search", content=raw, headers={"content-type": "application/json"})
            assert r.status_code == 422 and r.json()["detail"][0]["type"] == kind, r.text
            assert r.json()["detail"][0]["loc"] == loc, r.text


def test_put_documents_with_vectors_is_searchable_and_bad_ones_write_nothing(served) -> None:
    server, _, _ = served
    rng = np.random.default_rng(11)
    new = unit(rng, 3)
    with server.client() as c:
        size = c.post("/search", json={"vector": new[0].tolist()}).json()  # served before any write
        assert size["hits"]
        docs = [{"id": f"v{k}", "text": f"brought vector {k}", "metadata": {"bucket": 9}, "vector": new[k].tolist()}
                for k in range(2)] + [{"id": "encoded", "text": "how to learn python"}]  # mixed: one encoded
        r = c.put("/documents", json={"documents": docs})
        assert r.status_code == 200, r.text
        after = r.json()["index_size"]
        assert r.json()["created"] == 3
        hit = c.post("/search", json={"vector": new[1].tolist(), "top_k": 1}).json()["hits"][0]
        assert hit["id"] == "v1" and hit["score"] == pytest.approx(1.0, abs=1e-5)
        for bad, says in (([0.5] * (DIM - 1), f"dimension {DIM - 1}"), ([0.0] * DIM, "all zeros")):
            body = {"documents": [{"id": "ok", "text": "fine", "vector": new[2].tolist()},
                                  {"id": "bad", "text": "not fine", "vector": bad}]}
            r = c.put("/documents", json=body)
            assert r.status_code == 422 and "'bad'" in r.text and says in r.text, r.text
            assert r.json()["detail"][0]["loc"] == ["body", "documents", 1, "vector"]
        r = c.put("/documents", content=json.dumps({"documents": [{"id": "nan", "text": "t",
                                                                   "vector": [float("inf")] * DIM}]}),
                  headers={"content-type": "application/json"})
        assert r.status_code == 422 and "'nan'" in r.text, r.text
        # nothing of the refused writes is there: "ok" was in each refused body
        assert c.post("/search", json={"vector": new[2].tolist(), "top_k": 1}).json()["hits"][0]["id"] != "ok"
        r = c.put("/documents", json={"documents": [{"id": "v0", "text": "brought vector 0 again",
                                                     "vector": new[0].tolist()}]})
        assert r.json()["index_size"] == after and r.json()["replaced"] == 1
    assert after == N_DOCS + 3


def test_huge_and_tiny_vectors_are_written_and_searched_normalised(served) -> None:
    """Norms in float64, one rule for writes and queries: [1e19 ...] (its float32 sum of squares overflows) is
    stored and searched as the unit vector it points along, [2e-38 ...] (it underflows) is accepted, and a value
    past float32's range is a 422 saying so."""
    server, _, _ = served
    direction = unit(np.random.default_rng(23), 1)[0].astype(np.float64)
    tiny = [2e-38] * (DIM - 1) + [0.0]
    with server.client() as c:
        r = c.put("/documents", json={"documents": [{"id": "big", "text": "huge",
                                                     "vector": (direction * 1e19).tolist()},
                                                    {"id": "tiny", "text": "small", "vector": tiny}]})
        assert r.status_code == 200, r.text
        for query, expect in (((direction * 1e19).tolist(), "big"), (direction.tolist(), "big"), (tiny, "tiny")):
            r = c.post("/search", json={"vector": query, "top_k": 1})
            assert r.status_code == 200, r.text
            hit = r.json()["hits"][0]
            assert hit["id"] == expect and hit["score"] == pytest.approx(1.0, abs=1e-5), r.text
        for body in ({"vector": [1e39] * DIM},
                     {"documents": [{"id": "over", "text": "t", "vector": [1e39] * DIM}]}):
            r = (c.post("/search", json=body) if "vector" in body else c.put("/documents", json=body))
            assert r.status_code == 422 and "beyond float32's range" in r.text, r.text


def parent_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))


def test_true_and_false_in_a_vector_are_a_422_naming_the_item(served) -> None:
    """JSON true/false (and a number in a string) inside a query's or a document's `vector` are refused, each 422
    naming the item, nothing written (they were taken as 1.0/0.0): in a search, in a small write and in a large one
    (past `OFF_LOOP_BYTES`: validated in the body process). JSON integers are numbers and stay accepted."""
    server, vecs, _ = served
    with server.client() as c:
        ints = c.post("/search", json={"vector": [1] + [0] * (DIM - 1), "top_k": 1})
        assert ints.status_code == 200 and ints.json()["hits"], ints.text
        for bad in (True, False, "0.5"):
            vector = [0.1] * DIM
            vector[3] = bad
            r = c.post("/search", json={"vector": vector})
            assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "vector", 3], r.text
            small = {"documents": [{"id": "small", "text": "a small write", "vector": vector}]}
            r = c.put("/documents", json=small)
            assert r.status_code == 422, r.text
            assert r.json()["detail"][0]["loc"] == ["body", "documents", 0, "vector", 3], r.text
        new = unit(np.random.default_rng(13), 128).tolist()
        new[127][5] = True
        docs = [{"id": f"large{i}", "text": f"written {i} " + "padding " * 40, "vector": new[i]} for i in range(128)]
        body = json.dumps({"documents": docs}).encode()
        assert len(body) >= OFF_LOOP_BYTES
        r = c.put("/documents", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"] == ["body", "documents", 127, "vector", 5], r.text
        for doc_id, vector in (("small", [0.1] * DIM), ("large0", new[0])):  # nothing of them written
            hit = c.post("/search", json={"vector": vector, "top_k": 1}).json()["hits"][0]
            assert hit["id"] != doc_id, hit


def test_searches_are_answered_while_a_large_write_body_is_parsed(built, tmp_path: Path) -> None:
    """A PUT of 128 documents with vectors (a body past `OFF_LOOP_BYTES`) is parsed off the event loop, in a process
    of its own (`service.body_process`: its parse holds no GIL the searches wait for): held in its parse
    (`tests.service.held_service`, for as long as the test wants), the server still answers a search; once
    released, the write is acknowledged and searchable at once. Parsed on the loop, the search would wait for it."""
    root, vecs, _ = built
    shutil.copytree(root, tmp_path / "root", symlinks=True)
    hold = tmp_path / "hold-body"
    hold.touch()
    server = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(tmp_path / "root"), "STRATA_WATCH_INTERVAL_S": "0",
                                     "STRATA_TEST_HOLD_BODY": str(hold)}, module="tests.service.held_service")
    new = unit(np.random.default_rng(11), 128)
    docs = [{"id": 10_000 + i, "text": f"written {i} " + "padding " * 40, "vector": new[i].tolist()}
            for i in range(128)]
    body = json.dumps({"documents": docs}).encode()
    assert len(body) >= OFF_LOOP_BYTES
    put: list[httpx.Response] = []
    writer = threading.Thread(target=lambda: put.append(httpx.put(
        f"{server.url}/documents", content=body, headers={"content-type": "application/json"}, timeout=120)))
    try:
        writer.start()
        until(Path(f"{hold}.entered").exists, "the write's body in its parse", timeout=60)
        parser = int(Path(f"{hold}.entered").read_text())
        assert parser != server.proc.pid and parent_of(parser) == server.proc.pid, parser  # a child
        with httpx.Client(base_url=server.url, timeout=30) as c:
            r = c.post("/search", json={"vector": vecs[3].tolist(), "top_k": 1})
            assert r.status_code == 200 and r.json()["hits"][0]["id"] == 3, r.text
            assert writer.is_alive() and not put  # the write is still held in its parse
            hold.unlink()
            writer.join(timeout=120)
            assert put and put[0].status_code == 200 and put[0].json()["upserted"] == 128, put and put[0].text
            r = c.post("/search", json={"vector": new[77].tolist(), "top_k": 1})
            assert r.status_code == 200 and r.json()["hits"][0]["id"] == 10_077, r.text
    finally:
        hold.unlink(missing_ok=True)
        stop_server(server)


def children_of(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if parent_of(int(entry.name)) == pid:
                    out.append(int(entry.name))
            except (OSError, StopIteration):
                continue
    return out


def test_the_body_process_goes_with_a_killed_server(built, tmp_path: Path) -> None:
    """The child that parses large bodies (and multiprocessing's resource tracker beside it) ends when the API is
    killed with SIGKILL: no process is left behind waiting on a pipe nobody writes."""
    root, _, _ = built
    shutil.copytree(root, tmp_path / "root", symlinks=True)
    server = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(tmp_path / "root"), "STRATA_WATCH_INTERVAL_S": "0"})
    try:
        until(lambda: len(children_of(server.proc.pid)) >= 1, "the body process", timeout=60)
        children = children_of(server.proc.pid)
        assert any(b"multiprocessing" in Path(f"/proc/{c}/cmdline").read_bytes() for c in children), children
    finally:
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait(timeout=30)
        stop_server(server)
    until(lambda: not any(running(c) for c in children), "the body process to end after its parent's SIGKILL",
          timeout=15)


def running(pid: int) -> bool:
    """A process that exists and is not a zombie (one whose new parent has not reaped it yet has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
