"""`indexer build --data` holds a corpus's metadata to the same schema as `PUT /documents`
(`indexer.runtime.metadata`): a row outside it is one error line naming FILE:LINE, exit 2, no traceback, and the
served version untouched (the build once refused the 2^64 integer but took 300-deep nesting, which
then broke every search whose hits held the document)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from indexer.runtime.layout import IndexRoot
from indexer.runtime.metadata import MAX_DEPTH
from indexer.runtime.store import STORE, Store
from tests.conftest import indexer_cli as cli

GOOD = [{"id": i, "text": f"how do i learn python quickly {i}", "n": i, "tags": ["a", {"b": i}]} for i in range(40)]
BAD_ROWS: dict[str, tuple[str, str]] = {  # name: (the bad row, what the error line says after FILE:LINE)
    "deep": ('{"id": 900, "text": "deep", "d": ' + "[" * 300 + "]" * 300 + "}",
             f"metadata field 'd' nests deeper than {MAX_DEPTH} levels"),
    "too-deep-to-parse": ('{"id": 900, "text": "deep", "d": ' + "[" * 200_000 + "]" * 200_000 + "}",
                          "JSON nested too deep to read"),
    "2pow64": ('{"id": 900, "text": "big", "x": 18446744073709551616}',
               "metadata field 'x': integer 18446744073709551616 does not fit in 64 bits"),
    "below": ('{"id": 900, "text": "big", "m": {"x": [-9223372036854775809]}}',
              "metadata field 'm.x[0]': integer -9223372036854775809 does not fit in 64 bits"),
    "surrogate": ('{"id": 900, "text": "s", "tag": "\\ud800"}',
                  "metadata field 'tag': string '\\ud800' is not valid Unicode"),
    "surrogate-text": ('{"id": 900, "text": "how \\udfff"}', "field 'text' is not valid Unicode"),
    # SQLite's JSON functions, which index the metadata, cut at a NUL (compaction stored `k\0z` as `k`)
    "nul-name": ('{"id": 900, "text": "nul", "k\\u0000z": 1}',
                 "metadata field name 'k\\x00z' in 'metadata' holds a NUL"),
    "nul-value": ('{"id": 900, "text": "nul", "tag": "a\\u0000b"}',
                  "metadata field 'tag': string 'a\\x00b' holds a NUL"),
}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, tiny_exported: Path) -> Path:
    tmp = tmp_path_factory.mktemp("bad-metadata")
    data = tmp / "good.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in GOOD))
    root = tmp / "root"
    r = cli("build", "--root", str(root), "--model", str(tiny_exported), "--data", str(data), "--threads", "1")
    assert r.returncode == 0, r.stderr
    return root


@pytest.mark.parametrize("name", sorted(BAD_ROWS))
def test_metadata_outside_the_schema_is_a_file_line_error(root: Path, tiny_exported: Path, tmp_path: Path,
                                                          name: str) -> None:
    row, words = BAD_ROWS[name]
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in GOOD[:5]) + row + "\n")
    layout = IndexRoot(root)
    before = (layout.current_version(), layout.versions())
    r = cli("build", "--root", str(root), "--model", str(tiny_exported), "--data", str(path), "--threads", "1")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-3000:]
    error = r.stderr.strip().splitlines()[-1]
    assert error.startswith("indexer build: error: ") and f"{path}:6: {words}" in error, error[:500]
    assert (layout.current_version(), layout.versions()) == before


def test_metadata_inside_the_schema_is_kept_as_given(root: Path) -> None:
    store = Store(IndexRoot(root).current_dir() / STORE)
    try:
        assert store.documents([7])[7].metadata == {"n": 7, "tags": ["a", {"b": 7}]}
    finally:
        store.close()
