"""Writing a version's store (the one schema of `store.Store`): a build's store while its corpus streams in
(`CorpusStoreWriter`; a Quora build's with `write_store`), and compaction's written documents folded into the
version's copy (`apply_writes`). Each derives the metadata index and schema in SQLite, then syncs the file; the
caller writes inside a not-yet-published version folder.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path

from indexer.runtime.metadata import merge_types
from indexer.runtime.store import META_SCHEMA_KEY, GradedEvalSet

_SCHEMA = """
CREATE TABLE docs (id INTEGER PRIMARY KEY, text TEXT NOT NULL);
CREATE TABLE queries (id INTEGER PRIMARY KEY, text TEXT NOT NULL);
CREATE TABLE gold (query_id INTEGER NOT NULL, doc_id INTEGER NOT NULL, PRIMARY KEY (query_id, doc_id));
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

# The tables of every store since the one schema (and of `indexer build --data` stores before it), added to
# `_SCHEMA`'s, which keep their meaning (docs.id is the FAISS id; queries/gold hold the evaluated
# queries and their relevant documents, so `Store.eval_set` works unchanged):
#   doc_ext   FAISS id → external id as given (no column type: SQLite keeps 17 and "17" apart) and metadata JSON
#   doc_meta  one (key, value, id) row per scalar metadata value, indexed on (key, value, id): what filters scan
#   query_ext query id → external query id, and the FAISS id of the document with the same external id, if any
#   qrels     graded judgments (doc_id ≤ -2: a judged document that is not in the corpus; it counts as a relevant
#             document nobody can retrieve, like BEIR's pytrec_eval)
CORPUS_SCHEMA = """
CREATE TABLE doc_ext (id INTEGER PRIMARY KEY, ext_id NOT NULL, metadata TEXT NOT NULL);
CREATE TABLE doc_meta (key TEXT NOT NULL, value NOT NULL, id INTEGER NOT NULL);
CREATE TABLE query_ext (id INTEGER PRIMARY KEY, ext_id NOT NULL, self_doc INTEGER);
CREATE TABLE qrels (query_id INTEGER NOT NULL, doc_id INTEGER NOT NULL, grade INTEGER NOT NULL,
                    PRIMARY KEY (query_id, doc_id));
"""
# SQLite's json_each type names → the schema's
_JSON_TYPES = {"integer": "int", "real": "float", "text": "str", "true": "bool", "false": "bool", "array": "json",
               "object": "json", "null": "null"}


def write_store(
    path: Path,
    doc_ids: Sequence[int],
    doc_texts: Sequence[str],
    query_ids: Sequence[int],
    query_texts: Sequence[str],
    gold: Sequence[Iterable[int]],
    meta: dict[str, str] | None = None,
) -> None:
    """Create the store of a build whose documents are integer-keyed (a Quora build: each qid is its own FAISS id
    and external id, and there is no metadata), with its evaluation queries and their relevant documents; the
    caller writes it inside a not-yet-published build folder."""
    writer = CorpusStoreWriter(path)
    try:
        writer.put([(int(i), int(i), t, "{}") for i, t in zip(doc_ids, doc_texts, strict=True)])
        writer.put_queries(query_ids, query_texts, gold)
        writer.finish(meta)
    except BaseException:
        writer.abort()
        raise


WRITER_CACHE_KIB = 256 * 1024  # a build's store writer's SQLite page cache (the build's memory, not the API's)


