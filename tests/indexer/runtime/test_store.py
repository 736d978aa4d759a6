"""The store's in-memory hot set of documents: answers from memory once read, bounded, least recently used out."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from indexer.runtime.store import Store
from indexer.runtime.store_writer import write_store


def _store(tmp_path: Path, n: int = 10) -> Path:
    path = tmp_path / "store.sqlite"
    write_store(path, list(range(n)), [f"text {i}" for i in range(n)], [], [], [])
    return path


def test_documents_read_once_are_served_from_memory(tmp_path: Path) -> None:
    store = Store(_store(tmp_path))
    first = store.documents([3, 1, 7, -1, 99])  # -1 is FAISS's padding, 99 does not exist
    assert {i: d.text for i, d in first.items()} == {1: "text 1", 3: "text 3", 7: "text 7"}
    store._con.close()  # from here on, SQLite cannot answer
    again = store.documents([7, 3])
    assert {i: d.text for i, d in again.items()} == {3: "text 3", 7: "text 7"}
    with pytest.raises(sqlite3.ProgrammingError):  # a document never read must come from SQLite
        store.documents([2])


def test_the_hot_set_is_bounded_and_evicts_the_least_recently_used(tmp_path: Path) -> None:
    store = Store(_store(tmp_path), hot_documents=2)
    store.documents([1])
    store.documents([2])
    store.documents([1])  # 1 is now more recent than 2
    store.documents([3])  # evicts 2
    store._con.close()
    assert set(store.documents([1, 3])) == {1, 3}
    with pytest.raises(sqlite3.ProgrammingError):
        store.documents([2])


def test_a_store_without_a_hot_set_always_reads_sqlite(tmp_path: Path) -> None:
    store = Store(_store(tmp_path), hot_documents=0)
    assert store.documents([4])[4].text == "text 4"
    store._con.close()
    with pytest.raises(sqlite3.ProgrammingError):
        store.documents([4])
