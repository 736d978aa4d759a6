"""The id → text store of an index version (SQLite), plus its evaluation queries and gold pairs."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

STORE = "store.sqlite"

_SCHEMA = """
CREATE TABLE docs (id INTEGER PRIMARY KEY, text TEXT NOT NULL);
CREATE TABLE queries (id INTEGER PRIMARY KEY, text TEXT NOT NULL);
CREATE TABLE gold (query_id INTEGER NOT NULL, doc_id INTEGER NOT NULL, PRIMARY KEY (query_id, doc_id));
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


def write_store(
    path: Path,
    doc_ids: Sequence[int],
    doc_texts: Sequence[str],
    query_ids: Sequence[int],
    query_texts: Sequence[str],
    gold: Sequence[Iterable[int]],
    meta: dict[str, str] | None = None,
) -> None:
    """Create a new store file (the caller writes it inside a not-yet-published build folder)."""
    con = sqlite3.connect(path)
    try:
        con.executescript(_SCHEMA)
        con.executemany("INSERT INTO docs VALUES (?, ?)", zip(map(int, doc_ids), doc_texts, strict=True))
        con.executemany("INSERT INTO queries VALUES (?, ?)", zip(map(int, query_ids), query_texts, strict=True))
        con.executemany("INSERT INTO gold VALUES (?, ?)",
                        ((int(q), int(d)) for q, ds in zip(query_ids, gold, strict=True) for d in ds))
        con.executemany("INSERT INTO meta VALUES (?, ?)", (meta or {}).items())
        con.commit()
    finally:
        con.close()


class Store:
    """Read-only access, safe to share between threads (one connection behind a lock; lookups are tiny)."""

    def __init__(self, path: Path) -> None:
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing")
        self.path = path
        self._con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True, check_same_thread=False)
        self._lock = threading.Lock()
        try:
            self.count()
        except sqlite3.DatabaseError as exc:
            self._con.close()
            raise ValueError(f"{path} is not a Strata store: {exc}") from exc

    def count(self) -> int:
        with self._lock:
            return int(self._con.execute("SELECT COUNT(*) FROM docs").fetchone()[0])

    def texts(self, ids: Iterable[int]) -> dict[int, str]:
        wanted = sorted({int(i) for i in ids if i >= 0})
        if not wanted:
            return {}
        marks = ",".join("?" * len(wanted))
        with self._lock:
            rows = self._con.execute(f"SELECT id, text FROM docs WHERE id IN ({marks})", wanted).fetchall()
        return dict(rows)

    def eval_set(self) -> tuple[list[int], list[str], list[set[int]]]:
        with self._lock:
            queries = self._con.execute("SELECT id, text FROM queries ORDER BY id").fetchall()
            pairs = self._con.execute("SELECT query_id, doc_id FROM gold").fetchall()
        gold: dict[int, set[int]] = {}
        for q, d in pairs:
            gold.setdefault(q, set()).add(d)
        return [q for q, _ in queries], [t for _, t in queries], [gold.get(q, set()) for q, _ in queries]

    def close(self) -> None:
        with self._lock:
            self._con.close()
