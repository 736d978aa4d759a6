"""Writes over HTTP on `python -m service sharded` (the session's local Ray, a copy of the 2-shard Quora root):
`PUT /documents` and `POST /documents/delete` answer 200 once durable and are searchable at once, read back by id
(with vectors: a base document's from its shard) and counted; after a kill -9 of the API and a start again (new
shard deployments), every acknowledged write is served;
past its collection.json policy the service compacts the sharded version by itself (`indexer compact`, shard by
shard) and swaps to it, the writes still served; and the sharded answers then equal one process's over the same
version and the same log (the local backend's overlay, `LiveIndex`, replaying it here).

The in-process parity against a single-node collection, every replica of a shard and the routing by `id % N` are
test_sharded_writes.py's."""

from __future__ import annotations

import json
import shutil
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from indexer.runtime.layout import IndexRoot  # noqa: E402
from indexer.runtime.manifest import Manifest  # noqa: E402
from indexer.runtime.reading import Documents  # noqa: E402
from indexer.runtime.version import IndexVersion  # noqa: E402
from indexer.runtime.writes import Writes  # noqa: E402
from service.routers.reading import document_body  # noqa: E402
from tests.conftest import Server, stop_server  # noqa: E402
from tests.service.engine.test_sharded import QUERY, shard_apps, start_sharded  # noqa: E402

WRITTEN = [{"id": 900_001, "text": "Which volcano erupted in Iceland last spring?", "metadata": {"src": "w"}},
           {"id": "w-2", "text": "How do I repair a bicycle chain that keeps slipping?", "metadata": {"src": "w"}}]
MORE = [{"id": 900_003, "text": "What do penguins eat in the winter?", "metadata": {"src": "w"}},
        {"id": "w-4", "text": "Where can I learn to play the violin as an adult?", "metadata": {"src": "w"}}]
QUERIES = [QUERY, "best way to invest money in india", "volcano eruption iceland", "fix bicycle chain",
           "How can I lose weight fast?", "What is the meaning of life?"]


def search(srv: Server, query: str, k: int = 5) -> list[tuple[int | str, float]]:
    with srv.client() as c:
        r = c.post("/search", json={"query": query, "top_k": k, "mode": "dense"})
        assert r.status_code == 200, r.text
        return [(h["id"], h["score"]) for h in r.json()["hits"]]


