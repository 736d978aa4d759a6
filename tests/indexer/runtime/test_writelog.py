"""The write log: typed ids, vectors and metadata round-trip; seqs only grow; what `append` returned survives a
SIGKILL of the writing process; the net effect per id; the FAISS exclusion the overlay searches with."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from indexer.runtime.faiss.exact import knn_inner_product
from indexer.runtime.faiss.search import Exclusion, remove_ids, search, search_excluding
from indexer.runtime.faiss.training import build_ivf
from indexer.runtime.storage import StorageUnavailable
from indexer.runtime.writelog import (
    DELETE,
    UPSERT,
    Delete,
    Upsert,
    WriteLog,
    WriteLogError,
    log_path,
    net_effect,
    open_log,
)
from tests.conftest import REPO


def unit(n: int, dim: int = 8, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_entries_round_trip_with_their_types(tmp_path: Path) -> None:
    log = WriteLog(log_path(tmp_path))
    v = unit(3)
    first = log.append([Upsert(17, "int seventeen", {"lang": "en", "n": 1.5, "tags": ["a"]}, v[0], "sha-a"),
                        Upsert("17", "string seventeen", {}, v[1], "sha-a")])
    second = log.append([Delete(17), Upsert(-5, "negative", {"ok": True}, v[2], "sha-b")])
    assert (first, second) == (2, 4) and log.last_seq() == 4
    entries = list(log.entries())
    assert [(e.seq, e.op, e.ext_id) for e in entries] == [(1, UPSERT, 17), (2, UPSERT, "17"), (3, DELETE, 17),
                                                          (4, UPSERT, -5)]
    assert type(entries[0].ext_id) is int and type(entries[1].ext_id) is str
    assert entries[0].metadata == {"lang": "en", "n": 1.5, "tags": ["a"]} and entries[3].metadata == {"ok": True}
    assert np.array_equal(entries[0].vector, v[0]) and entries[0].model == "sha-a"
    assert entries[2].vector is None and entries[2].text is None
    assert [e.seq for e in log.entries(after=1, upto=3)] == [2, 3]
    assert [e.seq for e in log.entries(after=2, batch=1)] == [3, 4]  # read in batches, in order
    assert log.counts() == {UPSERT: 3, DELETE: 1}
    log_id = log.log_id
    log.close()
    again = open_log(tmp_path, create=False)
    assert again is not None and again.log_id == log_id and again.last_seq() == 4  # the same log, reopened
    again.close()
    assert open_log(tmp_path / "elsewhere", create=False) is None


def test_net_effect_keeps_the_last_entry_per_id_typed(tmp_path: Path) -> None:
    log = WriteLog(log_path(tmp_path))
    v = unit(4)
    log.append([Upsert(1, "a", {}, v[0], "m"), Upsert("1", "b", {}, v[1], "m"), Upsert(2, "c", {}, v[2], "m"),
                Delete(1), Upsert(2, "d", {}, v[3], "m")])
    net = net_effect(list(log.entries()))
    assert [(k, e.op, e.text) for k, e in net.items()] == [("1", UPSERT, "b"), (1, DELETE, None), (2, UPSERT, "d")]


def _nested(levels: int) -> list[object]:
    value: list[object] = []
    for _ in range(levels):
        value = [value]
    return value


def test_bad_values_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    log = WriteLog(log_path(tmp_path))
    with pytest.raises(ValueError, match="not a finite number"):
        log.append([Upsert(1, "t", {"x": [1.0, float("nan")]}, unit(1)[0], "m")])
    # the metadata schema (indexer.runtime.metadata) is the write log's last guard too
    for meta in ({"x": 1 << 64}, {"x": "\ud800"}, {"x": _nested(40)}):
        with pytest.raises(ValueError, match="fit in 64 bits|lone surrogate|nests deeper"):
            log.append([Upsert(1, "t", meta, unit(1)[0], "m")])
    assert log.last_seq() == 0


def test_a_log_that_cannot_be_created_says_where(tmp_path: Path) -> None:
    (tmp_path / "writes").write_text("a file where the folder should be")
    with pytest.raises(WriteLogError, match="cannot open the write log"):
        WriteLog(log_path(tmp_path))


WRITER = """
import sys, numpy as np
from indexer.runtime.writelog import WriteLog, Upsert, Delete
log = WriteLog(sys.argv[1])
i = 0
while True:
    v = np.full(4, 0.5, np.float32)
    seq = log.append([Upsert(i, f"text {i}", {"i": i}, v, "m"), Delete(f"gone-{i}")])
    print(seq, i, flush=True)  # acknowledged: the append returned
    i += 1
