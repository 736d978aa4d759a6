"""Faults of the machine, injected for real (`tests.faults`): the disk fills up (a size-limited tmpfs, ENOSPC from
the kernel) while the write log appends, while a build and a compaction write their version; fsync fails (EIO from
an LD_PRELOAD shim); the index root is mounted read-only; a served version's files disappear.

Each must end in a clear error to the caller (507, or 503 with the reason and Retry-After, for writes; exit 2 with
one line naming the file for `indexer build` / `compact`), lose no acknowledged write, publish or serve nothing
half-made, and recover once the fault is gone without a manual step. Real servers (uvicorn on 127.0.0.1, the
MiniLM ONNX encoder, FAISS, SQLite) on an 80-document flat version; docs/operations.md ("Faults of the disk")
counts the faults tried and names the test behind each."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from indexer.runtime.encoder import OnnxEncoder
from indexer.runtime.faiss.files import INDEX_FILE
from indexer.runtime.integrity import verify_folder
from indexer.runtime.layout import BUILDING_PREFIX, IndexRoot
from indexer.runtime.store import STORE, Store
from indexer.runtime.writelog import Upsert, WriteLog, log_path
from tests.conftest import REPO, Server, stop_server
from tests.faults import fsync_shim, shim_env, small_fs
from tests.service.test_writes import corpus, indexer_cli, kill, serve

__all__ = ["corpus"]  # the fixture, imported for this module's own small corpus

DOCS = 80
PAD = "p" * 1500  # metadata that makes each logged entry ~3 kB, so a small disk fills in a few writes


@pytest.fixture(scope="module")
def small_corpus(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("faults-data") / "docs.jsonl"
    path.write_text("\n".join(corpus.read_text().splitlines()[:DOCS]) + "\n")
    return path


@pytest.fixture(scope="module")
def template(small_corpus: Path, minilm_mean: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from indexer.build import BuildConfig, build

    root = tmp_path_factory.mktemp("faults-template") / "root"
    build(BuildConfig(model_dir=minilm_mean, data=str(small_corpus), root=root, index="flat", threads=1,
                      default_mode="dense"))
    return root


def copy_root(template: Path, dst: Path) -> Path:
    shutil.copytree(template, dst, symlinks=True)
    return dst


def batch(n: int, size: int = 8) -> list[dict[str, Any]]:
    return [{"id": f"f{n}-{i}", "text": f"fault test {n} {i}: can a {['red', 'blue', 'green'][i % 3]} kite fly at "
             f"{n * 10 + i} metres?", "metadata": {"pad": PAD}} for i in range(size)]


def top(c: httpx.Client, text: str) -> dict[str, Any]:
    r = c.post("/search", json={"query": text, "top_k": 3})
    assert r.status_code == 200, r.text
    return r.json()["hits"][0]


def assert_served(c: httpx.Client, acked: list[dict[str, Any]], refused: list[dict[str, Any]] = ()) -> None:
    """Every acknowledged document is its own text's top hit; none of a refused write is served."""
    for d in acked:
        hit = top(c, d["text"])
        assert hit["id"] == d["id"] and hit["text"] == d["text"], (d["id"], hit)
    for d in refused:
        assert top(c, d["text"])["id"] != d["id"], d


def refusal(r: httpx.Response, status: int) -> str:
    """The reason of a write refused by the disk: the status asked, Retry-After, a JSON detail (no trace)."""
    assert r.status_code == status, r.text
    assert int(r.headers["Retry-After"]) > 0
    return str(r.json()["detail"])


def log_writes(root: Path, model: Path, docs: list[dict[str, Any]]) -> None:
    """Append `docs` to the root's write log as the API would (vectors of the served encoder)."""
    encoder = OnnxEncoder(model, threads=1)
    vectors = encoder.encode([d["text"] for d in docs])
    wlog = WriteLog(log_path(root))
    try:
        wlog.append([Upsert(d["id"], d["text"], d["metadata"], v, encoder.meta.onnx_sha256)
                     for d, v in zip(docs, vectors, strict=True)])
    finally:
        wlog.close()


def published(root: Path) -> tuple[str | None, list[str], list[str]]:
    """(current, versions, staging leftovers) of a root."""
    r = IndexRoot(root)
    return r.current_version(), r.versions(), sorted(p.name for p in root.iterdir()
                                                     if p.name.startswith(BUILDING_PREFIX))


