"""A write's response on a version built with passages (`indexer build --chunk`), over HTTP (uvicorn on 127.0.0.1,
ONNX Runtime, FAISS, SQLite, the write log): `upserted`, `created`, `replaced`, `deleted` and `missing` count
documents, as on a version of whole documents; the passage rows a write wrote and removed are counted apart
(`passages_written`, `passages_deleted`), and `index_size` is GET /ready's (the served passages). An id given twice
in one write is replaced by its later occurrence, the earlier one's passages included. Both paths, `/documents`
and `/collections/default/documents`, run the one handler. 13 short documents, a flat index: seconds."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from indexer.build import BuildConfig, build
from tests.conftest import Server, start_server
from tests.service.engine.test_passages import corpus, visitors, write_jsonl


@pytest.fixture()
def root(tmp_path: Path, minilm_mean: Path) -> Path:
    root = tmp_path / "root"
    build(BuildConfig(model_dir=minilm_mean, data=str(write_jsonl(tmp_path / "docs.jsonl", corpus())), root=root,
                      index="flat", evaluate=False, chunk=24, overlap=4, threads=1))
    return root


def serve(tmp: Path, root: Path) -> Server:
    return start_server(tmp, {"STRATA_INDEX_ROOT": str(root), "STRATA_WATCH_INTERVAL_S": "0", "STRATA_THREADS": "1",
                              "STRATA_WORKERS": "2"})


def counts(c: httpx.Client) -> tuple[int, int, int]:
    """(documents, passages, index_size) GET /ready says are served."""
    r = c.get("/ready").json()
    return r["documents"], r["passages"], r["index_size"]


def passages_of(c: httpx.Client, doc: Any) -> int:
    return len(c.get(f"/documents/{doc}").json()["passages"])


def test_a_writes_counts_on_a_version_of_passages_count_documents_and_its_passages_apart(root: Path,
                                                                                       tmp_path: Path) -> None:
    server = serve(tmp_path, root)
    try:
        with httpx.Client(base_url=server.url, timeout=120) as c:
            docs0, rows0, _ = counts(c)
            assert docs0 == 13 and rows0 > 13 and passages_of(c, 9) == 6
            # 9 (6 passages) replaced by 1 passage; a new long document; "dup" twice: new, then replaced at once
            r = c.put("/documents", json={"documents": [
                {"id": 9, "text": "Comets are icy visitors.", "metadata": {"topic": "space"}},
                {"id": "long", "text": visitors(8), "metadata": {}},
                {"id": "dup", "text": visitors(6) + " Hailstorms are rare.", "metadata": {}},
                {"id": "dup", "text": "A short second text.", "metadata": {}}]})
            assert r.status_code == 200, r.text
            body = r.json()
            assert (body["upserted"], body["created"], body["replaced"]) == (4, 2, 2), body
            long_n = passages_of(c, "long")
            assert long_n > 1 and passages_of(c, "dup") == 1 and passages_of(c, 9) == 1
            # the earlier "dup"'s passages: written, then removed past the later one's count in the same write
            hail = c.post("/search", json={"query": "hailstorms rare", "mode": "lexical", "passages": True,
                                           "top_k": 50}).json()["hits"]
            assert not [h for h in hail if h["id"] == "dup" and h["passage"]["index"] > 0], hail
            dup_first = body["passages_written"] - 1 - long_n - 1
            assert dup_first > 1 and body["passages_deleted"] == 5 + dup_first - 1, body
            docs1, rows1, size1 = counts(c)
            assert (docs1, size1) == (15, rows1) and body["index_size"] == rows1
            assert rows1 - rows0 == (1 - 6) + long_n + 1  # 9: 6 passages → 1; "long" and "dup" new
            # the collection's path, the same handler: an id given twice is deleted once, then missing
            r = c.post("/collections/default/documents/delete", json={"ids": [9, "long", "nope", "long"]})
            assert r.status_code == 200, r.text
            body = r.json()
            assert (body["deleted"], body["missing"], body["passages_deleted"]) == (2, 2, 1 + long_n), body
            assert counts(c)[0] == 13 and body["index_size"] == counts(c)[2]
    finally:
        server.proc.send_signal(signal.SIGTERM)
        server.proc.wait(timeout=60)


def test_ids_and_metadata_names_that_spell_a_passage_rows_are_refused_and_name_no_document(root: Path,
                                                                                          tmp_path: Path) -> None:
    """A passage row's id is `"\\x1fP"` then `[document id, n]`, its offsets under the metadata name
    `"\\x1fpassage"`: a document written with such an id or name is a 422 saying why (its id would read as another
    document's passage, its value would be dropped); reading or deleting such an id finds no document — not document
    9 read from its passage 1 (nor 0), none of its passages deleted."""
    server = serve(tmp_path, root)
    try:
        with httpx.Client(base_url=server.url, timeout=120) as c:
            assert passages_of(c, 9) == 6
            for body in ({"id": "\x1fP[9,0]", "text": "Comets.", "metadata": {}},
                         {"id": "kite", "text": "Kites.", "metadata": {"\x1fpassage": [0, 6, 1]}}):
                r = c.put("/documents", json={"documents": [body]})
                assert r.status_code == 422 and ("U+001F then 'P'" in r.text or "is reserved" in r.text), r.text
            for raw in ("%1FP%5B9%2C1%5D", "%1FP%5B9%2C0%5D"):
                r = c.get(f"/documents/{raw}")
                assert r.status_code == 404, r.text
            r = c.post("/documents/get", json={"ids": ["\x1fP[9,0]", "\x1fP[9,1]"]})
            assert r.json() == {"documents": [], "not_found": ["\x1fP[9,0]", "\x1fP[9,1]"]}, r.text
            r = c.post("/documents/delete", json={"ids": ["\x1fP[9,0]", "\x1fP[9,5]"]})  # nothing of 9's
            assert (r.json()["deleted"], r.json()["missing"], r.json()["passages_deleted"]) == (0, 2, 0), r.text
            assert c.get("/ready").json()["documents"] == 13 and passages_of(c, 9) == 6
    finally:
        server.proc.send_signal(signal.SIGTERM)
        server.proc.wait(timeout=60)