"""


def test_acknowledged_appends_survive_sigkill(tmp_path: Path) -> None:
    path = log_path(tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True, cwd=REPO)
    acked: list[tuple[int, int]] = []
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    while len(acked) < 40 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line:
            seq, i = map(int, line.split())
            acked.append((seq, i))
    proc.send_signal(signal.SIGKILL)  # mid-append, most likely
    proc.wait()
    assert len(acked) >= 40
    log = WriteLog(path)
    entries = {e.seq: e for e in log.entries()}
    for seq, i in acked:
        assert entries[seq].ext_id == f"gone-{i}" and entries[seq - 1].ext_id == i
        assert entries[seq - 1].text == f"text {i}" and entries[seq - 1].metadata == {"i": i}
    assert log.last_seq() >= acked[-1][0]
    # a transaction is all or nothing: no upsert without the delete written with it
    assert all(entries[s].op == DELETE for s in entries if s % 2 == 0) and len(entries) % 2 == 0


def test_exclusion_is_applied_inside_the_ivf_scan() -> None:
    """The excluded ids never come back, and the search still fills k: it equals the search of the same index with
    those vectors removed."""
    x = unit(600, 16, seed=1)
    ids = np.arange(600, dtype=np.int64) * 7 + 3
    index, _, _ = build_ivf(x, ids, nlist=8, nprobe=3, codec="Flat")
    queries = x[:20]
    _, before = search(index, queries, 10)
    excluded = np.unique(before[:, :5])  # the 5 best of each query
    scores, got = search_excluding(index, queries, 10, Exclusion(excluded))
    assert not np.isin(got, excluded).any() and (got >= 0).all()
    reduced, _, _ = build_ivf(x, ids, nlist=8, nprobe=3, codec="Flat")
    remove_ids(reduced, excluded)
    ref_scores, ref = search(reduced, queries, 10)
    assert np.array_equal(got, ref) and np.allclose(scores, ref_scores)
    s, pos = knn_inner_product(queries, x[:3], 10)  # k cut to the rows there are
    assert pos.shape == (20, 3) and np.allclose(s[:, 0], np.max(queries @ x[:3].T, axis=1))


def test_a_log_that_cannot_be_opened_for_writing_is_still_read(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """An API on a read-only mount replays an existing log but refuses to append (root ignores file modes, so the
    read-only mount is stood in for by the error SQLite gives there)."""
    log = WriteLog(log_path(tmp_path))
    log.append([Upsert("a", "text", {}, unit(1)[0], "m")])
    log_id = log.log_id
    log.close()

    def readonly(self: WriteLog) -> None:
        raise __import__("sqlite3").OperationalError("attempt to write a readonly database")

    monkeypatch.setattr(WriteLog, "_connect", readonly)
    with pytest.raises(StorageUnavailable, match="read-only"):  # a fault of the disk: the API's 503
        WriteLog(log_path(tmp_path / "new"))  # nothing to read: creating it fails as before
    reader = WriteLog(log_path(tmp_path), create=False)
    assert reader.read_only and reader.log_id == log_id and reader.last_seq() == 1
    assert [e.ext_id for e in reader.entries()] == ["a"]
    with pytest.raises(StorageUnavailable, match="read-only"):  # reopening for writing is tried, and fails
        reader.append([Delete("a")])