class CorpusStoreWriter:
    """Writes a corpus store while the corpus streams in (the caller writes it inside a not-yet-published build
    folder). `put` upserts by FAISS id, so a later row with the same id replaces the earlier one; `finish`
    derives the metadata index and schema in SQLite, then syncs the file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._con = sqlite3.connect(path)
        # A fresh file in a staging folder that a failed build deletes: no journal needed; synced in finish().
        self._con.execute("PRAGMA journal_mode = OFF")
        self._con.execute("PRAGMA synchronous = OFF")
        # the indexes `finish` builds sort every row: a 2 MiB page cache (the default) makes that sort spill
        self._con.execute(f"PRAGMA cache_size = -{WRITER_CACHE_KIB}")
        self._con.executescript(_SCHEMA + CORPUS_SCHEMA)

    def put(self, rows: Sequence[tuple[int, str | int, str, str]]) -> None:
        """(FAISS id, external id, text, metadata JSON) rows, upserted in order."""
        self._con.executemany("INSERT OR REPLACE INTO docs VALUES (?, ?)", ((r[0], r[2]) for r in rows))
        self._con.executemany("INSERT OR REPLACE INTO doc_ext VALUES (?, ?, ?)", ((r[0], r[1], r[3]) for r in rows))

    def delete(self, ids: Sequence[int]) -> None:
        """Remove rows by FAISS id (a build's passages that a repeated id's last occurrence no longer has)."""
        self._con.executemany("DELETE FROM docs WHERE id = ?", ((i,) for i in ids))
        self._con.executemany("DELETE FROM doc_ext WHERE id = ?", ((i,) for i in ids))

    def put_queries(self, query_ids: Sequence[int], query_texts: Sequence[str], gold: Sequence[Iterable[int]]
                    ) -> None:
        """Evaluation queries with their relevant documents only (the Quora protocols: no graded judgments)."""
        self._con.executemany("INSERT INTO queries VALUES (?, ?)",
                              zip(map(int, query_ids), query_texts, strict=True))
        self._con.executemany("INSERT INTO gold VALUES (?, ?)",
                              ((int(q), int(d)) for q, ds in zip(query_ids, gold, strict=True) for d in ds))

    def put_eval_set(self, ev: GradedEvalSet) -> None:
        con = self._con
        con.executemany("INSERT INTO queries VALUES (?, ?)", enumerate(ev.query_texts))
        con.executemany("INSERT INTO query_ext VALUES (?, ?, ?)",
                        ((i, q, s if s >= 0 else None) for i, (q, s) in enumerate(zip(ev.query_ext_ids, ev.self_docs,
                                                                                        strict=True))))
        con.executemany("INSERT INTO qrels VALUES (?, ?, ?)",
                        ((i, d, g) for i, judged in enumerate(ev.qrels) for d, g in judged.items()))
        con.executemany("INSERT INTO gold VALUES (?, ?)",
                        ((i, d) for i, judged in enumerate(ev.qrels) for d, g in judged.items() if g > 0))

    def finish(self, meta: dict[str, str] | None = None) -> dict[str, str]:
        """Index the metadata, record `meta` and the metadata schema (field → type), sync and close; returns
        the schema."""
        con = self._con
        con.execute("CREATE UNIQUE INDEX doc_ext_by_ext ON doc_ext (ext_id)")
        # one row per scalar value; json_each reads JSON true/false as 1/0
        con.execute("INSERT INTO doc_meta SELECT j.key, j.value, d.id FROM doc_ext d, json_each(d.metadata) j "
                    "WHERE j.type IN ('integer', 'real', 'text', 'true', 'false')")
        con.execute("CREATE INDEX doc_meta_kv ON doc_meta (key, value, id)")
        schema = _metadata_schema(con)
        con.executemany("INSERT INTO meta VALUES (?, ?)",
                        ((meta or {}) | {META_SCHEMA_KEY: json.dumps(schema)}).items())
        con.execute("ANALYZE")
        con.commit()
        con.close()
        with open(self.path, "rb+") as fh:
            os.fsync(fh.fileno())
        return schema

    def abort(self) -> None:
        self._con.close()


def apply_writes(path: Path, upserts: Sequence[tuple[int, int | str, str, str]], deletes: Sequence[int]
                 ) -> dict[str, str]:
    """Fold written documents into a store file (a copy in a not-yet-published version folder): `upserts` are
    (FAISS id, external id, text, metadata JSON) rows that replace any document with that FAISS id, `deletes`
    FAISS ids whose documents go. The metadata index and schema are brought up to date; a store written before the
    one schema gets its tables first (its external ids are its FAISS ids). Returns the metadata schema; the file is
    synced."""
    con = sqlite3.connect(path)
    try:
        if con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'doc_ext'").fetchone() is None:
            con.executescript(CORPUS_SCHEMA)
            con.execute("INSERT INTO doc_ext SELECT id, id, '{}' FROM docs")
            con.execute("CREATE UNIQUE INDEX doc_ext_by_ext ON doc_ext (ext_id)")
            con.execute("CREATE INDEX doc_meta_kv ON doc_meta (key, value, id)")
        gone = [(fid,) for fid in {*deletes, *(u[0] for u in upserts)}]
        con.executemany("DELETE FROM docs WHERE id = ?", gone)
        con.executemany("INSERT INTO docs VALUES (?, ?)", ((u[0], u[2]) for u in upserts))
        con.executemany("DELETE FROM doc_ext WHERE id = ?", gone)
        # doc_meta is indexed on (key, value, id), not on id: one pass over it against the ids in a keyed temporary
        # table, not one scan of it per id (quadratic: a fold of as many writes as the store holds did little else)
        con.execute("CREATE TEMP TABLE gone (id INTEGER PRIMARY KEY)")
        con.executemany("INSERT INTO temp.gone VALUES (?)", gone)
        con.execute("DELETE FROM doc_meta WHERE id IN (SELECT id FROM temp.gone)")
        con.execute("DROP TABLE temp.gone")
        con.executemany("INSERT INTO doc_ext VALUES (?, ?, ?)", ((u[0], u[1], u[3]) for u in upserts))
        con.executemany("INSERT INTO doc_meta SELECT j.key, j.value, d.id FROM doc_ext d, json_each(d.metadata) j "
                        "WHERE d.id = ? AND j.type IN ('integer', 'real', 'text', 'true', 'false')",
                        ((u[0],) for u in upserts))
        schema = _metadata_schema(con)
        con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (META_SCHEMA_KEY, json.dumps(schema)))
        con.commit()
    finally:
        con.close()
    with open(path, "rb+") as fh:
        os.fsync(fh.fileno())
    return schema


def _metadata_schema(con: sqlite3.Connection) -> dict[str, str]:
    """field → type of the documents' metadata, as SQLite's json_each reads it."""
    seen: dict[str, set[str]] = {}
    for key, jtype in con.execute("SELECT DISTINCT j.key, j.type FROM doc_ext d, json_each(d.metadata) j"):
        seen.setdefault(key, set()).add(_JSON_TYPES[jtype])
    return {k: merge_types(v) for k, v in sorted(seen.items())}