def test_sharded_writes_are_durable_searchable_and_answer_like_one_process(
        ray_sharded: Path, ray_cluster: str, tmp_path: Path) -> None:
    root = tmp_path / "quora"
    shutil.copytree(ray_sharded.parent.parent, root, symlinks=True)
    # compacted by itself once 5 documents are written (the first writes are 3, then 2 more)
    (root / "collection.json").write_text(json.dumps({"compaction": {"written_docs": 5, "min_interval_s": 0}}))
    env = {"STRATA_COMPACT_INTERVAL_S": "0.5"}
    before_apps = shard_apps()
    srv = start_sharded(tmp_path, root, ray_cluster, env)
    try:
        base_top = search(srv, QUERY)[0][0]  # 16: replaced below
        deleted = search(srv, "best way to invest money in india")[0][0]
        with srv.client() as c:
            r = c.put("/documents", json={"documents": [*WRITTEN, {"id": base_top, "text": "A replaced question "
                                                                   "about rocks", "metadata": {"src": "w"}}]})
            assert r.status_code == 200, r.text
            assert (r.json()["created"], r.json()["replaced"]) == (2, 1)
            r = c.post("/documents/delete", json={"ids": [deleted]})
            assert r.status_code == 200 and r.json()["deleted"] == 1, r.text
            size = r.json()["index_size"]
            assert size == Manifest.load(ray_sharded).index.ntotal + 2 - 1
        assert search(srv, WRITTEN[0]["text"])[0][0] == 900_001  # at once
        assert search(srv, WRITTEN[1]["text"])[0][0] == "w-2"
        assert deleted not in {i for q in QUERIES for i, _ in search(srv, q, 10)}
        with srv.client() as c:
            assert c.get(f"/documents/{base_top}").json()["text"] == "A replaced question about rocks"
            assert c.post("/documents/count", json={"filter": {"src": "w"}}).json()["count"] == 3
            assert c.get(f"/documents/{deleted}").status_code == 404
        answers = {q: search(srv, q, 10) for q in QUERIES}
        read_ids = list(dict.fromkeys([900_001, "w-2", base_top, *(i for a in answers.values() for i, _ in a[:3])]))
        with srv.client() as c:  # a base document's vector from its shard's replica, a written one from the overlay
            r = c.get(f"/documents/{read_ids[3]}", params={"with_vector": "true"})
            assert r.status_code == 200 and len(r.json()["vector"]) == 384, r.text
            early = c.post("/documents/get", json={"ids": read_ids, "with_vector": True}).json()
        srv.proc.send_signal(signal.SIGKILL)  # no shutdown: the writes were durable before each 200
        srv.proc.wait(timeout=30)
        srv = start_sharded(tmp_path, root, ray_cluster, env)
        with srv.client() as c:
            ready = c.get("/ready").json()
            assert ready["index_size"] == size and ready["compaction"].get("last") is None
            assert c.get("/documents/w-2").json()["text"] == WRITTEN[1]["text"]
        again = {q: search(srv, q, 10) for q in QUERIES}
        assert [[i for i, _ in a] for a in again.values()] == [[i for i, _ in a] for a in answers.values()]
        with srv.client() as c:
            r = c.put("/documents", json={"documents": MORE})
            assert r.status_code == 200 and r.json()["created"] == 2, r.text
            deadline = time.monotonic() + 240
            while (last := c.get("/ready").json()["compaction"].get("last")) is None and time.monotonic() < deadline:
                time.sleep(1)
            assert last is not None and last["outcome"] == "swapped", (last, srv.log.read_text()[-3000:])
            ready = c.get("/ready").json()
            assert ready["index_version"] != ray_sharded.name and ready["index_size"] == size + 2
            assert c.post("/documents/count", json={"filter": {"src": "w"}}).json()["count"] == 5
        compacted = Manifest.load(IndexRoot(root).current_dir())
        assert compacted.version == ready["index_version"] and compacted.writes is not None
        assert len(compacted.index.shards) == 2 and compacted.index.ntotal == size + 2
        assert search(srv, WRITTEN[0]["text"])[0][0] == 900_001 and search(srv, MORE[1]["text"])[0][0] == "w-4"
        assert deleted not in {i for q in QUERIES for i, _ in search(srv, q, 10)}
        final = {q: search(srv, q, 10) for q in QUERIES}
        # one process over the same version and log: the local backend's overlay, at the same nprobe
        with srv.client() as c:
            vectors = np.asarray(c.post("/encode", json={"texts": QUERIES}).json()["vectors"], dtype=np.float32)
            late = c.post("/documents/get", json={"ids": read_ids, "with_vector": True}).json()
            scrolled = c.post("/documents/scroll", json={"limit": 3, "filter": {"src": "w"},
                                                         "with_vector": True}).json()
    finally:
        stop_server(srv)
        from ray import serve

        for app in shard_apps() - before_apps:  # the killed server's deployments too
            serve.delete(app)
    writes = Writes(root)
    local = IndexVersion(IndexRoot(root).current_dir())
    searcher = SimpleNamespace(index=local, version=local.version, manifest=local.manifest,
                               encoder=SimpleNamespace(meta=SimpleNamespace(onnx_sha256=local.manifest.model.onnx_sha256)))
    writes.attach(searcher)
    try:
        scores, ids = searcher.index.search(vectors, 10)
        want = [[(h.ext_id, h.score) for h in row] for row in searcher.index.hits(scores, ids)]
        docs = Documents(searcher.index)
        local = [document_body(d).model_dump() for d in docs.get(read_ids, with_vector=True) if d is not None]
        first = docs.scroll(3, None, {"src": "w"}, with_vector=True)
        local_scroll = [document_body(d).model_dump() for d in first.documents]
    finally:
        searcher.index.close()
        writes.close()
    # the documents read back, vectors included, are one process's: before compaction (base vectors from the shards,
    # written ones from the overlay) and after it (all from the shards)
    assert late["documents"] == local and not late["not_found"]
    strip = lambda docs: [{k: v for k, v in d.items() if k != "vector"} for d in docs]  # noqa: E731
    assert strip(early["documents"]) == strip(local)  # the vectors as the overlay held them, then as compacted codes
    assert np.allclose([d["vector"] for d in early["documents"]], [d["vector"] for d in local], atol=1e-3)
    assert scrolled["documents"] == local_scroll and scrolled["next_cursor"] == first.next_cursor
    got = list(final.values())
    assert [[i for i, _ in row] for row in got] == [[i for i, _ in row] for row in want]
    assert np.allclose([s for row in got for _, s in row], [s for row in want for _, s in row], atol=1e-4)
