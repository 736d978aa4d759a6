"""The overlay's written rows searched through inverted lists (`faiss.written.WrittenLists`) once there are
`lists_from` of them, on real versions (real FAISS, real SQLite store): on the IVF version's own quantizer probed
at every list the answers equal brute force over what is served (replacements, deletes and dead rows included);
on clustered vectors the version's quantizer at its nprobe and the overlay's own trained lists (a flat version)
keep recall@10 >= 0.95 against exact search; rows written after a search's snapshot never answer it; the lists
trained in the background are installed while writes go on and the answers stay whole; a search does not wait
behind a write's assignment to the lists."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from indexer.runtime.ann import FlatParams
from indexer.runtime.faiss import written
from indexer.runtime.faiss.files import INDEX_FILE, write_index
from indexer.runtime.faiss.flat import FlatIndex
from indexer.runtime.faiss.training import build_ivf
from indexer.runtime.faiss.written import OWN_NLIST, WrittenLists
from indexer.runtime.live_index import LiveIndex
from indexer.runtime.manifest import DataInfo, IndexInfo, Manifest, ModelInfo, Timings
from indexer.runtime.store import STORE
from indexer.runtime.store_writer import CorpusStoreWriter
from indexer.runtime.version import IndexVersion
from indexer.runtime.writelog import DELETE, UPSERT, LogEntry
from tests.indexer.runtime.test_overlay import brute_force, make_version, unit

CDIM, CENTRES = 32, 64


def clustered(n: int, seed: int, spread: float = 0.35) -> np.ndarray:
    """Unit vectors around `CENTRES` fixed centres (the same centres for every seed)."""
    centres = np.random.default_rng(12345).standard_normal((CENTRES, CDIM)).astype(np.float32)
    rng = np.random.default_rng(seed)
    x = centres[rng.integers(0, CENTRES, n)] + spread * rng.standard_normal((n, CDIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def entry(seq: int, op: str, ext: int | str, vec: np.ndarray | None = None) -> LogEntry:
    return LogEntry(seq, op, ext, f"written {ext}" if op == UPSERT else None, {}, vec, "sha")


def clustered_version(folder: Path, n: int, kind: str, nlist: int = 64, nprobe: int = 4) -> np.ndarray:
    """A version of `n` clustered documents (ids 0..n-1), IVF (`nlist`, `nprobe`) or flat."""
    folder.mkdir(parents=True)
    x = clustered(n, seed=1)
    writer = CorpusStoreWriter(folder / STORE)
    writer.put([(i, i, f"text {i}", json.dumps({})) for i in range(n)])
    writer.finish()
    ids = np.arange(n, dtype=np.int64)
    if kind == "ivf":
        write_index(build_ivf(x, ids, nlist, nprobe, codec="Flat")[0], folder / INDEX_FILE)
        info = IndexInfo(factory=f"IVF{nlist},Flat", nlist=nlist, nlist_requested=nlist, nprobe=nprobe, ntotal=n)
    else:
        FlatIndex.build(x, ids).save(folder / INDEX_FILE)
        info = IndexInfo.for_params(FlatParams(), n)
    Manifest(version=folder.name, created_at=datetime.now(timezone.utc),
             model=ModelInfo(dir="/nowhere", onnx_sha256="sha", pooling="mean", dim=CDIM, max_length=8, source="test"),
             index=info, data=DataInfo(source="test", protocol="corpus", rows_read=n, skipped_empty_texts=0, n_docs=n,
                                       n_queries=0), build_seconds=Timings()).save(folder)
    return x


def recall(live: LiveIndex, served: np.ndarray, queries: np.ndarray) -> float:
    """Recall@10 of `live` against exact inner-product search over `served` (row r = FAISS id r)."""
    _, ids = live.search(queries, 10)
    truth = np.argsort(-(queries @ served.T), axis=1)[:, :10]
    return float(np.mean([len(set(a.tolist()) & set(b.tolist())) / 10 for a, b in zip(ids, truth, strict=True)]))


def test_lists_on_the_versions_quantizer_at_every_list_equal_brute_force(tmp_path: Path) -> None:
    served, fid_of = make_version(tmp_path / "v1")  # IVF probed at every list: its lists' answers are exact
    live = LiveIndex(IndexVersion(tmp_path / "v1"))
    live.overlay.lists_from = 50
    vecs = unit(600, seed=5)
    seq = 0
    for i in range(600):  # new ids, base ids replaced, written ids replaced and deleted: dead rows and tombstones
        ext: int | str = f"w{i % 250}" if i % 3 else (i % 200) * 10
        seq += 1
        if i % 11 == 0:
            live.overlay.apply([entry(seq, DELETE, ext)])
            served.pop(ext, None)
        else:
            live.overlay.apply([entry(seq, UPSERT, ext, vecs[i])])
            served[ext] = vecs[i]
    snap = live.overlay.snapshot()
    assert snap.lists is not None and snap.dead > 0 and snap.exclusion is not None
    queries = np.concatenate([vecs[:40], unit(20, seed=6)])
    _, ids = live.search(queries, 10)
    ext_of = {f: e for e, f in fid_of.items()} | {f: e for e, f in live.overlay._fid_of.items()}
    assert [[ext_of[i] for i in row] for row in ids.tolist()] == brute_force(served, queries, 10)
    live.overlay.lists_from = 10**9  # the exact path answers the same
    _, exact = live.search(queries, 10)
    assert live.overlay.snapshot().lists is None and exact.tolist() == ids.tolist()
    live.close()


def test_rows_written_after_a_snapshot_never_answer_it(tmp_path: Path) -> None:
    make_version(tmp_path / "v1")
    live = LiveIndex(IndexVersion(tmp_path / "v1"))
    live.overlay.lists_from = 1
    vecs = unit(200, seed=7)
    live.overlay.apply([entry(i + 1, UPSERT, f"a{i}", vecs[i]) for i in range(100)])
    snap = live.overlay.snapshot()
    live.overlay.apply([entry(101 + i, UPSERT, f"b{i}", vecs[100 + i]) for i in range(100)])
    assert snap.lists is not None and snap.lists.rows == 200
    _, rows = snap.lists.search(vecs[100:], 10, len(snap.fids))
    assert rows.max() < 100 and (rows >= 0).all()
    live.close()


def test_the_versions_quantizer_keeps_recall_on_clustered_vectors(tmp_path: Path) -> None:
    clustered_version(tmp_path / "v1", 4000, "ivf", nlist=64, nprobe=4)
    live = LiveIndex(IndexVersion(tmp_path / "v1"))
    live.overlay.lists_from = 1000
    written = clustered(20_000, seed=2)
    for start in range(0, len(written), 500):
        live.overlay.apply([entry(4001 + j, UPSERT, 4000 + j, written[j]) for j in range(start, start + 500)])
    snap = live.overlay.snapshot()
    assert snap.lists is not None and snap.lists.nlist == 64
    base = np.asarray(live.base.ann.stored_vectors()[1])[np.argsort(live.base.ann.stored_vectors()[0])]
    got = recall(live, np.concatenate([base, written]), clustered(300, seed=3))
    live.overlay.lists_from = 10**9
    exact_written = recall(live, np.concatenate([base, written]), clustered(300, seed=3))
    assert got >= 0.95, got
    assert got >= exact_written - 0.05, (got, exact_written)
    live.close()


def test_own_lists_over_a_flat_version_keep_recall_on_clustered_vectors(tmp_path: Path) -> None:
    base = clustered_version(tmp_path / "v1", 500, "flat")
    live = LiveIndex(IndexVersion(tmp_path / "v1"))
    assert live.base.ann.written_lists() is None  # nothing to share: trained from the written rows
    live.overlay.lists_from = 12_000
    live.overlay.train_in_background = False
    written = clustered(30_000, seed=4)
    for start in range(0, len(written), 1000):
        if start == 11_000:
            assert live.overlay.snapshot().lists is None  # below lists_from: exact
        live.overlay.apply([entry(501 + j, UPSERT, 500 + j, written[j]) for j in range(start, start + 1000)])
    snap = live.overlay.snapshot()
    assert snap.lists is not None and snap.lists.nlist == OWN_NLIST and snap.lists.rows == 30_000
    assert recall(live, np.concatenate([base, written]), clustered(300, seed=5)) >= 0.95
    live.close()


def test_lists_trained_in_the_background_are_installed_while_writes_go_on(tmp_path: Path) -> None:
    clustered_version(tmp_path / "v1", 500, "flat")
    live = LiveIndex(IndexVersion(tmp_path / "v1"))
    live.overlay.lists_from = 5000
    written = clustered(20_000, seed=6)
    queries = clustered(50, seed=7)
    for start in range(0, len(written), 200):
        live.overlay.apply([entry(501 + j, UPSERT, 500 + j, written[j]) for j in range(start, start + 200)])
        _, ids = live.search(queries, 10)
        for row in ids:
            assert (row >= 0).all() and len(set(row.tolist())) == 10  # k distinct hits at every moment
    deadline = time.monotonic() + 60
    while live.overlay.snapshot().lists is None and time.monotonic() < deadline:
        time.sleep(0.05)
    snap = live.overlay.snapshot()
    assert snap.lists is not None and snap.lists.rows == len(snap.fids) == 20_000  # caught up with every row
    live.close()


def test_a_search_does_not_wait_behind_a_writes_assignment_to_its_lists() -> None:
    """An add assigns its vectors to their lists (every vector against every centroid) before it takes the lists'
    lock: held in that assignment, it lets a search through; its rows answer once the add has returned."""
    lists = WrittenLists.trained(clustered(2000, 1))
    lists.add(clustered(500, 2), 0)
    entered, release = threading.Event(), threading.Event()
    quantizer = lists._quantizer

    class HeldQuantizer:  # the assignment, held for as long as the test wants
        def search(self, x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
            entered.set()
            assert release.wait(30)
            return quantizer.search(x, k)

    lists._quantizer = HeldQuantizer()
    new = clustered(64, 3)
    writer = threading.Thread(target=lists.add, args=(new, 500))
    writer.start()
    try:
        assert entered.wait(30)
        t0 = time.perf_counter()
        scores, rows = lists.search(new[:4], 1, lists.rows)  # answered while the add is held
        assert time.perf_counter() - t0 < 5 and writer.is_alive()
        assert (rows < 500).all()  # the rows being added are not there yet
    finally:
        release.set()
        writer.join(30)
    scores, rows = lists.search(new[:4], 1, lists.rows)
    assert lists.rows == 564 and rows[:, 0].tolist() == [500, 501, 502, 503], rows


def test_a_write_never_takes_the_lists_lock_the_next_search_appends_its_rows(monkeypatch: pytest.MonkeyPatch
                                                                             ) -> None:
    """A write runs below the searches' CPU priority, so it must not hold the lock a search needs: with that lock
    held elsewhere (as by a search), an add still returns; the next search appends the queued rows, in order,
    before it reads the lists. Only a queue of `PENDING_ROWS` (no search came) makes a write append them itself."""
    lists = WrittenLists.trained(clustered(2000, 1))
    first, second = clustered(300, 2), clustered(200, 3)
    with lists._lock:  # a search holding the lists
        done = threading.Event()
        writer = threading.Thread(target=lambda: (lists.add(first, 0), lists.add(second, 300), done.set()))
        writer.start()
        assert done.wait(30), "a write waited for the lists' lock"
    writer.join(30)
    assert lists.rows == 500
    scores, rows = lists.search(np.concatenate([first[:3], second[-3:]]), 1, lists.rows)
    assert rows[:, 0].tolist() == [0, 1, 2, 497, 498, 499], rows  # each query finds itself at its row
    assert not lists._queued
    monkeypatch.setattr(written, "PENDING_ROWS", 100)
    lists.add(clustered(150, 4), 500)  # past the bound with no search: appended by the write
    assert not lists._queued and lists._index.ntotal == 650
