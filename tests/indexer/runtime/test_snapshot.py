"""Snapshots and restore on real files (a real build with the tiny encoder, a real SQLite write log): a snapshot
taken while a writer appends is one consistent archive (the version, the log up to one seq, the config); a restore
into an empty folder holds the same files and entries; a damaged, truncated or altered archive and a non-empty
target are refused naming what is wrong, leaving nothing behind."""

from __future__ import annotations

import json
import shutil
import sqlite3
import tarfile
import threading
from pathlib import Path

import numpy as np
import pytest

from indexer.runtime import snapshot as snap
from indexer.runtime.collection_config import CollectionConfig, save
from indexer.runtime.layout import IndexRoot
from indexer.runtime.manifest import Manifest
from indexer.runtime.restore import restore
from indexer.runtime.snapshot import SnapshotError
from indexer.runtime.writelog import Delete, Upsert, log_path, open_log

DOCS = 40


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory, tiny_exported: Path) -> Path:
    from indexer.build import BuildConfig, build

    work = tmp_path_factory.mktemp("snap-template")
    data = work / "docs.jsonl"
    data.write_text("".join(json.dumps({"id": i, "text": f"how can i learn python {i} dog cat"}) + "\n"
                            for i in range(DOCS)))
    root = work / "root"
    build(BuildConfig(model_dir=tiny_exported, data=str(data), root=root, index="flat", threads=1, evaluate=False))
    return root


