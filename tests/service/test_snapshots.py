"""Snapshots over HTTP on a real server (uvicorn on 127.0.0.1, the tiny encoder, a flat index, real files): one taken
while a writer PUTs holds every write acknowledged before it; downloaded and restored with `indexer snapshot
restore` into the server's collections folder, it is served by discovery and answers the same queries with the
same documents, and so does one uploaded over HTTP; a truncated archive is refused naming it, by the CLI and over
HTTP; listing, deleting and the admin scope."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from indexer.runtime import snapshot
from indexer.runtime.layout import IndexRoot
from indexer.runtime.manifest import Manifest
from tests.conftest import QUORA_LIKE_WORDS, REPO, doc_vector, encoder_dim, start_server, stop_server
from tests.faults import small_fs

ADMIN, READER = "snap-admin-key-0123", "snap-read-key-0123"
AUTH = {"Authorization": f"Bearer {ADMIN}"}


def indexer_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "indexer.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env=os.environ | {"OMP_NUM_THREADS": "1"})


def text(n: int) -> str:
    words = QUORA_LIKE_WORDS
    return f"{words[n % len(words)]} {words[(n // len(words)) % len(words)]} {n}?"



@pytest.fixture()
def cdir(tmp_path: Path, tiny_exported: Path) -> Path:
    data, dim = tmp_path / "docs.jsonl", encoder_dim(tiny_exported)
    data.write_text("".join(json.dumps({"id": i, "text": text(i), "group": i % 3, "vector": doc_vector(i, dim)}) + "\n"
                            for i in range(60)))
    folder = tmp_path / "collections"
    r = indexer_cli("build", "--root", str(folder / "notes"), "--data", str(data), "--model", str(tiny_exported),
                    "--index", "flat", "--threads", "1", "--no-eval", "--default-mode", "dense")
    assert r.returncode == 0, r.stderr
    return folder


def wait_for(check: Any, what: str, timeout: float = 60) -> Any:  # noqa: ANN401
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"waited {timeout} s for {what}")


def answers(c: httpx.Client, name: str, queries: list[list[float]]) -> list[list[tuple[Any, str, float]]]:
    out = []
    for q in queries:
        r = c.post(f"/collections/{name}/search", json={"vector": q, "top_k": 5}, headers=AUTH)
        assert r.status_code == 200, r.text
        out.append([(h["id"], h["text"], round(h["score"], 5)) for h in r.json()["hits"]])
    return out


def test_a_snapshot_over_http_restores_to_a_collection_that_answers_the_same(cdir: Path, tmp_path: Path,
                                                                             tiny_exported: Path) -> None:
    dim = encoder_dim(tiny_exported)
    server = start_server(tmp_path, {"STRATA_COLLECTIONS_DIR": str(cdir), "STRATA_WATCH_INTERVAL_S": "0.3",
                                     "STRATA_API_KEYS": f"{ADMIN}:admin,{READER}", "STRATA_THREADS": "1",
                                     "STRATA_MAX_BODY_BYTES": "8192"})  # an upload is streamed past the body cap
    try:
        c = server.client()
        acknowledged: list[int] = []
        stop = threading.Event()

        def writer() -> None:
            n = 1000
            with server.client() as w:
                while not stop.is_set():
                    doc = {"id": n, "text": text(n), "vector": doc_vector(n, dim)}
                    r = w.put("/collections/notes/documents", json={"documents": [doc]}, headers=AUTH)
                    assert r.status_code == 200, r.text
                    acknowledged.append(n)
                    n += 1

        t = threading.Thread(target=writer)
        t.start()
        wait_for(lambda: len(acknowledged) >= 5, "the writer's first writes")
        before = list(acknowledged)  # acknowledged before the snapshot was asked for
        r = c.post("/collections/notes/snapshots", headers=AUTH)
        stop.set()
        t.join()
        assert r.status_code == 201, r.text
        snap = r.json()
        assert snap["seq"] >= len(before) and snap["size"] > 0
        assert [s["name"] for s in c.get("/collections/notes/snapshots", headers=AUTH).json()["snapshots"]] \
            == [snap["name"]]
        assert c.post("/collections/notes/snapshots", headers={"Authorization": f"Bearer {READER}"}).status_code \
            == 403

        download = c.get(f"/collections/notes/snapshots/{snap['name']}", headers=AUTH)
        assert download.status_code == 200 and download.headers["content-type"] == "application/x-tar"
        assert hashlib.sha256(download.content).hexdigest() == snap["sha256"] == download.headers["x-snapshot-sha256"]
        archive = tmp_path / "notes.tar"
        archive.write_bytes(download.content)

        # a truncated download is refused, naming it, and leaves nothing in the collections folder
        (tmp_path / "cut.tar").write_bytes(download.content[: len(download.content) // 2])
        r2 = indexer_cli("snapshot", "restore", str(tmp_path / "cut.tar"), "--root", str(cdir / "cut"))
        assert r2.returncode != 0 and "truncated" in r2.stderr and "Traceback" not in r2.stderr, r2.stderr
        assert sorted(p.name for p in cdir.iterdir()) == ["notes"]
        # restored into the folder the server serves: discovered, and holds every write acknowledged before it
        r3 = indexer_cli("snapshot", "restore", str(archive), "--root", str(cdir / "copy"))
        assert r3.returncode == 0, r3.stderr
        wait_for(lambda: c.get("/collections/copy", headers=AUTH).json().get("ready"), "the restored collection")
        for n in before:
            hit = c.post("/collections/copy/search", json={"vector": doc_vector(n, dim), "top_k": 1},
                         headers=AUTH).json()
            assert hit["hits"][0]["id"] == n, (n, hit)

        # quiet now: a second snapshot, restored, answers every query exactly as the original does
        snap2 = c.post("/collections/notes/snapshots", headers=AUTH).json()
        assert snap2["seq"] == len(acknowledged)  # one log entry per acknowledged PUT, every one of them
        r4 = indexer_cli("snapshot", "restore", str(cdir / "notes" / "snapshots" / f"{snap2['name']}.tar"),
                         "--root", str(cdir / "twin"))
        assert r4.returncode == 0, r4.stderr
        wait_for(lambda: c.get("/collections/twin", headers=AUTH).json().get("ready"), "the second restore")
        queries = [doc_vector(n, dim) for n in (*range(0, 60, 7), *acknowledged[::3], 10**6)]
        assert answers(c, "twin", queries) == answers(c, "notes", queries)
        assert c.get("/collections/twin", headers=AUTH).json()["documents"] \
            == c.get("/collections/notes", headers=AUTH).json()["documents"]

        # uploaded over HTTP: a new collection, served at once, answering the same; a cut upload or a taken name
        # is refused and leaves nothing behind
        archive2 = (cdir / "notes" / "snapshots" / f"{snap2['name']}.tar").read_bytes()
        assert len(archive2) > 8192
        up = c.post("/collections/uploaded/snapshots/upload", content=archive2,
                    headers=AUTH | {"Content-Type": "application/x-tar"})
        assert up.status_code == 201 and up.json()["ready"] and up.json()["name"] == "uploaded", up.text
        assert answers(c, "uploaded", queries) == answers(c, "notes", queries)
        cut = c.post("/collections/cut/snapshots/upload", content=archive2[: len(archive2) // 2], headers=AUTH)
        assert cut.status_code == 422 and "truncated" in cut.json()["detail"], cut.text
        assert cut.json()["detail"].startswith("the uploaded snapshot: "), cut.text  # not the server's temporary file
        assert c.post("/collections/notes/snapshots/upload", content=archive2, headers=AUTH).status_code == 409
        form = c.post("/collections/form/snapshots/upload", files={"snapshot": ("notes.tar", archive2)}, headers=AUTH)
        assert form.status_code == 415 and "--data-binary" in form.json()["detail"], form.text  # was a 422 "damaged"
        assert c.post("/collections/other/snapshots/upload", content=archive2,
                      headers={"Authorization": f"Bearer {READER}"}).status_code == 403
        assert sorted(p.name for p in cdir.iterdir()) == ["copy", "notes", "twin", "uploaded"]  # no .upload left

        assert c.delete(f"/collections/notes/snapshots/{snap['name']}", headers=AUTH).status_code == 204
        assert c.get(f"/collections/notes/snapshots/{snap['name']}", headers=AUTH).status_code == 404
        assert [s["name"] for s in c.get("/collections/notes/snapshots", headers=AUTH).json()["snapshots"]] \
            == [snap2["name"]]
    finally:
        stop_server(server)


def _with_trailer(archive: bytes, edit: Any) -> bytes:  # noqa: ANN401 (a function of the trailer's dict)
    """The archive again, its snapshot.json (the last member) replaced by `edit(trailer)`, every other member kept."""
    import io
    import tarfile

    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(archive)) as src, tarfile.open(fileobj=out, mode="w") as dst:
        for member in src.getmembers():
            data = src.extractfile(member).read()  # type: ignore[union-attr]
            if member.name == "snapshot.json":
                data = json.dumps(edit(json.loads(data))).encode()
            info = tarfile.TarInfo(member.name)
            info.size = len(data)
            dst.addfile(info, io.BytesIO(data))
    return out.getvalue()


ALTERED = [("seq", "abc"), ("seq", None), ("version", ["v"]), ("files", []), ("files", {"collection.json": None}),
           ("encoder", None), ("encoder", "tiny"), ("documents", "many"), ("log_id", 7),
           # the encoder it names, with a file outside its folder (which was read and hashed)
           ("encoder", lambda e: e | {"files": {"../../../etc/hostname": "0" * 64}})]


def test_a_snapshot_json_of_the_wrong_shape_is_refused_naming_it(cdir: Path, tmp_path: Path) -> None:
    """A snapshot.json edited to hold a value of another type (its members intact) is a 422 naming snapshot.json and
    the field over HTTP, and exit 2 with the reason from the CLI, leaving nothing behind (it was a 500: the value
    was used as the type it should have been)."""
    server = start_server(tmp_path, {"STRATA_COLLECTIONS_DIR": str(cdir), "STRATA_WATCH_INTERVAL_S": "0",
                                     "STRATA_THREADS": "1"})
    try:
        c = server.client()
        snap = c.post("/collections/notes/snapshots")
        assert snap.status_code == 201, snap.text
        archive = c.get(f"/collections/notes/snapshots/{snap.json()['name']}").content
        for field, value in ALTERED:
            altered = _with_trailer(archive, lambda t, f=field, v=value: t | {f: v(t[f]) if callable(v) else v})
            r = c.post("/collections/altered/snapshots/upload", content=altered,
                       headers={"Content-Type": "application/x-tar"})
            assert r.status_code == 422, (field, value, r.text)
            assert "snapshot.json is damaged" in r.json()["detail"] and f"'{field}'" in r.json()["detail"], r.text
        assert c.get("/collections/altered").status_code == 404
        (tmp_path / "altered.tar").write_bytes(altered)
        cli = indexer_cli("snapshot", "restore", str(tmp_path / "altered.tar"), "--root", str(cdir / "cli"))
        assert cli.returncode == 2 and "snapshot.json is damaged" in cli.stderr, cli.stderr
        assert "Traceback" not in cli.stderr
        assert sorted(p.name for p in cdir.iterdir()) == ["notes"]
    finally:
        stop_server(server)


def test_an_upload_cut_off_by_its_client_is_refused_and_leaves_nothing(cdir: Path, tmp_path: Path) -> None:
    """An upload whose client goes away halfway is refused like a truncated archive (422), leaves nothing in the
    collections folder and is no server error (the route's read raised ClientDisconnect: logged as an unhandled
    error, a 500)."""
    server = start_server(tmp_path, {"STRATA_COLLECTIONS_DIR": str(cdir), "STRATA_WATCH_INTERVAL_S": "0",
                                     "STRATA_THREADS": "1"})
    try:
        c = server.client()
        snap = c.post("/collections/notes/snapshots")
        assert snap.status_code == 201, snap.text
        archive = c.get(f"/collections/notes/snapshots/{snap.json()['name']}").content
        port = int(server.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(f"POST /collections/cut/snapshots/upload HTTP/1.1\r\nHost: x\r\nContent-Type: "
                      f"application/x-tar\r\nContent-Length: {len(archive)}\r\n\r\n".encode() + archive[:4096])
            wait_for(lambda: any(p.name.startswith(".upload-cut") for p in cdir.iterdir()), "the upload's first bytes")
        wait_for(lambda: "POST /collections/cut/snapshots/upload 422" in server.log.read_text(), "the refusal")
        assert "unhandled error" not in server.log.read_text()
        assert sorted(p.name for p in cdir.iterdir()) == ["notes"]
    finally:
        stop_server(server)


def test_a_full_disk_refuses_a_snapshot_and_an_upload_with_507_and_leaves_nothing(cdir: Path, tmp_path: Path) -> None:
    """ENOSPC (a small tmpfs filled up, `tests.faults`) while a snapshot is written and while an upload is received:
    507 naming the disk's fault, with Retry-After, as a write of documents is answered (both were 500s); nothing
    half-made is left, and both succeed once there is room, without a restart."""
    with small_fs(tmp_path / "fs") as fs:
        folder = Path(shutil.copytree(cdir, fs.path / "collections", symlinks=True))
        server = start_server(tmp_path, {"STRATA_COLLECTIONS_DIR": str(folder), "STRATA_WATCH_INTERVAL_S": "0",
                                         "STRATA_THREADS": "1"})
        try:
            c = server.client()
            first = c.post("/collections/notes/snapshots")
            assert first.status_code == 201, first.text
            archive = c.get(f"/collections/notes/snapshots/{first.json()['name']}").content
            snapshots = sorted(p.name for p in (folder / "notes" / "snapshots").iterdir())
            fs.fill()
            for r in (c.post("/collections/notes/snapshots"),
                      c.post("/collections/copy/snapshots/upload", content=archive,
                             headers={"Content-Type": "application/x-tar"})):
                assert r.status_code == 507 and "no space left" in r.json()["detail"], r.text
                assert int(r.headers["Retry-After"]) > 0
            assert sorted(p.name for p in (folder / "notes" / "snapshots").iterdir()) == snapshots
            assert sorted(p.name for p in folder.iterdir()) == ["notes"]
            fs.free()
            assert c.post("/collections/notes/snapshots").status_code == 201
            up = c.post("/collections/copy/snapshots/upload", content=archive,
                        headers={"Content-Type": "application/x-tar"})
            assert up.status_code == 201 and up.json()["ready"], up.text
        finally:
            stop_server(server)


def test_an_upload_declared_over_the_cap_is_a_413_before_its_body_is_read(cdir: Path, tmp_path: Path) -> None:
    """A Content-Length over STRATA_MAX_SNAPSHOT_BYTES is refused at once, before the body is sent (it was streamed
    to disk up to the cap, 64 GiB by default, before the 413); a chunked upload is still cut at the cap."""
    server = start_server(tmp_path, {"STRATA_COLLECTIONS_DIR": str(cdir), "STRATA_WATCH_INTERVAL_S": "0",
                                     "STRATA_THREADS": "1", "STRATA_MAX_SNAPSHOT_BYTES": "65536"})
    try:
        port = int(server.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
            s.sendall(b"POST /collections/big/snapshots/upload HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-tar"
                      b"\r\nContent-Length: 1000000000\r\n\r\n" + b"\0" * 1024)  # the rest is never sent
            answer = b""
            while b"STRATA_MAX_SNAPSHOT_BYTES" not in answer and (chunk := s.recv(4096)):  # headers, then the body
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 413") and b"STRATA_MAX_SNAPSHOT_BYTES" in answer, answer
        assert sorted(p.name for p in cdir.iterdir()) == ["notes"]
        chunked = server.client().post("/collections/big/snapshots/upload", content=iter([b"\0" * 50_000] * 3),
                                       headers={"Content-Type": "application/x-tar"})
        assert chunked.status_code == 413, chunked.text
        assert sorted(p.name for p in cdir.iterdir()) == ["notes"]
    finally:
        stop_server(server)


def test_an_upload_pairs_with_an_encoder_of_the_models_folder(cdir: Path, tmp_path: Path, tiny_exported: Path) -> None:
    """A server that holds no collection yet (a fresh machine: the encoder is not where the snapshot's version was
    built) pairs an uploaded snapshot with the encoders of its models folder, STRATA_MODELS_DIR — the ones `POST
    /collections` may name — checked byte for byte: it answered 422 "is not here", with a CLI flag as the remedy,
    though the same server created a collection of that very encoder. One of another model is still refused."""
    root, machine_a = cdir / "notes", tmp_path / "machine-a" / "tiny-cls"
    shutil.copytree(tiny_exported, machine_a)  # where the version was built, on the machine the snapshot is made
    folder = IndexRoot(root).current_dir()
    manifest = Manifest.load(folder)
    manifest.model.dir = str(machine_a)
    manifest.save(folder)
    archive = snapshot.archive_path(root, snapshot.create(root).name).read_bytes()
    shutil.rmtree(machine_a.parent)  # not on this one
    models, fresh = tmp_path / "models", tmp_path / "fresh"
    shutil.copytree(tiny_exported, models / "tiny-cls")
    fresh.mkdir()
    server = start_server(tmp_path, {"STRATA_COLLECTIONS_DIR": str(fresh), "STRATA_MODELS_DIR": str(models),
                                     "STRATA_WATCH_INTERVAL_S": "0", "STRATA_THREADS": "1"})
    try:
        c = server.client()
        dim = encoder_dim(tiny_exported)
        tar = {"Content-Type": "application/x-tar"}
        up = c.post("/collections/notes/snapshots/upload", content=archive, headers=tar)
        assert up.status_code == 201 and up.json()["ready"] and up.json()["documents"] == 60, up.text
        assert Manifest.load(IndexRoot(fresh / "notes").current_dir()).model.dir == str(models / "tiny-cls")
        hit = c.post("/collections/notes/search", json={"vector": doc_vector(7, dim), "top_k": 1}).json()["hits"]
        assert hit[0]["id"] == 7
        (models / "tiny-cls" / "tokenizer_config.json").write_text("{}")  # no longer the encoder it was made with
        c.delete("/collections/notes")
        r = c.post("/collections/again/snapshots/upload", content=archive, headers=tar)
        assert r.status_code == 422 and "tokenizer_config.json differs" in r.json()["detail"], r.text
        assert "STRATA_MODELS_DIR" in r.json()["detail"], r.text  # the remedy a server's user has
        assert sorted(p.name for p in fresh.iterdir()) == []
    finally:
        stop_server(server)


def test_a_snapshot_records_the_encoder_the_server_serves_with(cdir: Path, tmp_path: Path,
                                                               tiny_exported: Path) -> None:
    """The version's recorded encoder folder is gone (models moved; the server pins the encoder with
    STRATA_MODEL_DIR): the snapshot records the files of the encoder the collection is served with, so a restore
    still checks the tokenizer byte for byte (no files were recorded, and any folder of the same ONNX model was
    accepted, one whose tokenizer differs included: other tokens, other answers)."""
    root, pinned = cdir / "notes", tmp_path / "pinned" / "tiny-cls"
    shutil.copytree(tiny_exported, pinned)
    folder = IndexRoot(root).current_dir()
    manifest = Manifest.load(folder)
    manifest.model.dir = str(tmp_path / "moved-away" / "tiny-cls")
    manifest.save(folder)
    server = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(root), "STRATA_MODEL_DIR": str(pinned),
                                     "STRATA_WATCH_INTERVAL_S": "0", "STRATA_THREADS": "1"})
    try:
        snap = server.client().post("/collections/default/snapshots")
        assert snap.status_code == 201, snap.text
    finally:
        stop_server(server)
    archive = snapshot.archive_path(root, snap.json()["name"])
    other = tmp_path / "other" / "tiny-cls"  # the same ONNX model, another tokenizer
    shutil.copytree(tiny_exported, other)
    (other / "tokenizer_config.json").write_text("{}")
    refused = indexer_cli("snapshot", "restore", str(archive), "--root", str(tmp_path / "r1"), "--encoder", str(other))
    assert refused.returncode == 2 and "tokenizer_config.json differs" in refused.stderr, refused.stderr
    restored = indexer_cli("snapshot", "restore", str(archive), "--root", str(tmp_path / "r2"), "--encoder",
                           str(pinned))
    assert restored.returncode == 0, restored.stderr
