"""Checksums of a version's files (`indexer.runtime.integrity`) on real files: every file a staged version holds is
sealed into its manifest, whatever its name or folder; any change of content or size is found and the file named;
a manifest without checksums is reported as not verified. The end-to-end refusals (swap, startup, `indexer
verify` on a built index) are in tests/service/test_swap_guards.py."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from indexer.runtime import integrity
from indexer.runtime.integrity import IntegrityError, verify_folder, write_manifest
from indexer.runtime.layout import IndexRoot
from indexer.runtime.manifest import Checksums


def stage_version(root: IndexRoot, name: str) -> Path:
    """A version written through `IndexRoot.staging`, as every build path writes one: files at the top, in a
    sub-folder (shards, a lexical index another feature may add), and a manifest with a field this module does not
    know."""
    with root.staging(name) as stage:
        (stage / "index.faiss").write_bytes(os.urandom(3 << 20))
        (stage / "store.sqlite").write_bytes(os.urandom(100_000))
        (stage / "shards").mkdir()
        (stage / "shards" / "shard-00000.faiss").write_bytes(os.urandom(50_000))
        (stage / "lexical").mkdir()
        (stage / "lexical" / "postings.bin").write_bytes(os.urandom(20_000))
        (stage / "empty.npy").write_bytes(b"")
        (stage / "manifest.json").write_text(json.dumps({"version": name, "future_field": {"kind": "hnsw"}}))
    return root.version_dir(name)


def test_staging_seals_every_file_of_the_version(tmp_path: Path) -> None:
    folder = stage_version(IndexRoot(tmp_path / "root"), "20260101T000000Z-aaaaaa")
    raw = json.loads((folder / "manifest.json").read_text())
    assert raw["future_field"] == {"kind": "hnsw"}  # a field of another feature is kept as it was
    sums = Checksums.model_validate(raw["checksums"])
    assert sums.algorithm == "xxh3-128"
    assert set(sums.files) == {"index.faiss", "store.sqlite", "shards/shard-00000.faiss", "lexical/postings.bin",
                               "empty.npy"}
    assert sums.files["index.faiss"].size == 3 << 20 and sums.files["empty.npy"].size == 0
    v = verify_folder(folder)
    assert v.checked and v.files == 5 and v.bytes == (3 << 20) + 170_000 and v.unrecorded == ()


@pytest.mark.parametrize(("rel", "change", "message"), [
    ("index.faiss", "flip", "does not match its checksum"),
    ("index.faiss", "truncate", "(truncated"),
    ("store.sqlite", "grow", "(grown"),
    ("lexical/postings.bin", "flip", "does not match its checksum"),
    ("shards/shard-00000.faiss", "delete", "is missing"),
    ("empty.npy", "grow", "(grown"),
])
def test_any_change_is_found_and_the_file_named(tmp_path: Path, rel: str, change: str, message: str) -> None:
    folder = stage_version(IndexRoot(tmp_path / "root"), "20260101T000000Z-bbbbbb")
    path = folder / rel
    if change == "flip":  # one bit in the middle: same size
        with open(path, "r+b") as fh:
            fh.seek(path.stat().st_size // 2)
            byte = fh.read(1)[0]
            fh.seek(-1, os.SEEK_CUR)
            fh.write(bytes([byte ^ 1]))
    elif change == "truncate":
        os.truncate(path, path.stat().st_size - 1)
    elif change == "grow":
        with open(path, "ab") as fh:
            fh.write(b"\0")
    else:
        path.unlink()
    with pytest.raises(IntegrityError) as err:
        verify_folder(folder)
    assert str(path) in str(err.value) and message in str(err.value)
    assert err.value.path == path


def test_a_manifest_without_checksums_is_reported_not_verified(tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / "v"
    folder.mkdir()
    (folder / "index.faiss").write_bytes(b"x" * 10)
    (folder / "manifest.json").write_text(json.dumps({"version": "v"}))
    with caplog.at_level("WARNING"):
        v = verify_folder(folder)
    assert not v.checked
    assert "has no checksums" in caplog.text and "not verified" in caplog.text


def test_files_added_after_sealing_are_listed_and_an_unknown_algorithm_is_refused(tmp_path: Path) -> None:
    folder = stage_version(IndexRoot(tmp_path / "root"), "20260101T000000Z-cccccc")
    (folder / "notes.txt").write_text("added later")
    assert verify_folder(folder).unrecorded == ("notes.txt",)
    raw = json.loads((folder / "manifest.json").read_text())
    raw["checksums"]["algorithm"] = "crc-1"
    write_manifest(folder, raw)  # re-stamped: the manifest itself is intact
    with pytest.raises(IntegrityError, match="unknown checksum algorithm 'crc-1'"):
        verify_folder(folder)


def test_a_failed_build_seals_nothing_and_leaves_nothing(tmp_path: Path) -> None:
    root = IndexRoot(tmp_path / "root")
    with pytest.raises(RuntimeError, match="boom"), root.staging("20260101T000000Z-dddddd") as stage:
        (stage / "index.faiss").write_bytes(b"partial")
        raise RuntimeError("boom")
    assert root.versions() == [] and not any((tmp_path / "root").glob(".building-*"))


def test_chunked_digest_equals_the_one_shot_digest(tmp_path: Path) -> None:
    import xxhash

    data = os.urandom(integrity.CHUNK * 2 + 12345)  # across chunk boundaries
    path = tmp_path / "f"
    path.write_bytes(data)
    assert integrity.file_digest(path) == (len(data), xxhash.xxh3_128(data).hexdigest())


def test_a_built_versions_lexical_index_is_sealed(quora_root: Path, tmp_path: Path) -> None:
    """`indexer build` writes the lexical (BM25) index inside the staging folder, before sealing: each of its
    real files is in the manifest's checksums, none is left unrecorded, and a damaged one is named."""
    folder = IndexRoot(quora_root).current_dir()
    lexical = sorted(p.relative_to(folder).as_posix() for p in (folder / "lexical").rglob("*") if p.is_file())
    assert "lexical/rows.npy" in lexical and len(lexical) > 2  # the engine's own files beside rows and stats
    sums = Checksums.model_validate(json.loads((folder / "manifest.json").read_text())["checksums"])
    assert set(lexical) <= set(sums.files)
    v = verify_folder(folder)
    assert v.checked and v.unrecorded == ()
    copy = tmp_path / folder.name
    shutil.copytree(folder, copy)
    rel = max(lexical, key=lambda r: (copy / r).stat().st_size)  # the largest: a postings or vocabulary array
    with open(copy / rel, "r+b") as fh:
        fh.seek((copy / rel).stat().st_size // 2)
        byte = fh.read(1)[0]
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte ^ 1]))
    with pytest.raises(IntegrityError, match="does not match its checksum") as err:
        verify_folder(copy)
    assert err.value.path == copy / rel