@pytest.fixture()
def root(template: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "root"
    shutil.copytree(template, dst, symlinks=True)
    save(dst, CollectionConfig(max_top_k=50))
    return dst


def _write(root: Path, n: int, start: int = 0) -> None:
    wlog = open_log(root, create=True)
    assert wlog is not None
    rng = np.random.default_rng(start)
    dim = Manifest.load(IndexRoot(root).current_dir()).model.dim
    try:
        for i in range(start, start + n):
            vec = rng.standard_normal(dim).astype(np.float32)
            wlog.append([Upsert(f"w{i}", f"written {i}", {"n": i}, vec / np.linalg.norm(vec), "sha"), Delete(i % DOCS)])
    finally:
        wlog.close()


def _entries(root: Path) -> list[tuple[object, ...]]:
    con = sqlite3.connect(log_path(root))
    try:
        return con.execute("SELECT seq, op, ext_id, text, metadata, vector, model FROM entries ORDER BY seq").fetchall()
    finally:
        con.close()


def test_a_snapshot_taken_while_writes_go_on_restores_to_the_same_files_and_log(root: Path, tmp_path: Path,
                                                                               tiny_exported: Path) -> None:
    _write(root, 20)
    stop = threading.Event()

    def writer() -> None:
        n = 100
        while not stop.is_set():
            _write(root, 1, n)
            n += 1

    t = threading.Thread(target=writer)
    t.start()
    try:
        info = snap.create(root)
    finally:
        stop.set()
        t.join()
    assert [s.name for s in snap.list_snapshots(root)] == [info.name]
    archive = snap.archive_path(root, info.name)
    assert info.size == archive.stat().st_size and info.sha256 == snap.sha256_file(archive)
    assert info.seq >= 40  # every entry acknowledged before the snapshot began is in it

    restored = restore(archive, tmp_path / "restored")
    version = IndexRoot(root).current_version()
    assert restored.version == version == IndexRoot(restored.root).current_version()
    source = root / "versions" / version
    files = sorted(p.relative_to(source) for p in source.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(restored.root / "versions" / version)
                           for p in (restored.root / "versions" / version).rglob("*") if p.is_file())
    for rel in files:  # the version byte for byte
        assert (restored.root / "versions" / version / rel).read_bytes() == (source / rel).read_bytes(), rel
    # the log up to the snapshot's seq exactly, with its id (a replay and a compaction continue where it was)
    assert _entries(restored.root) == [e for e in _entries(root) if e[0] <= info.seq]
    restored_log, source_log = open_log(restored.root, create=False), open_log(root, create=False)
    assert restored_log is not None and source_log is not None
    assert restored_log.log_id == source_log.log_id
    assert restored_log.append([Delete("x")]) == info.seq + 1  # the seq counter continues
    restored_log.close()
    source_log.close()
    assert json.loads((restored.root / "collection.json").read_text()) == {"max_top_k": 50}
    assert restored.encoder == tiny_exported.absolute()
    assert not list(tmp_path.glob(".restored*"))  # no staging folder left
    # version pruning never touches the snapshots
    IndexRoot(root).prune(keep=1)
    assert snap.archive_path(root, info.name).is_file()
    snap.delete(root, info.name)
    assert snap.list_snapshots(root) == []
    with pytest.raises(snap.SnapshotNotFound):
        snap.archive_path(root, info.name)


def _corrupt(src: Path, dst: Path, how: str) -> Path:
    data = bytearray(src.read_bytes())
    if how == "truncated":
        data = data[: len(data) * 2 // 3]
    elif how == "truncated-at-member":
        with tarfile.open(src) as tar:
            members = tar.getmembers()
        data = data[: members[-1].offset]  # cut right before snapshot.json's header
    elif how == "flipped":
        with tarfile.open(src) as tar:
            faiss = next(m for m in tar.getmembers() if m.name.endswith("index.faiss"))
        data[faiss.offset_data + 100] ^= 0xFF
    dst.write_bytes(bytes(data))
    return dst


@pytest.mark.parametrize(("how", "says"), [("truncated", "truncated"), ("truncated-at-member", "truncated"),
                                           ("flipped", "index.faiss is damaged")])
def test_a_damaged_or_truncated_snapshot_is_refused_naming_what_is_wrong(root: Path, tmp_path: Path, how: str,
                                                                         says: str) -> None:
    _write(root, 5)
    info = snap.create(root)
    bad = _corrupt(snap.archive_path(root, info.name), tmp_path / "bad.tar", how)
    with pytest.raises(SnapshotError, match=says):
        restore(bad, tmp_path / "restored")
    assert not (tmp_path / "restored").exists()
    assert {p.name for p in tmp_path.iterdir()} == {"root", "bad.tar"}  # no staging folder left


def test_a_restore_never_writes_over_a_collection_and_needs_its_encoder(root: Path, tmp_path: Path,
                                                                       tiny_exported: Path) -> None:
    info = snap.create(root, name="before-upgrade")
    archive = snap.archive_path(root, "before-upgrade")
    with pytest.raises(SnapshotError, match="not empty"):
        restore(archive, root)
    assert IndexRoot(root).current_version() == info.version  # untouched
    (tmp_path / "empty").mkdir()
    assert restore(archive, tmp_path / "empty").version == info.version  # an empty folder is fine
    # the encoder elsewhere: found among the ones given (a models directory), the manifest pointed at it
    moved = tmp_path / "models" / "tiny"
    shutil.copytree(tiny_exported, moved)
    manifest = Manifest.load(root / "versions" / info.version)
    manifest.model.dir = str(tmp_path / "gone")
    manifest.save(root / "versions" / info.version)
    archive2 = snap.archive_path(root, snap.create(root).name)
    with pytest.raises(SnapshotError, match="encoder it was made with, 'gone'.*--encoder DIR"):
        restore(archive2, tmp_path / "r2")
    r = restore(archive2, tmp_path / "r3", encoders=[tmp_path / "nothing", moved])
    assert r.encoder == moved and Manifest.load(r.root / "versions" / r.version).model.dir == str(moved)
    with pytest.raises(SnapshotError, match="not a snapshot name"):
        snap.create(root, name="../x")
    with pytest.raises(SnapshotError, match="already exists"):
        snap.create(root, name="before-upgrade")


def test_two_snapshots_made_at_once_both_complete(root: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """One made by the API while `indexer snapshot create` makes another on the same root (two processes, or two
    callers here): the second waits for the first instead of removing its partial files as a killed snapshot's
    (the first failed with a bare FileNotFoundError: its `.NAME.partial` was unlinked under it)."""
    _write(root, 5)
    add, paused, go = snap._add, threading.Event(), threading.Event()

    def add_pausing(*args: object, **kwargs: object) -> None:
        if threading.current_thread().name == "first" and not paused.is_set():
            paused.set()  # the first one's archive is half written
            go.wait(30)
        add(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(snap, "_add", add_pausing)
    made: dict[str, object] = {}

    def make(name: str) -> None:
        try:
            made[name] = snap.create(root, name=name)
        except Exception as exc:  # noqa: BLE001 (the test looks at it)
            made[name] = exc

    first = threading.Thread(target=make, args=("a",), name="first")
    first.start()
    assert paused.wait(30)
    second = threading.Thread(target=make, args=("b",), name="second")
    second.start()
    second.join(2)  # with no lock between them it finishes here, having removed the first one's partial file
    go.set()
    first.join(30)
    second.join(30)
    assert isinstance(made["a"], snap.SnapshotInfo) and isinstance(made["b"], snap.SnapshotInfo), made
    assert [s.name for s in snap.list_snapshots(root)] == ["a", "b"]
    for name in ("a", "b"):  # both whole
        assert restore(snap.archive_path(root, name), tmp_path / f"restored-{name}").seq == 10
    assert not list((root / "snapshots").glob(".*.partial*"))


def test_a_version_that_is_not_one_of_the_roots_is_refused(root: Path, tmp_path: Path) -> None:
    """`indexer snapshot create --version` names one of the root's versions: a path out of `versions/` (another
    root's version beside this root's log) or a partial build was archived, a snapshot no restore accepts."""
    other = tmp_path / "other"
    shutil.copytree(root, other, symlinks=True)
    version = IndexRoot(other).current_version()
    (root / "versions" / ".building-x").mkdir()
    for bad in (f"../../other/versions/{version}", ".building-x", "."):
        with pytest.raises(SnapshotError, match="has no version"):
            snap.create(root, version=bad)
    assert snap.list_snapshots(root) == [] and not list((root / "snapshots").glob("*.tar"))
    assert snap.create(root, version=version).version == version  # its own version, by name


@pytest.mark.parametrize(("how", "says"), [
    ("flipped", r"index\.faiss is damaged: its xxh3-128 \w+ is not the \w+ its manifest records"),
    ("truncated", r"store\.sqlite is damaged: [\d,]+ bytes where its manifest records"),
    ("manifest", r"manifest\.json does not match its own checksum")])
def test_a_version_damaged_on_disk_is_refused_not_archived(root: Path, tmp_path: Path, how: str, says: str) -> None:
    """The version's files are checked against their manifest's checksums as they are copied (read once): a file
    damaged since the version was served is refused naming it, and nothing is left (it was archived, its damaged
    bytes hashed into snapshot.json: a snapshot that every restore refuses, found out when it is needed)."""
    folder = IndexRoot(root).current_dir()
    if how == "flipped":
        data = bytearray((folder / "index.faiss").read_bytes())
        data[len(data) // 2] ^= 0xFF
        (folder / "index.faiss").write_bytes(bytes(data))
    elif how == "truncated":
        with open(folder / "store.sqlite", "r+b") as fh:
            fh.truncate(fh.seek(0, 2) - 100)
    else:  # a field changed after it was written (its checksum not stamped again)
        raw = json.loads((folder / "manifest.json").read_text())
        raw["index"]["ntotal"] += 1
        (folder / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(SnapshotError, match=says):
        snap.create(root, name="broken")
    assert snap.list_snapshots(root) == []
    assert sorted(p.name for p in (root / "snapshots").iterdir()) == [".lock"]  # no archive, no partial file


def _with_member(archive: Path, member: str, data: bytes, out: Path) -> Path:
    """The archive with `member` replaced by `data` and snapshot.json recording it (sizes and sha256 consistent:
    as a snapshot of a collection whose collection.json another Strata wrote, or edited by hand)."""
    import hashlib
    import io

    with tarfile.open(archive) as src:
        members = {m.name: src.extractfile(m).read() for m in src.getmembers()}  # type: ignore[union-attr]
    trailer = json.loads(members.pop("snapshot.json"))
    members[member] = data
    trailer["files"][member] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    with tarfile.open(out, "w") as dst:
        for name, body in [*members.items(), ("snapshot.json", json.dumps(trailer).encode())]:
            info = tarfile.TarInfo(name)
            info.size = len(body)
            dst.addfile(info, io.BytesIO(body))
    return out


@pytest.mark.parametrize(("config", "says"), [(b'{"max_top_k": "lots"}', "collection.json: max_top_k"),
                                              (b'{"a_later_field": 1}', "collection.json: a_later_field"),
                                              (b"{max_top_k: 5", "collection.json is not JSON")])
def test_a_collection_json_that_does_not_validate_is_refused_naming_it(root: Path, tmp_path: Path, config: bytes,
                                                                       says: str) -> None:
    """Checked whole means its collection.json too: one that does not validate (a field of another Strata, a value
    of the wrong type) was restored, and the server then skipped the collection (an upload answered 404 after
    leaving its folder in place)."""
    info = snap.create(root)
    bad = _with_member(snap.archive_path(root, info.name), "collection.json", config, tmp_path / "bad.tar")
    with pytest.raises(SnapshotError, match=f"bad.tar: {says}"):
        restore(bad, tmp_path / "restored")
    assert {p.name for p in tmp_path.iterdir()} == {"root", "bad.tar"}  # no target, no staging folder left


def test_a_version_with_a_tantivy_lexical_index_restores_and_answers_the_same(tmp_path: Path,
                                                                                tiny_exported: Path) -> None:
    """tantivy keeps hidden files in its index folder (`lexical/.managed.json`, its lock files), which the manifest
    records: they were left out of the archive as if they were atomic writes' temporary files, and every restore of
    a collection with a tantivy index was refused ("lexical/.managed.json is missing")."""
    from indexer.build import BuildConfig, build
    from indexer.runtime.version import IndexVersion

    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps({"id": i, "text": f"how can i learn python {i} dog cat"}) + "\n"
                            for i in range(DOCS)))
    root = tmp_path / "root"
    build(BuildConfig(model_dir=tiny_exported, data=str(data), root=root, index="flat", threads=1, evaluate=False,
                      lexical_engine="tantivy"))
    version = IndexRoot(root).current_dir()
    assert (version / "lexical" / ".managed.json").is_file()
    manifest = Manifest.load(version)
    assert "lexical/.managed.json" in manifest.checksums.files  # type: ignore[union-attr]
    restored = restore(snap.archive_path(root, snap.create(root).name), tmp_path / "restored")
    queries = ["learn python 7", "dog cat", "how can i"]
    answers = []
    for folder in (version, restored.root / "versions" / restored.version):
        opened = IndexVersion(folder)
        try:
            answers.append([(s.tolist(), i.tolist()) for s, i in opened.lexical_search(queries, 5)])
        finally:
            opened.close()
    assert answers[0] == answers[1] and answers[0][0][1]


def test_a_version_file_that_fails_its_manifest_checksum_is_named_as_in_the_archive(root: Path,
                                                                                     tmp_path: Path) -> None:
    """A member whose sha256 snapshot.json records (an archive made consistent by hand, or by a Strata that did not
    check the version as it copied it) but that fails the version's own checksum: refused naming the version's file
    as the archive holds it, not by the path of the restore's staging folder (removed with the refusal; over HTTP,
    a path on the server)."""
    info = snap.create(root)
    archive = snap.archive_path(root, info.name)
    with tarfile.open(archive) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/index.faiss"))
        data = bytearray(tar.extractfile(member).read())  # type: ignore[union-attr]
    data[len(data) // 2] ^= 0xFF
    bad = _with_member(archive, member.name, bytes(data), tmp_path / "bad.tar")
    with pytest.raises(SnapshotError) as refused:
        restore(bad, tmp_path / "restored")
    assert f"bad.tar: version {info.version}: index.faiss does not match its checksum" in str(refused.value)
    assert "restoring" not in str(refused.value)
    assert {p.name for p in tmp_path.iterdir()} == {"root", "bad.tar"}


def test_a_snapshot_of_a_version_of_passages_counts_documents_and_passages_apart(tmp_path: Path,
                                                                              tiny_exported: Path) -> None:
    """As `GET /collections` counts them: a version of passages holds a vector a passage, and the snapshot's
    `documents` is its documents, `passages` its passages (a version of whole documents has no `passages`); the
    restore says both."""
    from indexer.build import BuildConfig, build

    data = tmp_path / "docs.jsonl"
    long = " ".join(f"sentence {i} about learning python and dogs." for i in range(60))
    data.write_text("".join(json.dumps({"id": i, "text": long if i < 3 else f"short note {i}"}) + "\n"
                            for i in range(6)))
    root = tmp_path / "root"
    build(BuildConfig(model_dir=tiny_exported, data=str(data), root=root, index="flat", threads=1, evaluate=False,
                      chunk=32))
    manifest = Manifest.load(root / "versions" / IndexRoot(root).current_version())
    assert manifest.chunking() is not None and manifest.index.ntotal > 6  # the long ones split
    info = snap.create(root)
    assert (info.documents, info.passages) == (6, manifest.index.ntotal)
    assert [(s.documents, s.passages) for s in snap.list_snapshots(root)] == [(6, manifest.index.ntotal)]
    restored = restore(snap.archive_path(root, info.name), tmp_path / "restored")
    assert (restored.documents, restored.passages) == (6, manifest.index.ntotal)


def test_a_snapshot_of_whole_documents_has_no_passages(root: Path, tmp_path: Path) -> None:
    info = snap.create(root)
    assert (info.documents, info.passages) == (DOCS, None)
    assert restore(snap.archive_path(root, info.name), tmp_path / "restored").passages is None


def test_a_sweep_leaves_a_restore_in_progress_alone_and_removes_what_a_dead_one_left(
        root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server starting on a collections folder sweeps what interrupted operations left there; a restore that
    another process is running there at that moment is not a leftover: its staging folder stays, and it completes.
    What it leaves once no operation runs (a killed one's folder) is swept."""
    import subprocess
    import sys

    import indexer.runtime.restore as restoring
    from tests.conftest import REPO

    info = snap.create(root)
    folder = tmp_path / "collections"
    folder.mkdir()
    (folder / ".gone.restoring-deadbeef").mkdir()  # what a killed restore left
    staged, go = threading.Event(), threading.Event()
    extract = restoring._extract

    def paused(*args: object, **kwargs: object) -> object:
        staged.set()  # its staging folder made, nothing in it yet
        assert go.wait(60)
        return extract(*args, **kwargs)

    monkeypatch.setattr(restoring, "_extract", paused)
    done: list[object] = []
    t = threading.Thread(target=lambda: done.append(restore(snap.archive_path(root, info.name), folder / "twin")))
    t.start()

    def sweep() -> list[str]:  # from another process, as a server starting on the folder does
        r = subprocess.run([sys.executable, "-c", "import json, sys; from pathlib import Path; from indexer.runtime."
                            "collection_dirs import sweep; print(json.dumps(sweep(Path(sys.argv[1]))))", str(folder)],
                           cwd=REPO, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    try:
        assert staged.wait(60)
        assert sweep() == []  # an operation is staging here: nothing is a leftover now
        assert any(".twin.restoring-" in p.name for p in folder.iterdir())
    finally:
        go.set()
        t.join(120)
    assert done and IndexRoot(folder / "twin").current_version() == info.version  # it completed
    assert sweep() == [".gone.restoring-deadbeef"]  # then the killed one's folder goes
    assert sorted(p.name for p in folder.iterdir()) == ["twin"]


def test_the_restore_cli_pairs_with_an_encoder_of_the_models_folder(root: Path, tmp_path: Path,
                                                                    tiny_exported: Path) -> None:
    """On a machine where the snapshot's version was not built, `indexer snapshot restore` finds the encoder among
    $STRATA_MODELS_DIR's exported ones (checked byte for byte), as an upload over HTTP does; without it, the refusal
    names `--encoder`."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    folder = IndexRoot(root).current_dir()
    manifest = Manifest.load(folder)
    manifest.model.dir = str(tmp_path / "gone" / tiny_exported.name)  # where it was built: not on this machine
    manifest.save(folder)
    archive = snap.archive_path(root, snap.create(root).name)
    models = tmp_path / "models"
    shutil.copytree(tiny_exported, models / "minilm-here")

    def restore_cli(target: Path, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "indexer.cli", "snapshot", "restore", str(archive), "--root",
                               str(target)], cwd=REPO, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "HF_HUB_OFFLINE": "1", **env})

    refused = restore_cli(tmp_path / "a", STRATA_MODELS_DIR=str(tmp_path / "empty"))
    assert refused.returncode == 2 and "--encoder" in refused.stderr and "Traceback" not in refused.stderr
    done = restore_cli(tmp_path / "b", STRATA_MODELS_DIR=str(models))
    assert done.returncode == 0, done.stderr
    restored = Manifest.load(IndexRoot(tmp_path / "b").current_dir())
    assert restored.model.dir == str(models / "minilm-here")
