"""The write path's switch of the served version (`Writes.switch`), on a real version (FAISS IVF, SQLite store, the
SQLite write log): a candidate opened while writes keep landing on the served version is caught up under the write
lock before the swap, so the shrink guard's check compares two versions that hold the same log entries (the
writes acknowledged during the candidate's replay never count against it), and a check that refuses leaves the
served version in place, still taking writes."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from indexer.runtime.layout import IndexRoot
from indexer.runtime.live_index import LiveIndex
from indexer.runtime.version import IndexVersion
from indexer.runtime.writelog import Delete, Upsert
from indexer.runtime.writes import Writes
from tests.indexer.runtime.test_overlay import N, make_version, unit


def served(root: Path, name: str) -> SimpleNamespace:
    """What the write path needs of a searcher (`writes.Served`): a freshly opened copy of the current version."""
    index = IndexVersion(IndexRoot(root).current_dir())
    return SimpleNamespace(index=index, version=name, manifest=index.manifest,
                           encoder=SimpleNamespace(meta=SimpleNamespace(onnx_sha256="sha")))


def upserts(first: int, n: int) -> list[Upsert]:
    vecs = unit(n, seed=first)
    return [Upsert(f"w-{first + i}", f"written {first + i}", {"n": first + i}, vecs[i], "sha") for i in range(n)]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    make_version(tmp_path / "versions" / "v1")
    IndexRoot(tmp_path).set_current("v1")
    return tmp_path


def test_the_check_at_the_switch_sees_the_candidate_caught_up_with_the_writes_made_meanwhile(root: Path) -> None:
    writes = Writes(root)
    current = served(root, "v1")
    writes.attach(current)
    writes.commit(lambda: current, upserts(0, 40))
    candidate = served(root, "v1-again")
    writes.attach(candidate)  # replays the 40 acknowledged so far
    assert candidate.index.ntotal == current.index.ntotal == N + 40
    # writes acknowledged on the served version while the candidate waits for its switch: 30 new, 5 deleted
    writes.commit(lambda: current, upserts(40, 30) + [Delete(f"w-{i}") for i in range(5)])
    assert current.index.ntotal == N + 65 and candidate.index.ntotal == N + 40  # behind: a check now would refuse
    seen: list[tuple[int, int]] = []
    swapped: list[SimpleNamespace] = []

    def check() -> None:
        seen.append((current.index.ntotal, candidate.index.ntotal))

    writes.switch(candidate, swapped.append, check)
    assert seen == [(N + 65, N + 65)] and swapped == [candidate]
    assert isinstance(candidate.index, LiveIndex) and candidate.index.overlay.applied_seq == 75
    for s in (current, candidate):
        s.index.close()
    writes.close()


def test_a_check_that_refuses_leaves_the_served_version_taking_writes(root: Path) -> None:
    writes = Writes(root)
    current = served(root, "v1")
    writes.attach(current)
    candidate = served(root, "v1-again")
    writes.attach(candidate)
    writes.commit(lambda: current, upserts(0, 10))
    swapped: list[SimpleNamespace] = []

    def refuse() -> None:
        raise RuntimeError("too small")

    with pytest.raises(RuntimeError, match="too small"):
        writes.switch(candidate, swapped.append, refuse)
    assert swapped == []
    result = writes.commit(lambda: current, upserts(10, 5))  # the write lock was let go
    assert result.version == "v1" and current.index.ntotal == N + 15
    for s in (current, candidate):
        s.index.close()
    writes.close()
