"""The id → text store of an index version (SQLite), plus its evaluation queries and gold pairs.

One schema for every build (`store_writer`'s `_SCHEMA` + `CORPUS_SCHEMA`): a Quora build's store is a corpus store
whose external ids are the qids and whose metadata are empty. Stores written before that (Quora builds had `docs`,
`queries`, `gold` and `meta` only) still load and serve: `Store` gives them the corpus tables in memory when it
opens them (`_legacy_tables`), and `indexer compact` writes them into the compacted version's copy
(`store_writer.apply_writes`), so the code that reads a store has one path.
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from indexer.runtime.passage_rows import PassageRef, row_view

STORE = "store.sqlite"
DOC_ROWS = "doc_rows.npy"  # a version of passages' `Store.document_rows`, written when it is sealed

log = logging.getLogger(__name__)

HOT_DOCUMENTS = 100_000  # documents kept in memory per open store (a few tens of MB of short texts)


class Store:
    """Read-only access, safe to share between threads (one connection behind a lock; lookups are tiny).

    `documents` keeps the most recently returned `hot_documents` in memory (least recently used evicted first):
    a store is immutable once written, so a cached document never goes stale, and a hit served from memory
    skips SQLite, whose pages the encoder's working set keeps evicting from the CPU caches (what the lookup costs
    a `/search`: docs/decisions.md#the-serving-paths-own-cpu)."""

    def __init__(self, path: Path, *, hot_documents: int = HOT_DOCUMENTS) -> None:
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing")
        self.path = path
        self._hot: OrderedDict[int, StoredDoc] = OrderedDict()
        self._hot_max = max(0, hot_documents)
        self._con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True, check_same_thread=False)
        self._lock = threading.Lock()
        self._tables: set[str] | None = None
        self._doc_rows: tuple[np.ndarray, np.ndarray] | None = None  # `document_rows`, found once
        self._doc_table: tuple[int, np.ndarray] | None = None  # the same as a table by id, when ids are dense
        try:
            self.count()
            if not self._has_table("doc_ext"):
                self._legacy_tables()
        except sqlite3.DatabaseError as exc:
            self._con.close()
            raise ValueError(f"{path} is not a Strata store: {exc}") from exc

    def _legacy_tables(self) -> None:
        """A store written before the one schema (an old Quora build: no `doc_ext`, `doc_meta`): the corpus tables it
        would have, built in this connection's temp schema (SQLite's temporary file, gone on close; the store's file
        stays untouched). It costs an old store's opening time, not its lookups (the figures: docs/decisions.md,
        `bench/store_schema.py`)."""
        with self._lock:
            self._con.executescript("""
                CREATE TEMP TABLE doc_ext (id INTEGER PRIMARY KEY, ext_id NOT NULL, metadata TEXT NOT NULL);
                CREATE TEMP TABLE doc_meta (key TEXT NOT NULL, value NOT NULL, id INTEGER NOT NULL);
                INSERT INTO temp.doc_ext SELECT id, id, '{}' FROM main.docs;
                CREATE UNIQUE INDEX temp.doc_ext_by_ext ON doc_ext (ext_id);
            """)

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

    def iter_texts(self, batch: int = 20_000) -> Iterator[tuple[int, str]]:
        """(FAISS id, text) of every document in ascending id order, read `batch` rows at a time (what the lexical
        index is built from: the whole list held at once would be several GB of Python objects at 10M documents). Rows
        are paged by id (`id > last`), so the lock is held for one page at a time and no cursor stays open."""
        last = -(2**63)
        while True:
            with self._lock:
                rows = self._con.execute("SELECT id, text FROM docs WHERE id > ? ORDER BY id LIMIT ?",
                                         (last, batch)).fetchall()
            yield from rows
            if len(rows) < batch:
                return
            last = rows[-1][0]

    def read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of a read-only query (what paging through the documents runs, `indexer.runtime.reading`: it
        leaves the hot documents of `documents` as they are)."""
        with self._lock:
            return self._con.execute(sql, list(params)).fetchall()

    def all_ext_ids(self) -> list[tuple[int, int | str]]:
        """(FAISS id, external id) of every document."""
        with self._lock:
            return self._con.execute("SELECT id, ext_id FROM doc_ext").fetchall()

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

    # --- external ids, metadata and graded judgments (`store_writer.CORPUS_SCHEMA`) ---

    def _has_table(self, name: str) -> bool:
        """Whether the file has table `name` (the temp tables of a legacy store do not count)."""
        if self._tables is None:
            with self._lock:
                rows = self._con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
            self._tables = {r[0] for r in rows}
        return name in self._tables

    def documents(self, ids: Iterable[int]) -> dict[int, StoredDoc]:
        """External id, text and metadata of the documents with these FAISS ids (missing ids are left out). A Quora
        store has no external ids: a document's external id is its FAISS id (the qid), its metadata empty."""
        out: dict[int, StoredDoc] = {}
        missing: set[int] = set()
        with self._lock:
            for i in ids:
                i = int(i)
                doc = self._hot.get(i)
                if doc is not None:
                    self._hot.move_to_end(i)
                    out[i] = doc
                elif i >= 0:
                    missing.add(i)
        if missing:
            fetched = self._fetch_documents(sorted(missing))
            out.update(fetched)
            if self._hot_max:
                with self._lock:
                    self._hot.update(fetched)
                    while len(self._hot) > self._hot_max:
                        self._hot.popitem(last=False)
        return out

    def ext_ids(self, ids: Iterable[int]) -> dict[int, int | str]:
        """The external ids of the rows with these FAISS ids, without their texts (what ranks a version of passages
        by documents); missing ids are left out."""
        out: dict[int, int | str] = {}
        wanted: list[int] = []
        with self._lock:
            for i in ids:
                doc = self._hot.get(int(i))
                if doc is not None:
                    out[int(i)] = doc.ext_id
                elif i >= 0:
                    wanted.append(int(i))
        for part in _chunks(sorted(set(wanted))):
            sql = f"SELECT id, ext_id FROM doc_ext WHERE id IN ({','.join('?' * len(part))})"
            with self._lock:
                out.update(self._con.execute(sql, list(part)).fetchall())
        return out

    def document_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(every row's FAISS id ascending, its document's ordinal): the rows of one document (the passages of a
        version of passages, `passages.document_key`) share an ordinal, any other row has one of its own. Read from
        the version's `DOC_ROWS` file when it has one (a version of passages sealed with it: `write_doc_rows`),
        else found in SQLite (`rows_in_sqlite`); kept: a store is immutable."""
        if self._doc_rows is None:
            saved = read_doc_rows(self.path.parent / DOC_ROWS, self.count())
            fids, docs = saved if saved is not None else self.rows_in_sqlite()
            # ids nearly contiguous (a build's passages: from 2^62 up): a table indexed by id - first, one read an id
            span = int(fids[-1] - fids[0]) + 1 if len(fids) else 0
            if 0 < span <= 2 * len(fids) + 1024:
                table = np.full(span, -1, dtype=np.int64)
                table[fids - fids[0]] = docs
                self._doc_table = (int(fids[0]), table)
            self._doc_rows = (fids, docs)
        return self._doc_rows

    def rows_in_sqlite(self) -> tuple[np.ndarray, np.ndarray]:
        """`document_rows` found in SQLite: the key is a passage id up to its number (`\x1fP[document id,`), any
        other row's own id; ordinals are the keys' ranks."""
        sql = ("SELECT id, dense_rank() OVER (ORDER BY CASE WHEN typeof(ext_id) = 'text' AND substr(ext_id, 1, 2)"
               " = char(31) || 'P' THEN rtrim(ext_id, '0123456789]') ELSE ext_id END) - 1 FROM doc_ext")
        with self._lock:
            rows = np.fromiter(self._con.execute(sql), dtype=[("id", np.int64), ("doc", np.int64)])
        rows.sort(order="id")
        return np.ascontiguousarray(rows["id"]), np.ascontiguousarray(rows["doc"])

    def doc_rows(self, ids: np.ndarray) -> np.ndarray:
        """The document ordinal (`document_rows`) of each FAISS id in `ids`, -1 for padding and unknown ids: what
        collapses a ranked list of passages to its documents in one numpy pass."""
        fids, docs = self.document_rows()
        ids = np.asarray(ids, dtype=np.int64)
        if self._doc_table is not None:
            first, table = self._doc_table
            at = ids - first  # where this wraps (an id far below `first`), `ids >= first` fails
            inside = (ids >= first) & (at < len(table))
            return np.where(inside, table[np.where(inside, at, 0)], -1)
        if not len(fids):
            return np.full(ids.shape, -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(fids, ids), len(fids) - 1)
        return np.where(fids[pos] == ids, docs[pos], -1)

    def _fetch_documents(self, wanted: list[int]) -> dict[int, StoredDoc]:
        out: dict[int, StoredDoc] = {}
        for part in _chunks(wanted):
            marks = ",".join("?" * len(part))
            sql = (f"SELECT d.id, e.ext_id, d.text, e.metadata FROM docs d LEFT JOIN doc_ext e ON e.id = d.id "
                   f"WHERE d.id IN ({marks})")
            with self._lock:
                rows = self._con.execute(sql, list(part)).fetchall()
            for fid, ext, text, meta in rows:
                out[fid] = StoredDoc(fid, fid if ext is None else ext, text, json.loads(meta or "{}"))
        return out

    def max_id(self) -> int:
        """The largest FAISS id of a document (-1 when there is none)."""
        with self._lock:
            row = self._con.execute("SELECT MAX(id) FROM docs").fetchone()
        return -1 if row[0] is None else int(row[0])

    def ids_of(self, ext_ids: Iterable[int | str]) -> dict[int | str, int]:
        """FAISS ids of the documents with these external ids, typed as given (17 finds the integer id 17 only,
        "17" the string id only); unknown ids are left out."""
        keys = list(dict.fromkeys(ext_ids))
        out: dict[int | str, int] = {}
        for part in _chunks(keys):
            marks = ",".join("?" * len(part))
            with self._lock:
                rows = self._con.execute(f"SELECT ext_id, id FROM doc_ext WHERE ext_id IN ({marks})",
                                         list(part)).fetchall()
            out.update(rows)  # ext_id has no column affinity: 17 never matches '17', nor the reverse
        return out

    def metadata_schema(self) -> dict[str, str]:
        """Field → type of the metadata ({} for a store without metadata)."""
        with self._lock:
            row = self._con.execute("SELECT value FROM meta WHERE key = ?", (META_SCHEMA_KEY,)).fetchone()
        return json.loads(row[0]) if row else {}

    def filter_ids(self, flt: object, schema: dict[str, str] | None = None) -> np.ndarray:
        """Sorted FAISS ids (int64) of the documents matching filter `flt` (see `indexer.runtime.filters`); raises
        `FilterError` for an unknown field, operator or a mistyped value, or a filter beyond its `FilterLimits`.
        `schema`: check `flt` against it instead of this store's (a wider one: the write overlay's fields and types
        too; what the store lacks matches nothing here)."""
        from indexer.runtime.filters import parse_filter, plan, run_plan

        node = parse_filter(flt, self.metadata_schema() if schema is None else schema)
        return run_plan(plan(node), self._select_ids)

    def _select_ids(self, sql: str, params: list[Any]) -> np.ndarray:
        # the ids as one string from SQLite, not a Python tuple per row: 100k ids (1 % of 10M) in a third of
        # the time (the index scan itself is a fifth of fetchall's), the largest part of a new filter's cost
        with self._lock:
            joined = self._con.execute(f"SELECT group_concat(id) FROM ({sql})", params).fetchone()[0]
        return np.fromstring(joined, dtype=np.int64, sep=",") if joined else np.zeros(0, dtype=np.int64)

    def resolve_ext_ids(self, keys: Iterable[str]) -> dict[str, int]:
        """FAISS ids of documents named by external ids written as strings (qrels files have no types): "17" finds
        the string id "17", else the integer id 17. Unknown ids are left out."""
        keys = list(dict.fromkeys(keys))
        out: dict[str, int] = {}
        as_int = {k: int(k) for k in keys if _canonical_int(k)}
        for part in _chunks(keys, 400):
            ints = [as_int[k] for k in part if k in as_int]
            marks, imarks = ",".join("?" * len(part)), ",".join("?" * len(ints))
            sql = f"SELECT ext_id, id FROM doc_ext WHERE ext_id IN ({marks})"
            if ints:
                sql += f" OR ext_id IN ({imarks})"
            params = [*part, *ints]
            with self._lock:
                rows = self._con.execute(sql, params).fetchall()
            found = {(type(e), e): fid for e, fid in rows}
            for k in part:
                fid = found.get((str, k))
                if fid is None and k in as_int:
                    fid = found.get((int, as_int[k]))
                if fid is not None:
                    out[k] = fid
        return out

    def graded_eval_set(self) -> GradedEvalSet | None:
        """The stored evaluation queries with graded judgments (a corpus build with queries and qrels), else
        None."""
        if not self._has_table("qrels"):
            return None
        with self._lock:
            queries = self._con.execute("SELECT q.id, q.text, e.ext_id, e.self_doc FROM queries q "
                                        "JOIN query_ext e ON e.id = q.id ORDER BY q.id").fetchall()
            judged = self._con.execute("SELECT query_id, doc_id, grade FROM qrels").fetchall()
        if not queries:
            return None
        grades: dict[int, dict[int, int]] = {}
        for q, d, g in judged:
            grades.setdefault(q, {})[d] = g
        return GradedEvalSet([str(e) for _, _, e, _ in queries], [t for _, t, _, _ in queries],
                             [grades.get(q, {}) for q, _, _, _ in queries],
                             [-1 if s is None else s for _, _, _, s in queries])


META_SCHEMA_KEY = "metadata_schema"


def write_doc_rows(folder: Path) -> Path:
    """Write `DOC_ROWS` beside the store of the version folder `folder` (being staged: the seal's checksums cover
    it like the version's other files): its `document_rows` found in SQLite, so that opening the version for
    serving reads them instead."""
    store = Store(folder / STORE, hot_documents=0)
    try:
        fids, docs = store.rows_in_sqlite()
    finally:
        store.close()
    path = folder / DOC_ROWS
    with path.open("wb") as f:
        np.save(f, np.stack([fids, docs]))
    return path


def read_doc_rows(path: Path, count: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(FAISS ids, ordinals) from a `DOC_ROWS` file; None when there is none (a version sealed without one) or it
    does not fit the store (not two int64 rows of `count`, ids not ascending): then the store finds them itself."""
    if not path.is_file():
        return None
    try:
        both = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        log.warning("%s is unreadable (%s): the rows' documents are found in the store instead", path, exc)
        return None
    if both.dtype != np.int64 or both.shape != (2, count) or (count > 1 and not (np.diff(both[0]) > 0).all()):
        log.warning("%s does not fit its store (%s %s, %d rows): the rows' documents are found in the store instead",
                    path, both.dtype, both.shape, count)
        return None
    return np.ascontiguousarray(both[0]), np.ascontiguousarray(both[1])
@dataclass(frozen=True)
class StoredDoc:
    id: int  # the FAISS id
    ext_id: str | int  # as the corpus gave it
    text: str
    metadata: dict[str, Any]

    @cached_property
    def as_passage(self) -> tuple[int | str, dict[str, Any], PassageRef] | None:
        """This row as its document when it is a passage row (`passage_rows.row_view`), else None: read once and
        kept with the row in the store's hot documents (a store is immutable)."""
        return row_view(self.ext_id, self.text, self.metadata)


@dataclass
class GradedEvalSet:
    """Evaluation queries with graded judgments, in FAISS ids."""

    query_ext_ids: list[str]
    query_texts: list[str]
    qrels: list[dict[int, int]]  # per query: FAISS id (≤ -2: not in the corpus) → grade
    self_docs: list[int]  # per query: the FAISS id of the document with the query's external id, else -1


def _chunks(seq: Sequence[Any], size: int = 900) -> Iterator[Sequence[Any]]:
    for start in range(0, len(seq), size):
        yield seq[start : start + size]


def _canonical_int(s: str) -> bool:
    """"17" and "-3", not "007", "+1" or "1.0": the strings that an integer id prints as."""
    return re.fullmatch(r"-?(0|[1-9][0-9]*)", s) is not None and -(1 << 63) <= int(s) < (1 << 63)