def test_the_manifest_is_checked_by_its_own_checksum(tmp_path: Path) -> None:
    """A sealed manifest carries the digest of its other fields: any change of them (a served field such as
    `writes.folded_seq`, whatever the file's formatting) is refused naming the manifest, by `verify_folder` and by
    `damage`; re-stamped by `write_manifest` (what every writer uses) it verifies again."""
    folder = stage_version(IndexRoot(tmp_path / "root"), "20260101T000000Z-eeeeee")
    path = folder / "manifest.json"
    raw = json.loads(path.read_text())
    assert raw["manifest_checksum"]["algorithm"] == "xxh3-128"
    path.write_text(json.dumps(raw))  # reformatted only: the same fields, still intact
    assert verify_folder(folder).checked and integrity.damage(folder) is None
    raw["writes"] = {"folded_seq": 30}
    path.write_text(json.dumps(raw, indent=2))
    with pytest.raises(IntegrityError, match=r"manifest.json does not match its own checksum") as caught:
        verify_folder(folder)
    assert caught.value.path == path
    assert "does not match its own checksum" in (integrity.damage(folder) or "")
    integrity.write_manifest(folder, raw)
    assert verify_folder(folder).checked
    del raw["manifest_checksum"]  # stripped from a manifest whose format carries one: refused too
    raw["format_version"] = 2
    path.write_text(json.dumps(raw))
    with pytest.raises(IntegrityError, match="has no checksum of its own"):
        verify_folder(folder)


def test_a_format_1_manifest_without_its_own_checksum_still_verifies(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    """Versions written before the manifest's own checksum (format 1) load: their files are verified, the manifest
    is reported unchecked; the first writer that saves it (`indexer eval`) stamps it."""
    folder = stage_version(IndexRoot(tmp_path / "root"), "20260101T000000Z-ffffff")
    raw = json.loads((folder / "manifest.json").read_text())
    del raw["manifest_checksum"]
    raw["format_version"] = 1
    (folder / "manifest.json").write_text(json.dumps(raw))
    with caplog.at_level("WARNING"):
        assert verify_folder(folder).checked
    assert "has no checksum of its own (format 1" in caplog.text
    assert integrity.damage(folder) is None