def test_a_full_disk_refuses_writes_with_507_loses_none_acknowledged_and_recovers(template: Path,
                                                                                tmp_path: Path) -> None:
    """ENOSPC (a 16 MiB tmpfs filled up) when the write log is created, then while it appends: 507 naming the log,
    nothing of the refused write served; acknowledged writes served on the full disk, after it is freed, and after
    a SIGKILL and restart; the next write after freeing succeeds on the same process."""
    with small_fs(tmp_path / "fs") as fs:
        root = copy_root(template, fs.path / "root")
        server = serve(tmp_path, root)
        try:
            with server.client() as c:
                fs.fill()  # no write log yet: creating it fails
                detail = refusal(c.put("/documents", json={"documents": batch(0)}), 507)
                assert "insufficient storage" in detail and str(root / "writes") in detail, detail
                assert_served(c, [], batch(0))
                fs.free()
                acked = batch(0)
                assert c.put("/documents", json={"documents": acked}).status_code == 200
                fs.fill()  # the log exists: its appends fail once the WAL needs a new page
                refused: list[dict[str, Any]] = []
                for n in range(1, 100):
                    r = c.put("/documents", json={"documents": batch(n)})
                    if r.status_code == 200:
                        acked += batch(n)  # the WAL had room: a durable, acknowledged write
                        continue
                    detail = refusal(r, 507)
                    assert str(log_path(root)) in detail and "no space left" in detail, detail
                    refused = batch(n)
                    break
                assert refused, "the disk never filled"
                assert_served(c, acked, refused)  # searches keep working on a full disk
                fs.free()
                assert c.put("/documents", json={"documents": refused}).status_code == 200  # no restart needed
                acked += refused
                assert_served(c, acked)
            kill(server)
            server = serve(tmp_path, root)
            with server.client() as c:
                assert_served(c, acked)
        finally:
            stop_server(server)


def test_a_full_disk_fails_compaction_and_build_naming_the_file_and_publishes_nothing(
        template: Path, small_corpus: Path, minilm_mean: Path, tmp_path: Path) -> None:
    """ENOSPC while `indexer compact` and `indexer build` write their version: exit 2 with one line naming the
    file in the staging folder, `current` and `versions/` untouched, no staging folder left; once space is freed
    the same commands publish a version that verifies and holds every logged write."""
    with small_fs(tmp_path / "fs") as fs:
        root = copy_root(template, fs.path / "root")
        written = batch(1, 24)
        log_writes(root, minilm_mean, written)
        before = published(root)
        fs.fill(leave=64 * 1024)  # room for a lock file and a folder, not for a version
        for args in (("compact", "--root", str(root), "--no-eval"),
                     ("build", "--root", str(root), "--data", str(small_corpus), "--model", str(minilm_mean),
                      "--index", "flat", "--threads", "1")):
            r = indexer_cli(*args)
            assert r.returncode == 2, (args[0], r.stdout, r.stderr)
            assert "Traceback" not in r.stderr, r.stderr
            line = r.stderr.strip().splitlines()[-1]
            assert line.startswith(f"indexer {args[0]}: error: no space left on the device for "
                                   f"{root}/{BUILDING_PREFIX}"), line
            assert published(root) == before, (args[0], published(root))
        fs.free()
        r = indexer_cli("compact", "--root", str(root), "--no-eval")
        assert r.returncode == 0, r.stderr
        current, versions, leftovers = published(root)
        assert current != before[0] and len(versions) == 2 and not leftovers
        assert verify_folder(root / "versions" / current).checked
        store = Store(root / "versions" / current / STORE)
        try:
            assert store.ids_of([d["id"] for d in written]).keys() == {d["id"] for d in written}
        finally:
            store.close()
        r = indexer_cli("build", "--root", str(root), "--data", str(small_corpus), "--model", str(minilm_mean),
                        "--index", "flat", "--threads", "1")
        assert r.returncode == 0, r.stderr
        assert published(root)[0] not in (before[0], current) and not published(root)[2]


