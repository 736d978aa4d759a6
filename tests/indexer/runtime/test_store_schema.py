"""One store schema. A Quora build's store is a corpus store (external ids = qids, empty metadata); a store written
before that — `data/main-quora-version`, a Quora version folder written by main's code at f3b0e06 (its store has
`docs`, `queries`, `gold` and `meta` only) — still opens, searches and answers like before, with the same id
semantics (17 is not "17"), takes writes of any id through the overlay, and `apply_writes` (`indexer compact`)
brings a copy of it to the one schema. The file itself is never changed by opening it.

The folder was written by (PYTHONPATH=/work/main):
    write_store(out / STORE, qids, [f"question {q}" ...], [0, 1], ["first query", "second query"],
                [[qids[0]], [qids[1], qids[2]]], {"source": "quora", "protocol": "paper"})
    with qids = [3 * i + 1 for i in range(60)], a FlatParams index of 60 seeded unit vectors (vectors.npy) under
    the qids, and a Manifest of protocol "paper".
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from indexer.runtime.filters import FilterError
from indexer.runtime.live_index import LiveIndex
from indexer.runtime.store import STORE, Store
from indexer.runtime.store_writer import apply_writes, write_store
from indexer.runtime.version import IndexVersion
from indexer.runtime.writelog import UPSERT, LogEntry

OLD = Path(__file__).parent / "data" / "main-quora-version"
QIDS = [3 * i + 1 for i in range(60)]


def tables(path: Path) -> set[str]:
    con = sqlite3.connect(path)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        con.close()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_old_store_opens_and_answers_like_before(tmp_path: Path) -> None:
    folder = tmp_path / "v"
    shutil.copytree(OLD, folder)
    assert tables(folder / STORE) == {"docs", "queries", "gold", "meta"}  # really the old schema
    before = digest(folder / STORE)
    version = IndexVersion(folder)
    try:
        vectors = np.load(folder / "vectors.npy")
        scores, ids = version.search(vectors[:3], 2)
        assert ids[:, 0].tolist() == QIDS[:3]  # each vector finds its own qid first
        hits = version.hits(scores, ids)
        assert [(h.faiss_id, h.ext_id, h.text, h.metadata) for h in (row[0] for row in hits)] == \
            [(q, q, f"question {q}", {}) for q in QIDS[:3]]
        store = version.store
        assert store.ids_of([4, "4", 5, 7]) == {4: 4, 7: 7}  # typed: the string "4" is another document
        assert store.resolve_ext_ids(["7", "007", "x", "4"]) == {"7": 7, "4": 4}
        assert store.eval_set() == ([0, 1], ["first query", "second query"], [{1}, {4, 7}])
        assert store.graded_eval_set() is None and store.metadata_schema() == {} and store.max_id() == QIDS[-1]
        assert len(version.match({"lang": "en"}).ids) == 0  # no metadata: a field no document holds
        with pytest.raises(FilterError):
            version.match({"lang": {"near": "en"}})
    finally:
        version.close()
    assert digest(folder / STORE) == before  # opened read-only: the file is as main wrote it


def test_the_overlay_on_an_old_version_takes_any_id_and_compaction_brings_its_store_to_the_one_schema(
        tmp_path: Path) -> None:
    folder = tmp_path / "v"
    shutil.copytree(OLD, folder)
    live = LiveIndex(IndexVersion(folder))
    rng = np.random.default_rng(3)
    vecs = rng.standard_normal((2, 8)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    try:
        applied = live.overlay.apply([
            LogEntry(1, UPSERT, "s-1", "a string id", {"lang": "en"}, vecs[0], "sha"),
            LogEntry(2, UPSERT, 4, "qid 4 rewritten", {}, vecs[1], "sha"),
        ])
        assert (applied.created, applied.replaced) == (1, 1)
        hits = live.hits(*live.search(vecs, 1))
        assert [(h[0].ext_id, h[0].text, h[0].metadata) for h in hits] == \
            [("s-1", "a string id", {"lang": "en"}), (4, "qid 4 rewritten", {})]
        assert hits[1][0].faiss_id == 4  # the replaced qid keeps its FAISS id
        string_fid = hits[0][0].faiss_id
    finally:
        live.close()

    copy = tmp_path / "compacted.sqlite"
    shutil.copy2(folder / STORE, copy)
    schema = apply_writes(copy, [(string_fid, "s-1", "a string id", json.dumps({"lang": "en"})),
                                 (4, 4, "qid 4 rewritten", "{}")], [7])
    assert schema == {"lang": "str"} and {"doc_ext", "doc_meta"} <= tables(copy)
    store = Store(copy)
    try:
        assert store.ids_of(["s-1", 4, 7, 10]) == {"s-1": string_fid, 4: 4, 10: 10}
        docs = store.documents([string_fid, 4, 10])
        assert (docs[string_fid].ext_id, docs[string_fid].metadata) == ("s-1", {"lang": "en"})
        assert (docs[4].text, docs[10].ext_id, docs[10].text) == ("qid 4 rewritten", 10, "question 10")
        assert store.filter_ids({"lang": "en"}).tolist() == [string_fid]
        assert store.count() == len(QIDS)  # one added, one deleted
    finally:
        store.close()


def test_a_quora_build_writes_the_one_schema(tmp_path: Path) -> None:
    path = tmp_path / STORE
    write_store(path, [17, 20], ["seventeen", "twenty"], [0], ["q"], [[20]], {"protocol": "paper"})
    assert {"docs", "queries", "gold", "meta", "doc_ext", "doc_meta", "query_ext", "qrels"} <= tables(path)
    store = Store(path)
    try:
        assert store.ids_of([17, "17"]) == {17: 17}
        assert store.documents([20])[20].ext_id == 20 and store.documents([20])[20].metadata == {}
        assert store.eval_set() == ([0], ["q"], [{20}]) and store.graded_eval_set() is None
        assert store.metadata_schema() == {}
    finally:
        store.close()
