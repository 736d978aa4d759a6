"""Versioned index root: staging, atomic current switch, pruning, locking and clean-up of killed builds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from indexer.runtime.layout import IndexRoot, LayoutError, new_version_name
from indexer.runtime.serving import RECORD, ServingRecord


def make_version(root: IndexRoot, name: str, content: str = "x") -> None:
    with root.staging(name) as stage:
        (stage / "data.txt").write_text(content)


def test_staging_publishes_only_on_success(tmp_path: Path) -> None:
    root = IndexRoot(tmp_path)
    make_version(root, "v1")
    with pytest.raises(RuntimeError), root.staging("v2") as stage:
        (stage / "data.txt").write_text("half")
        raise RuntimeError("build failed")
    assert root.versions() == ["v1"]
    assert not any(p.name.startswith(".building") for p in tmp_path.iterdir())


def test_version_names_sort_by_creation_time_within_one_second(tmp_path: Path) -> None:
    """A build and its compaction often start in the same second: `versions()` (and so pruning, rollback and
    `built, compacted = versions()`) must still list them oldest first."""
    root = IndexRoot(tmp_path)
    names = [new_version_name() for _ in range(200)]
    seconds = [n.split("-")[0] for n in names]
    assert len(set(seconds)) < len(names)  # some share a second: the order comes from the suffix
    assert len(set(names)) == len(names)
    for name in names[:20]:
        make_version(root, name)
    assert root.versions() == names[:20]


def test_current_switch_is_a_symlink_swap(tmp_path: Path) -> None:
    root = IndexRoot(tmp_path)
    with pytest.raises(LayoutError, match="no current index"):
        root.current_dir()
    make_version(root, "v1", "one")
    root.set_current("v1")
    held = root.current_dir()  # a reader resolves current once, then keeps its version
    make_version(root, "v2", "two")
    root.set_current("v2")
    assert os.readlink(tmp_path / "current") == "versions/v2"
    assert (root.current_dir() / "data.txt").read_text() == "two"
    assert (held / "data.txt").read_text() == "one"
    with pytest.raises(LayoutError, match="no version v9"):
        root.set_current("v9")
    assert root.current_version() == "v2"


def test_prune_keeps_current_and_newest(tmp_path: Path) -> None:
    root = IndexRoot(tmp_path)
    for v in ("v1", "v2", "v3", "v4"):
        make_version(root, v)
    root.set_current("v2")
    assert root.prune(keep=2) == ["v1", "v3"]
    assert root.versions() == ["v2", "v4"]


def test_prune_keeps_the_version_an_api_serves(tmp_path: Path) -> None:
    """Builds the serving API refused leave `current` ahead of what it serves: pruning keeps that one too, so a
    restart can still serve it (`indexer.runtime.serving`)."""
    root = IndexRoot(tmp_path)
    for v in ("v1", "v2", "v3", "v4", "v5"):
        make_version(root, v)
    root.set_current("v5")
    record = ServingRecord(tmp_path / RECORD)
    record.passed("v1")
    record.refuse("v4", "shrink", "too small", "2026-11-27T10:00:00+00:00")
    assert record.save()
    assert root.prune(keep=2) == ["v2", "v3"]
    assert root.versions() == ["v1", "v4", "v5"]
    again = ServingRecord.load(tmp_path / RECORD)
    assert again.served == "v1" and again.refused["v4"].kind == "shrink"
    again.passed("v5")  # a newer version passed: older refusals no longer apply
    assert again.served == "v5" and again.refused == {}
    (tmp_path / RECORD).write_text("{not json")
    assert ServingRecord.load(tmp_path / RECORD).served is None  # unreadable: started without it (logged)


def test_second_build_is_refused_while_locked(tmp_path: Path) -> None:
    a, b = IndexRoot(tmp_path), IndexRoot(tmp_path)
    with a.build_lock():
        with pytest.raises(LayoutError, match="another `indexer build` is running"), b.build_lock():
            pass
    with b.build_lock():
        pass


def test_partial_builds_are_removed(tmp_path: Path) -> None:
    root = IndexRoot(tmp_path)
    (tmp_path / ".building-20260101T000000Z-dead00").mkdir(parents=True)
    (tmp_path / ".building-20260101T000000Z-dead00" / "index.faiss").write_bytes(b"partial")
    with root.build_lock():
        assert root.remove_partial_builds() == [".building-20260101T000000Z-dead00"]
    assert root.versions() == []
