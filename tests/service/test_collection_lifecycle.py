"""Collections created and deleted over HTTP (`POST /collections`, `DELETE /collections/{name}`) and from the CLI
(`indexer collection --create/--delete`), on real servers (`python -m service` on 127.0.0.1, a tiny exported
encoder, real files): a new collection serves at once (an empty search is 200 with no hits, writes are durable),
both survive a restart, and a create or delete cut short leaves the collection whole or nothing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from indexer.runtime.collection_dirs import CREATING_PREFIX, TRASH_PREFIX
from indexer.runtime.empty_version import create_empty_version
from strata_client import Client
from strata_client.errors import ConflictError, NotFoundError, ValidationError
from tests.conftest import QUORA_LIKE_WORDS, REPO, Server, start_server, stop_server

ADMIN, READER, GARDEN_ADMIN = "admin-key-0123", "reader-key-0123", "garden-admin-0123"
KEYS = f"{ADMIN}:admin,{READER},{GARDEN_ADMIN}:admin@garden"
AUTH = {"Authorization": f"Bearer {ADMIN}"}
TEXTS = [" ".join(QUORA_LIKE_WORDS[(i * 5 + j) % len(QUORA_LIKE_WORDS)] for j in range(5)) for i in range(4)]


@pytest.fixture
def folders(tmp_path: Path, tiny_exported: Path) -> Iterator[dict[str, Path]]:
    cdir = tmp_path / "collections"
    cdir.mkdir()
    yield {"collections": cdir, "models": tiny_exported.parent, "encoder": tiny_exported, "tmp": tmp_path}


def basis(i: int, dim: int) -> list[float]:
    return [1.0 if j == i else 0.01 for j in range(dim)]


def serve(folders: dict[str, Path]) -> Server:
    return start_server(folders["tmp"], {"STRATA_COLLECTIONS_DIR": str(folders["collections"]),
                                         "STRATA_MODELS_DIR": str(folders["models"]), "STRATA_API_KEYS": KEYS,
                                         "STRATA_WATCH_INTERVAL_S": "0", "STRATA_WORKERS": "1"})


def test_create_write_search_restart_delete(folders: dict[str, Path]) -> None:
    encoder = folders["encoder"].name
    srv = serve(folders)
    try:
        with srv.client() as c:
            unknown = c.post("/collections", json={"name": "notes", "encoder": "no-such-encoder"}, headers=AUTH)
            assert unknown.status_code == 422 and encoder in unknown.text, unknown.text  # the known ones listed
            assert c.post("/collections", json={"name": "Bad Name!", "encoder": encoder},
                          headers=AUTH).status_code == 422
            bad_settings = c.post("/collections", json={"name": "notes", "encoder": encoder,
                                                        "settings": {"max_top_k": 0}}, headers=AUTH)
            assert bad_settings.status_code == 422 and "max_top_k" in bad_settings.text
            for key in (READER, GARDEN_ADMIN):  # creating needs admin on every collection
                denied = c.post("/collections", json={"name": "garden", "encoder": encoder},
                                headers={"Authorization": f"Bearer {key}"})
                assert denied.status_code == 403 and "admin" in denied.json()["detail"]
            assert not any(folders["collections"].iterdir())  # nothing refused left anything

            made = c.post("/collections", json={"name": "notes", "encoder": encoder,
                                                "settings": {"max_top_k": 20}}, headers=AUTH)
            assert made.status_code == 201, made.text
            info = made.json()
            assert (info["name"], info["documents"], info["encoder"], info["index_kind"]) == ("notes", 0, encoder,
                                                                                           "flat")
            assert c.get("/collections/notes", headers=AUTH).json() == info  # as GET shows it
            assert c.post("/collections", json={"name": "notes"}, headers=AUTH).status_code == 409
            assert c.get("/collections/notes/config", headers=AUTH).json()["max_top_k"] == 20

            empty = c.post("/collections/notes/search", json={"query": TEXTS[0]}, headers=AUTH)
            assert empty.status_code == 200 and empty.json()["hits"] == [], empty.text
            # the tiny random encoder does not rank texts: documents bring their vectors (one text is encoded)
            docs = [{"id": f"d{i}", "text": t, "metadata": {"n": i}, "vector": basis(i, info["dim"])}
                    for i, t in enumerate(TEXTS[:-1])] + [{"id": "encoded", "text": TEXTS[-1]}]
            wrote = c.put("/collections/notes/documents", json={"documents": docs}, headers=AUTH)
            assert wrote.status_code == 200 and wrote.json()["created"] == len(TEXTS), wrote.text
            hits = c.post("/collections/notes/search", json={"vector": basis(2, info["dim"]), "top_k": 1},
                          headers=AUTH).json()
            assert hits["hits"][0]["id"] == "d2"
    finally:
        stop_server(srv)

    srv = serve(folders)  # a restart serves what was created and written
    try:
        with srv.client() as c:
            assert c.get("/collections/notes", headers=AUTH).json()["documents"] == len(TEXTS)
            dim = c.get("/collections/notes", headers=AUTH).json()["dim"]
            hits = c.post("/collections/notes/search", json={"vector": basis(1, dim), "top_k": 1},
                          headers=AUTH).json()
            assert hits["hits"][0]["id"] == "d1"
            hit = c.post("/collections/notes/search", json={"query": TEXTS[0], "filter": {"n": 0}},
                         headers=AUTH).json()
            assert [h["id"] for h in hit["hits"]] == ["d0"]
            assert c.delete("/collections/notes", headers={"Authorization": f"Bearer {READER}"}).status_code == 403
            assert 'strata_collection_ready{collection="notes"} 1.0' in c.get("/metrics").text
            gone = c.delete("/collections/notes", headers=AUTH)
            assert gone.status_code == 200 and gone.json() == {"name": "notes", "deleted": True}
            assert c.get("/collections/notes", headers=AUTH).status_code == 404
            metrics = c.get("/metrics").text
            assert 'collection="notes"' not in metrics  # no series of it left (ready 1 was)
            assert "\nstrata_ready 0.0" in metrics  # it was the default (the only collection): nothing serves
            assert c.post("/collections/notes/search", json={"query": TEXTS[0]}, headers=AUTH).status_code == 404
            assert c.delete("/collections/notes", headers=AUTH).status_code == 404
    finally:
        stop_server(srv)
    assert list(folders["collections"].iterdir()) == []  # nothing left on the disk

    srv = serve(folders)  # and a restart does not bring it back; the client creates and deletes the same way
    try:
        with srv.client() as c:
            assert c.get("/collections", headers=AUTH).json()["collections"] == []
        with Client(srv.url, api_key=ADMIN) as client:
            made = client.create_collection("faq", encoder=folders["encoder"].name, settings={"max_top_k": 9})
            assert (made.name, made.documents, made.ready) == ("faq", 0, True)
            with pytest.raises(ConflictError, match="already exists"):
                client.create_collection("faq", encoder=folders["encoder"].name)
            with pytest.raises(ValidationError, match=folders["encoder"].name):
                client.create_collection("other", encoder="no-such-encoder")
            assert client.with_collection("faq").search(TEXTS[0], top_k=9).hits == []
            client.delete_collection("faq")
            with pytest.raises(NotFoundError):
                client.delete_collection("faq")
    finally:
        stop_server(srv)


def test_a_cut_short_create_or_delete_leaves_the_collection_or_nothing_and_the_cli_makes_what_is_served(
        folders: dict[str, Path]) -> None:
    """What a crash leaves, made by hand, then a restart: a create cut before its rename (a hidden staging root,
    complete or not), a delete cut after its rename (the tombstone, not yet removed), a delete cut before it (the
    collection whole). Beside them, a collection `indexer collection --create` made: served like one made over HTTP."""
    cdir, encoder = folders["collections"], folders["encoder"]
    create_empty_version(cdir / f"{CREATING_PREFIX}half-0001", encoder)  # a whole root, not yet renamed
    (cdir / f"{CREATING_PREFIX}early-0002").mkdir()  # cut before the version was written
    create_empty_version(cdir / f"{TRASH_PREFIX}old-0003", encoder)  # renamed away, not yet removed
    create_empty_version(cdir / "kept", encoder)  # a delete cut before its rename: the collection, whole
    create_empty_version(cdir / ".copy.restoring-0004", encoder)  # a restore cut before its rename
    (cdir / ".upload-copy-0005.tar").write_bytes(b"an upload's first bytes")  # an upload cut before its restore

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "indexer.cli", "collection", "--root", str(cdir / "faq"), *args],
                              cwd=REPO, capture_output=True, text=True, timeout=120,
                              env=os.environ | {"STRATA_MODELS_DIR": str(folders["models"])})

    made = cli("--create", "--encoder", encoder.name, "--set", "max_top_k=7")
    assert made.returncode == 0, made.stderr
    again = cli("--create", "--encoder", encoder.name)
    assert again.returncode == 2 and "already exists" in again.stderr
    unknown = cli("--create", "--encoder", "no-such-encoder")
    assert unknown.returncode == 2 and encoder.name in unknown.stderr
    srv = serve(folders)
    try:
        with srv.client() as c:
            listed = c.get("/collections", headers=AUTH).json()["collections"]
            assert [(x["name"], x["ready"]) for x in listed] == [("faq", True), ("kept", True)]
            for name in ("half", "early", "old"):
                assert c.get(f"/collections/{name}", headers=AUTH).status_code == 404
            assert c.get("/collections/faq/config", headers=AUTH).json()["max_top_k"] == 7
            r = c.post("/collections/faq/search", json={"query": TEXTS[0], "top_k": 7}, headers=AUTH)
            assert r.status_code == 200 and r.json()["hits"] == []
            # the same name can be created after the leftovers are gone
            assert c.post("/collections", json={"name": "half", "encoder": encoder.name},
                          headers=AUTH).status_code == 201
    finally:
        stop_server(srv)
    assert sorted(p.name for p in cdir.iterdir()) == ["faq", "half", "kept"]  # the leftovers were removed at startup
    gone = cli("--delete")
    assert gone.returncode == 0, gone.stderr
    assert not (cdir / "faq").exists() and cli("--delete").returncode == 2


def test_writes_to_a_server_with_nothing_built_are_a_clear_409(tmp_path: Path) -> None:
    """`PUT /documents` on a root with no version: a 409 saying how to get one (it was a 500 AssertionError)."""
    srv = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(tmp_path / "empty-root"), "STRATA_WATCH_INTERVAL_S": "0"})
    try:
        with srv.client() as c:
            r = c.put("/documents", json={"documents": [{"id": 1, "text": TEXTS[0]}]})
            assert r.status_code == 409 and "POST /collections" in r.json()["detail"], r.text
            r = c.post("/documents/delete", json={"ids": [1]})
            assert r.status_code == 409, r.text
            r = c.post("/collections", json={"name": "x"})  # one root served: no collections folder to create in
            assert r.status_code == 409 and "STRATA_COLLECTIONS_DIR" in r.json()["detail"], r.text
            r = c.post("/collections/x/snapshots/upload", content=b"an archive",  # restoring one creates one too
                       headers={"Content-Type": "application/x-tar"})
            assert r.status_code == 409 and "STRATA_COLLECTIONS_DIR" in r.json()["detail"], r.text
    finally:
        stop_server(srv)


def test_a_delete_waits_for_the_snapshot_being_made_of_the_collection(folders: dict[str, Path]) -> None:
    """`DELETE /collections/{name}` while a snapshot of it is being made (held, `tests.service.held_service`, after
    the version's files are open and before the write log is copied): the delete waits for it, the snapshot is
    made whole (201), then the collection is gone. (The delete removed the folder under the snapshot: a 500.)"""
    hold = folders["tmp"] / "hold"
    srv = start_server(folders["tmp"], {"STRATA_COLLECTIONS_DIR": str(folders["collections"]),
                                        "STRATA_MODELS_DIR": str(folders["models"]), "STRATA_API_KEYS": KEYS,
                                        "STRATA_WATCH_INTERVAL_S": "0", "STRATA_WORKERS": "1",
                                        "STRATA_TEST_HOLD_SNAPSHOT": str(hold)}, module="tests.service.held_service")
    answers: dict[str, httpx.Response] = {}

    def call(what: str, method: str, path: str) -> None:
        with srv.client() as c:
            answers[what] = c.request(method, path, headers=AUTH)

    try:
        with srv.client() as c:
            made = c.post("/collections", json={"name": "notes", "encoder": folders["encoder"].name}, headers=AUTH)
            assert made.status_code == 201, made.text
            wrote = c.put("/collections/notes/documents", json={"documents": [{"id": "n1", "text": TEXTS[0]}]},
                          headers=AUTH)
            assert wrote.status_code == 200, wrote.text
            hold.touch()
            snap = threading.Thread(target=call, args=("snapshot", "POST", "/collections/notes/snapshots"))
            snap.start()
            deadline = time.monotonic() + 30
            while not Path(f"{hold}.entered").exists():
                assert time.monotonic() < deadline, "the snapshot never reached its hold"
                time.sleep(0.01)
            delete = threading.Thread(target=call, args=("delete", "DELETE", "/collections/notes"))
            delete.start()
            time.sleep(0.5)
            assert "delete" not in answers  # it waits for the snapshot
            hold.unlink()
            snap.join(30)
            delete.join(30)
            assert answers["snapshot"].status_code == 201, answers["snapshot"].text
            assert answers["delete"].status_code == 200, answers["delete"].text
            assert c.get("/collections/notes", headers=AUTH).status_code == 404
            assert c.post("/collections/notes/snapshots", headers=AUTH).status_code == 404
    finally:
        hold.unlink(missing_ok=True)
        stop_server(srv)
    assert list(folders["collections"].iterdir()) == []


def test_a_collection_left_unserved_by_its_collection_json_can_be_deleted_and_made_again(
        folders: dict[str, Path]) -> None:
    """A collection whose collection.json stopped validating is not served (404 saying why); `DELETE` removes it
    like any other, after which its name can be created again. (The delete was a 404 while the create was a 409:
    only the disk could free the name.)"""
    create_empty_version(folders["collections"] / "notes", folders["encoder"])
    (folders["collections"] / "notes" / "collection.json").write_text('{"mode": 5}')
    create_empty_version(folders["collections"] / "gone", folders["encoder"])
    (folders["collections"] / "gone" / "collection.json").write_text('{"mode": 5}')
    srv = serve(folders)
    try:
        with srv.client() as c:
            unserved = c.get("/collections/notes", headers=AUTH)
            assert unserved.status_code == 404 and "collection.json" in unserved.json()["detail"], unserved.text
            assert c.delete("/collections/notes", headers={"Authorization": f"Bearer {READER}"}).status_code == 403
            gone = c.delete("/collections/notes", headers=AUTH)
            assert gone.status_code == 200 and gone.json() == {"name": "notes", "deleted": True}, gone.text
            assert not (folders["collections"] / "notes").exists()
            assert c.delete("/collections/notes", headers=AUTH).status_code == 404
            made = c.post("/collections", json={"name": "notes", "encoder": folders["encoder"].name}, headers=AUTH)
            assert made.status_code == 201 and made.json()["ready"], made.text
            shutil.rmtree(folders["collections"] / "gone")  # removed by hand while refused: a 404, not a 500
            assert c.delete("/collections/gone", headers=AUTH).status_code == 404
    finally:
        stop_server(srv)


def test_a_collection_created_over_http_searches_its_written_texts_by_bm25_before_and_after_its_first_compaction(
        folders: dict[str, Path]) -> None:
    srv = start_server(folders["tmp"], {"STRATA_COLLECTIONS_DIR": str(folders["collections"]),
                                        "STRATA_MODELS_DIR": str(folders["models"]), "STRATA_API_KEYS": KEYS,
                                        "STRATA_WATCH_INTERVAL_S": "0", "STRATA_COMPACT_INTERVAL_S": "0.2"})
    # the tiny random encoder does not rank texts: what finds "guitar horse" here is BM25
    texts = {"a": "how can i learn guitar", "b": "best guitar for a child who rides a horse", "c": "blue sea green sky",
             "d": "guitar guitar guitar road"}
    try:
        with srv.client() as c:
            made = c.post("/collections", json={"name": "notes", "encoder": folders["encoder"].name}, headers=AUTH)
            assert made.status_code == 201, made.text
            wrote = c.put("/collections/notes/documents", headers=AUTH, json={"documents": [
                {"id": k, "text": t} for k, t in texts.items()]})
            assert wrote.status_code == 200, wrote.text

            def lexical(query: str) -> list[str]:
                r = c.post("/collections/notes/search", json={"query": query, "mode": "lexical"}, headers=AUTH)
                assert r.status_code == 200, r.text
                return [h["id"] for h in r.json()["hits"]]

            before = lexical("guitar horse")  # scored by the overlay: no statistics to lend yet
            assert before[0] == "b" and set(before) == {"a", "b", "d"}, before
            default = c.post("/collections/notes/search", json={"query": "guitar horse"}, headers=AUTH).json()
            assert default["mode"] == "hybrid" and len(default["hits"]) == len(texts), default

            def compacted() -> dict | None:
                last = c.get("/collections/notes", headers=AUTH).json()["compaction"]["last"]
                return last if last and last["outcome"] == "swapped" else None
            deadline = time.monotonic() + 120
            while not compacted():  # due at once: the version held no documents
                assert time.monotonic() < deadline, c.get("/collections/notes", headers=AUTH).text
                time.sleep(0.2)
            current = (folders["collections"] / "notes" / "current").resolve()
            lex = json.loads((current / "manifest.json").read_text())["lexical"]
            assert (lex["engine"], lex["n_docs"]) == ("bm25s", len(texts)) and lex["engine_reason"].startswith("auto:")
            after = lexical("guitar horse")  # from the version's own BM25 index now
            assert after[0] == "b" and set(after) == {"a", "b", "d"}, after
            assert lexical("sky") == ["c"]
    finally:
        stop_server(srv)


def test_ready_is_503_naming_the_default_collection_when_it_is_deleted_or_not_there(folders: dict[str, Path]) -> None:
    """STRATA_DEFAULT_COLLECTION=notes, served with `faq` beside it: `/ready` 200; once notes is deleted over HTTP the
    routes without /collections/NAME answer 404, so `/ready` answers 503 naming it (faq still serves and says so
    under `collections`); a server started with that default not there answers the same."""
    cdir, encoder = folders["collections"], folders["encoder"]
    for name in ("notes", "faq"):
        create_empty_version(cdir / name, encoder)
    env = {"STRATA_COLLECTIONS_DIR": str(cdir), "STRATA_MODELS_DIR": str(folders["models"]), "STRATA_API_KEYS": KEYS,
           "STRATA_WATCH_INTERVAL_S": "0", "STRATA_WORKERS": "1", "STRATA_DEFAULT_COLLECTION": "notes"}
    srv = start_server(folders["tmp"], env)
    try:
        with srv.client() as c:
            assert c.get("/ready").status_code == 200
            assert c.delete("/collections/notes", headers=AUTH).status_code == 200
            assert c.post("/search", json={"query": TEXTS[0]}, headers=AUTH).status_code == 404
            r = c.get("/ready")
            assert r.status_code == 503, r.text
            body = r.json()
            assert body["ready"] is False and "default collection 'notes'" in body["reason"], body
            assert body["collections"]["faq"]["ready"] is True and "notes" not in body["collections"]
    finally:
        stop_server(srv)
    srv = start_server(folders["tmp"], env)  # started without it
    try:
        with srv.client() as c:
            r = c.get("/ready")
            assert r.status_code == 503 and "default collection 'notes'" in r.json()["reason"], r.text
            assert f"--root {cdir / 'notes'}" in r.json()["reason"]  # how to make it
    finally:
        stop_server(srv)


def test_an_empty_default_collection_setting_means_none_set(folders: dict[str, Path]) -> None:
    """STRATA_DEFAULT_COLLECTION="" (an env file's `STRATA_DEFAULT_COLLECTION=`) is the setting unset: the server
    starts (it exited 2 on a collections folder) and the routes without /collections/NAME serve the only
    collection; with one root, they serve it (they answered 404)."""
    cdir = folders["collections"]
    create_empty_version(cdir / "notes", folders["encoder"])
    srv = start_server(folders["tmp"], {"STRATA_COLLECTIONS_DIR": str(cdir), "STRATA_DEFAULT_COLLECTION": "",
                                        "STRATA_WATCH_INTERVAL_S": "0", "STRATA_WORKERS": "1"})
    try:
        with srv.client() as c:
            assert c.get("/ready").status_code == 200
            r = c.post("/search", json={"query": TEXTS[0]})
            assert r.status_code == 200 and r.json()["hits"] == [], r.text
    finally:
        stop_server(srv)
    srv = start_server(folders["tmp"], {"STRATA_INDEX_ROOT": str(cdir / "notes"), "STRATA_DEFAULT_COLLECTION": " ",
                                        "STRATA_WATCH_INTERVAL_S": "0", "STRATA_WORKERS": "1"})
    try:
        with srv.client() as c:
            assert c.get("/ready").status_code == 200
            assert c.post("/search", json={"query": TEXTS[0]}).status_code == 200
    finally:
        stop_server(srv)


def test_an_encoder_that_cannot_be_served_is_a_422_and_creates_nothing(tmp_path: Path, tiny_exported: Path) -> None:
    """An encoder folder without its ONNX file (a copy cut short), or with one that is not the file its encoder.json
    names, is refused with the reason — not created as a collection that never serves (201, `ready: false`)."""
    models, cdir = tmp_path / "models", tmp_path / "collections"
    for name in ("half", "other"):
        shutil.copytree(tiny_exported, models / name)
    (models / "half" / "encoder.onnx").unlink()
    (models / "other" / "encoder.onnx").write_bytes(b"not the exported model")
    cdir.mkdir()
    srv = start_server(tmp_path, {"STRATA_COLLECTIONS_DIR": str(cdir), "STRATA_MODELS_DIR": str(models),
                                  "STRATA_WATCH_INTERVAL_S": "0", "STRATA_WORKERS": "1"})
    try:
        with srv.client() as c:
            for name, why in (("half", "encoder.onnx is missing"), ("other", "does not match encoder.json")):
                r = c.post("/collections", json={"name": "notes", "encoder": name})
                assert r.status_code == 422 and why in r.text, r.text
                assert r.json()["detail"][0]["loc"] == ["body", "encoder"]
            assert c.get("/collections").json()["collections"] == [] and not any(cdir.iterdir())
    finally:
        stop_server(srv)


def test_a_filter_on_a_field_no_document_holds_is_no_match_from_empty_through_delete_and_compaction(
        folders: dict[str, Path]) -> None:
    """A live collection's fields are data: a filtered search, count or scroll on a field that no document holds
    (none written yet, or its last holder deleted, before and after compaction) answers no documents, as
    Elasticsearch, Qdrant and Chroma do, never an error that comes and goes with the data; `GET
    /collections/{name}` lists the fields the documents hold. An unknown operator is still a 422."""
    srv = start_server(folders["tmp"], {"STRATA_COLLECTIONS_DIR": str(folders["collections"]),
                                        "STRATA_MODELS_DIR": str(folders["models"]), "STRATA_API_KEYS": KEYS,
                                        "STRATA_WATCH_INTERVAL_S": "0", "STRATA_WORKERS": "1",
                                        "STRATA_COMPACT_INTERVAL_S": "0.2"})
    flt = {"lang": "en"}
    try:
        with srv.client() as c:
            made = c.post("/collections", json={"name": "notes", "encoder": folders["encoder"].name, "settings": {
                "compaction": {"written_docs": 1, "min_interval_s": 0}}}, headers=AUTH)
            assert made.status_code == 201, made.text
            dim = made.json()["dim"]

            def answers() -> tuple[list[list[int | str]], int, list[int | str]]:
                found = []
                for mode in ("dense", "lexical", "hybrid"):
                    r = c.post("/collections/notes/search", json={"query": TEXTS[0], "mode": mode, "filter": flt},
                               headers=AUTH)
                    assert r.status_code == 200, (mode, r.text)
                    found.append([h["id"] for h in r.json()["hits"]])
                count = c.post("/collections/notes/documents/count", json={"filter": flt}, headers=AUTH)
                page = c.post("/collections/notes/documents/scroll", json={"filter": flt}, headers=AUTH)
                assert count.status_code == 200 and page.status_code == 200, (count.text, page.text)
                return found, count.json()["count"], [d["id"] for d in page.json()["documents"]]

            def fields() -> dict[str, str]:
                return c.get("/collections/notes", headers=AUTH).json()["fields"]

            assert answers() == ([[], [], []], 0, []) and fields() == {}  # an empty collection
            docs = [{"id": f"d{i}", "text": t, "metadata": {"lang": "en"} if i == 0 else {"n": i},
                     "vector": basis(i, dim)} for i, t in enumerate(TEXTS)]
            assert c.put("/collections/notes/documents", json={"documents": docs}, headers=AUTH).status_code == 200
            assert answers() == ([["d0"], ["d0"], ["d0"]], 1, ["d0"])
            assert fields() == {"lang": "str", "n": "int"}  # what GET /collections/{name} lists

            def compacted(since: str) -> str:
                """The version a compaction swapped in after `since`, once it holds every write."""
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline:
                    info = c.get("/collections/notes", headers=AUTH).json()
                    state = info["compaction"]
                    if info["version"] != since and not state["running_since"] and not state["pending"]["entries"]:
                        return info["version"]
                    time.sleep(0.3)
                raise AssertionError(f"no compaction after {since}: {info}")

            folded = compacted(made.json()["version"])  # the writes folded into a version of their own
            assert answers() == ([["d0"], ["d0"], ["d0"]], 1, ["d0"])
            assert c.post("/collections/notes/documents/delete", json={"ids": ["d0"]},
                          headers=AUTH).status_code == 200
            assert answers() == ([[], [], []], 0, [])  # its last holder deleted
            compacted(folded)
            assert answers() == ([[], [], []], 0, [])  # and after the compaction that folds the delete
            assert fields() == {"n": "int"}
            with Client(srv.url, api_key=ADMIN) as client:
                assert client.collection_info("notes").fields == {"n": "int"}
            bad = c.post("/collections/notes/search", json={"query": TEXTS[0], "filter": {"lang": {"near": 1}}},
                         headers=AUTH)
            assert bad.status_code == 422 and "unknown operator 'near'" in bad.text
    finally:
        stop_server(srv)


def test_a_collection_whose_max_top_k_is_under_the_default_answers_a_search_that_gives_none(
        folders: dict[str, Path]) -> None:
    """collection.json's max_top_k below the API's default top_k (10): a search that leaves top_k out gets
    max_top_k hits rather than a 422 naming a top_k of 10 the request never sent; a top_k given over it is still
    refused at the field."""
    srv = serve(folders)
    try:
        with srv.client() as c:
            made = c.post("/collections", json={"name": "notes", "encoder": folders["encoder"].name,
                                                "settings": {"max_top_k": 3}}, headers=AUTH)
            assert made.status_code == 201, made.text
            dim = made.json()["dim"]
            docs = [{"id": f"d{i}", "text": TEXTS[i % len(TEXTS)], "vector": basis(i, dim)} for i in range(6)]
            assert c.put("/collections/notes/documents", json={"documents": docs}, headers=AUTH).status_code == 200
            for body in ({"query": TEXTS[0]}, {"queries": [TEXTS[0], TEXTS[1]]}, {"vector": basis(1, dim)},
                         {"query": " ".join(QUORA_LIKE_WORDS), "mode": "lexical"}):  # every text's words
                r = c.post("/collections/notes/search", json=body, headers=AUTH)
                assert r.status_code == 200, (body, r.text)
                answers = [r.json()["hits"]] if "hits" in r.json() else [x["hits"] for x in r.json()["results"]]
                assert all(len(hits) == 3 for hits in answers), (body, r.text)
            assert c.post("/collections/notes/search", json={"query": TEXTS[0], "top_k": 3},
                          headers=AUTH).status_code == 200
            r = c.post("/collections/notes/search", json={"query": TEXTS[0], "top_k": 4}, headers=AUTH)
            assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "top_k"], r.text
            assert "limit of 3" in r.json()["detail"][0]["msg"]
        with Client(srv.url, api_key=ADMIN) as client:  # the client leaves top_k to the server unless given
            notes = client.with_collection("notes")
            assert len(notes.search(TEXTS[0]).hits) == 3 and len(notes.search(TEXTS[0], top_k=2).hits) == 2
            assert [len(r.hits) for r in notes.search_many([TEXTS[0], TEXTS[1]])] == [3, 3]
            with pytest.raises(ValidationError, match="limit of 3"):
                notes.search(TEXTS[0], top_k=4)
    finally:
        stop_server(srv)