def test_a_failed_fsync_refuses_the_write_with_503_and_fails_compaction_until_it_stops(
        template: Path, tmp_path: Path) -> None:
    """fsync/fdatasync return EIO (the LD_PRELOAD shim, flag on) under the root: a PUT is 503 with the reason and
    Retry-After and is not served, `indexer compact` exits 2 naming the file it could not sync and publishes
    nothing; flag off: the next PUT succeeds on the same process, compaction publishes, and the log holds every
    acknowledged write."""
    lib = fsync_shim(tmp_path)
    flag = tmp_path / "fsync-fails"
    root = copy_root(template, tmp_path / "root")
    env = shim_env(lib, flag, root)
    server = serve(tmp_path, root, **env)
    try:
        with server.client() as c:
            acked = batch(0)
            assert c.put("/documents", json={"documents": acked}).status_code == 200
            flag.touch()
            detail = refusal(c.put("/documents", json={"documents": batch(1)}), 503)
            assert "storage unavailable" in detail and str(log_path(root)) in detail and "I/O" in detail, detail
            assert_served(c, acked, batch(1))
            flag.unlink()
            assert c.put("/documents", json={"documents": batch(1)}).status_code == 200
            acked += batch(1)
            assert_served(c, acked)
    finally:
        kill(server)
    wlog = WriteLog(log_path(root), create=False)
    try:
        logged = {e.ext_id for e in wlog.entries()}
    finally:
        wlog.close()
    assert {d["id"] for d in acked} <= logged
    before = published(root)
    flag.touch()
    r = indexer_cli_env(env, "compact", "--root", str(root), "--no-eval")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith(f"indexer compact: error: cannot write {root}/{BUILDING_PREFIX}"), line
    assert "I/O error" in line, line
    assert published(root) == before
    flag.unlink()
    assert indexer_cli_env(env, "compact", "--root", str(root), "--no-eval").returncode == 0
    assert published(root)[0] != before[0] and not published(root)[2]


def indexer_cli_env(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "indexer.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env=os.environ | {"OMP_NUM_THREADS": "1"} | env)


def test_a_read_only_root_serves_its_log_refuses_writes_with_503_and_takes_them_once_writable(
        template: Path, small_corpus: Path, minilm_mean: Path, tmp_path: Path) -> None:
    """The root's tmpfs remounted read-only: the API starts and serves the writes in its log (opened read-only), a
    PUT is 503 "read-only" with Retry-After, `indexer build` exits 2 naming the root's lock file; remounted
    read-write, the next PUT succeeds without a restart."""
    with small_fs(tmp_path / "fs") as fs:
        root = copy_root(template, fs.path / "root")
        logged = batch(0, 4)
        log_writes(root, minilm_mean, logged)
        fs.read_only()
        server = serve(tmp_path, root)
        try:
            with server.client() as c:
                assert_served(c, logged)
                detail = refusal(c.put("/documents", json={"documents": batch(1)}), 503)
                assert "read-only" in detail and str(log_path(root)) in detail, detail
                r = indexer_cli("build", "--root", str(root), "--data", str(small_corpus), "--model",
                                str(minilm_mean))
                line = r.stderr.strip().splitlines()[-1]
                assert r.returncode == 2 and line.startswith(f"indexer build: error: cannot write {root}/.build.lock")
                assert "read-only" in line, line
                fs.writable()
                assert c.put("/documents", json={"documents": batch(1)}).status_code == 200
                assert_served(c, logged + batch(1))
        finally:
            stop_server(server)


def test_a_served_versions_missing_files_are_reported_and_never_served_again(template: Path,
                                                                          tmp_path: Path) -> None:
    """The served version's index and store deleted from the disk: searches keep answering from what the process
    has open, `/ready` names the missing file; after a restart that version is refused (corrupt, file named) and
    not served."""
    root = copy_root(template, tmp_path / "root")
    version = IndexRoot(root).current_version()
    folder = IndexRoot(root).current_dir()
    server: Server = serve(tmp_path, root)
    try:
        with server.client() as c:
            hits_before = c.post("/search", json={"query": "how do I learn python", "top_k": 3}).json()["hits"]
            assert c.get("/ready").json().get("damaged") is None
            (folder / INDEX_FILE).unlink()
            (folder / STORE).unlink()
            r = c.post("/search", json={"query": "how do I learn python", "top_k": 3})
            assert r.status_code == 200 and r.json()["hits"] == hits_before, r.text
            ready = c.get("/ready")
            assert ready.status_code == 200 and ready.json()["index_version"] == version
            assert ready.json()["damaged"].startswith(f"{folder / INDEX_FILE} is missing"), ready.json()
            assert "damaged on disk" in server.log.read_text()
    finally:
        stop_server(server)
    server = serve(tmp_path, root)
    try:
        with server.client() as c:
            body = c.get("/ready").json()
            assert body.get("index_version") != version, body
            assert body["swap_refused"]["kind"] == "corrupt" and f"{folder / INDEX_FILE} is missing" in \
                body["swap_refused"]["reason"], body
    finally:
        stop_server(server)
