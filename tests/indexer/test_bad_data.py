"""Bad files handed to the indexer: malformed TSV rows, binary junk, a truncated index, a lying manifest.
Each is one clear error line (file and line where it applies), exit 2, and the served version untouched."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest

from indexer.runtime.layout import IndexRoot
from tests.conftest import indexer_cli as cli


@pytest.fixture(scope="module")
def tiny_root(tmp_path_factory: pytest.TempPathFactory, tiny_exported: Path, quora_file: Path) -> Path:
    root = tmp_path_factory.mktemp("bad-data") / "root"
    r = cli("build", "--root", str(root), "--model", str(tiny_exported), "--data", str(quora_file), "--rows", "300",
            "--threads", "1")
    assert r.returncode == 0, r.stderr
    return root


def snapshot(root: Path) -> tuple[str | None, list[str], list[str]]:
    r = IndexRoot(root)
    return r.current_version(), r.versions(), sorted(p.name for p in root.glob(".building-*"))


HEADER = "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
BAD_FILES = {
    "short-row.tsv": (HEADER + "0\t1\t2\tWhat?\tWhy?\t0\n1\t3\t4\tonly four fields\n").encode(),
    "bad-int.tsv": (HEADER + "0\t1\tx\tWhat?\tWhy?\t0\n").encode(),
    "junk.bin": os.urandom(2048),
    "junk.gz": b"\x1f\x8b" + os.urandom(500),
    "latin1.tsv": (HEADER + "0\t1\t2\tCaf\xe9?\tWhy?\t0\n").encode("latin-1"),
}
EXPECTED = {"short-row.tsv": "short-row.tsv:3: expected 6 tab-separated fields, got 4",
            "bad-int.tsv": "bad-int.tsv:2: id, qid1, qid2 and is_duplicate must be integers",
            "junk.bin": "junk.bin", "junk.gz": "junk.gz", "latin1.tsv": "latin1.tsv"}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_tsv_is_a_clear_error_and_nothing_changes(tiny_root: Path, tiny_exported: Path, tmp_path: Path,
                                                      name: str) -> None:
    path = tmp_path / name
    path.write_bytes(BAD_FILES[name])
    before = snapshot(tiny_root)
    build = cli("build", "--root", str(tiny_root), "--model", str(tiny_exported), "--data", str(path))
    add = cli("build", "--root", str(tiny_root), "--add", str(path))
    for r in (build, add):
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        error = r.stderr.strip().splitlines()[-1]  # after the INFO log lines: one line that says what is wrong
        assert error.startswith("indexer build: error: ") and EXPECTED[name] in error, r.stderr
    assert snapshot(tiny_root) == before


def test_bad_add_file_names_the_line(tiny_root: Path, tmp_path: Path) -> None:
    path = tmp_path / "new.tsv.gz"
    with gzip.open(path, "wt") as fh:
        fh.write("id\tquestion\n1\tfine\nseven\tnot an id\n")
    before = snapshot(tiny_root)
    r = cli("build", "--root", str(tiny_root), "--add", str(path))
    assert r.returncode == 2 and "new.tsv.gz:3: id must be an integer" in r.stderr, r.stderr
    assert snapshot(tiny_root) == before


def _copy_current(root: Path, name: str) -> Path:
    src = IndexRoot(root).current_dir()
    dst = root / "versions" / name
    shutil.copytree(src, dst)
    return dst


def test_truncated_index_and_lying_manifest_are_clear_errors(tiny_root: Path) -> None:
    before = snapshot(tiny_root)
    truncated = _copy_current(tiny_root, "29990101T000000Z-trunc0")
    data = (truncated / "index.faiss").read_bytes()
    (truncated / "index.faiss").write_bytes(data[: len(data) // 3])
    lying = _copy_current(tiny_root, "29990101T000000Z-lying0")
    manifest = json.loads((lying / "manifest.json").read_text())
    manifest["model"]["dim"] = 768
    (lying / "manifest.json").write_text(json.dumps(manifest))
    try:
        r = cli("eval", "--root", str(tiny_root), "--version", truncated.name)
        assert r.returncode == 2 and "index.faiss is not a readable FAISS index" in r.stderr, r.stderr
        r = cli("eval", "--root", str(tiny_root), "--version", lying.name)
        assert r.returncode == 2 and "has dimension 32 but the manifest says 768" in r.stderr, r.stderr
        for bad in (truncated.name, lying.name):  # nor can either be made current
            r = cli("rollback", "--root", str(tiny_root), bad)
            assert r.returncode == 2 and "Traceback" not in r.stderr
        assert IndexRoot(tiny_root).current_version() == before[0]
    finally:
        shutil.rmtree(truncated)
        shutil.rmtree(lying)
    assert snapshot(tiny_root) == before


def test_rollback_on_a_root_without_a_current_index_says_so(tmp_path: Path) -> None:
    """An empty folder (a mistyped --root) said "has no version older than None to roll back to"."""
    r = cli("rollback", "--root", str(tmp_path))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip() == (f"indexer rollback: error: {tmp_path} has no current index "
                                f"(build one with `indexer build --root {tmp_path}`)"), r.stderr


def test_a_root_that_is_a_file_is_named_as_such(tmp_path: Path, tiny_exported: Path) -> None:
    """`indexer build --root FILE` said "[Errno 17] File exists: 'FILE'"."""
    data, root = tmp_path / "docs.jsonl", tmp_path / "a-file"
    data.write_text('{"id": "a", "text": "dog"}\n')
    root.write_text("not a folder")
    r = cli("build", "--root", str(root), "--model", str(tiny_exported), "--data", str(data), "--no-eval")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines()[-1] == (f"indexer build: error: {root} is a file, not a folder: --root "
                                                 "names the folder of an index root"), r.stderr


def test_a_manifest_that_is_not_json_is_one_line_naming_it(tmp_path: Path, tiny_exported: Path) -> None:
    """eval, compact, shard, build --add, collection printed pydantic's several lines and its link; snapshot create
    printed "value: Invalid JSON …" without the file."""
    data, root = tmp_path / "docs.jsonl", tmp_path / "root"
    data.write_text('{"id": "a", "text": "dog"}\n{"id": "b", "text": "cat"}\n')
    assert cli("build", "--root", str(root), "--model", str(tiny_exported), "--data", str(data),
               "--no-eval").returncode == 0
    manifest = IndexRoot(root).current_dir() / "manifest.json"
    manifest.write_text('{"x":\n')
    for args in (("eval",), ("snapshot", "create")):
        r = cli(*args, "--root", str(root))
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        last = r.stderr.strip().splitlines()[-1]
        assert last.startswith(f"indexer {args[0]}: error: {manifest} is not a valid manifest: value: Invalid JSON"), \
            r.stderr
