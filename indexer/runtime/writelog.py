"""The write log of an index root: every acknowledged `PUT /documents` and `POST /documents/delete`, durable.

    ROOT/writes/log.sqlite     SQLite in WAL mode with synchronous=FULL: a commit is fsync'd before it returns

One row per document operation, in the order they were acknowledged:

    seq        INTEGER PRIMARY KEY AUTOINCREMENT: increases forever, never reused (not even after a truncation)
    op         'upsert' | 'delete'
    ext_id     the document's id as the client gave it (no column type: SQLite keeps 17 and "17" apart)
    text       the upserted text (NULL for a delete)
    metadata   the upserted metadata, JSON (NULL for a delete)
    vector     the upserted text's float32 vector (the served encoder's), so a replay does not re-encode
    model      sha256 of the ONNX model that produced `vector`: a version built with another encoder re-encodes

The log is the source of truth *on top of* the versions: a version records in its manifest (`writes`) the log it
folded (`log_id`) and the last seq it holds (`folded_seq`). Whoever opens a version — the API on startup and on
every swap — replays the entries after its `folded_seq` (all of them when the version folded another log, or
none). A version built from the source data folds nothing (`folded_seq` 0), so every acknowledged write is
replayed onto it: a nightly build never undoes a write, and a delete stays deleted even when the source data
still holds the document. `indexer compact` folds the log into a new version (see `indexer.compact`).

The log is never truncated by Strata: a rollback to an older version, or a build from the source data, needs
every entry after that version's `folded_seq`. What upserts cost (documents/s, bytes on disk per document) is
measured by `bench/ingest.py` (docs/benchmarks.md).

Torch-free and service-free: the API appends (`WriteLog.append`) and replays (`entries`), the pipeline's
`indexer compact` reads (`entries`); several processes may read while one appends (WAL). An existing log that
cannot be opened for writing (an API on a read-only mount) is opened read-only: replayed, and appended to only
once the mount is writable again (each append tries to reopen it for writing).

Faults of the disk (`indexer.runtime.storage`): an append that the disk refuses — full (SQLITE_FULL), an I/O error
or a failed fsync of the WAL (SQLITE_IOERR), a read-only mount — rolls back, raises `StorageFull` /
`StorageUnavailable` naming the log, and is not acknowledged. The connection that saw the fault is not trusted
again (as PostgreSQL does after a failed fsync): the next append opens a fresh one, which reads the log's state
from the file, so it succeeds as soon as the fault is gone, without a restart. An entry whose commit reported a
failed fsync may still be in the WAL file and be replayed after a restart: a write answered with an error may or
may not have been applied (a client retries it: upserts and deletes are idempotent), but one that was acknowledged
is always there.

FAISS ids. The log holds external ids only. Which FAISS id a written document gets depends on the version it is
applied to (`indexer.runtime.ids`: an integer id in [0, 2^62) is its own FAISS id, as in builds; any other id keeps
the FAISS id it has in that version's store, or gets a fresh one above every id the version holds).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from indexer.runtime.ids import ExtId
from indexer.runtime.metadata import metadata_json
from indexer.runtime.storage import StorageUnavailable, as_storage_error

WRITES_DIR = "writes"
LOG_FILE = "log.sqlite"
UPSERT, DELETE = "upsert", "delete"
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

Op = Literal["upsert", "delete"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    op TEXT NOT NULL CHECK (op IN ('upsert', 'delete')),
    ext_id NOT NULL,
    text TEXT,
    metadata TEXT,
    vector BLOB,
    model TEXT,
    written_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


_WHOLE = "seq, op, ext_id, text, metadata, vector, model"


def _entry(row: tuple[Any, ...]) -> LogEntry:
    seq, op, ext, text, meta, vec, model = row
    return LogEntry(seq, op, ext, text, json.loads(meta) if meta else {},
                    np.frombuffer(vec, dtype=np.float32) if vec is not None else None, model)


class WriteLogError(RuntimeError):
    """The write log cannot be opened or written (a read-only root, a foreign file); the message says which."""


def log_path(root: Path) -> Path:
    return Path(root).expanduser() / WRITES_DIR / LOG_FILE


@dataclass(frozen=True)
class LogEntry:
    seq: int
    op: Op
    ext_id: ExtId
    text: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    vector: np.ndarray | None = None  # float32 (dim,)
    model: str | None = None  # sha256 of the encoder that produced `vector`


@dataclass(frozen=True)
class Upsert:
    """A document to write: what `WriteLog.append` takes (the seq is the log's to give)."""

    ext_id: ExtId
    text: str
    metadata: dict[str, Any]
    vector: np.ndarray
    model: str


@dataclass(frozen=True)
class Delete:
    ext_id: ExtId


def check_ext_id(ext_id: object) -> ExtId:
    """A valid external id (an int64, or a non-empty string), or ValueError naming what is wrong."""
    if isinstance(ext_id, bool) or not isinstance(ext_id, int | str):
        raise ValueError(f"an id is a string or an integer, not {type(ext_id).__name__}")
    if isinstance(ext_id, int) and not INT64_MIN <= ext_id <= INT64_MAX:
        raise ValueError(f"integer id {ext_id} does not fit in 64 bits")
    if isinstance(ext_id, str) and not ext_id:
        raise ValueError("a string id must not be empty")
    return ext_id




class WriteLog:
    """One log file. Appends are serialised by a lock (one writer per process; the API has one log); reads open
    a connection of their own, so they never wait for an append's fsync."""

    def __init__(self, path: Path, *, create: bool = True) -> None:
        self.path = Path(path)
        self.read_only = False
        self._reader_uri = f"file:{self.path}?mode=ro"
        if not create and not self.path.is_file():
            raise WriteLogError(f"{self.path} does not exist")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._con = self._connect()
            with self._con:
                self._con.executescript(_SCHEMA)
                self._con.execute("INSERT OR IGNORE INTO meta VALUES ('log_id', ?)", (uuid.uuid4().hex,))
            row = self._con.execute("SELECT value FROM meta WHERE key = 'log_id'").fetchone()
        except (OSError, sqlite3.Error) as exc:
            if create or not self.path.is_file():
                fault = as_storage_error(exc, self.path, "creating the write log")
                if fault is not None:
                    raise fault from exc
                raise WriteLogError(f"cannot open the write log {self.path}: {exc}") from exc
            # An existing log on a read-only mount (an API that only serves): still replayed; appended to once the
            # mount is writable again (`_writer`).
            row = self._open_read_only(exc)
        self.log_id: str = row[0]
        self._lock = threading.Lock()
        self._suspect = False  # the writer connection saw a fault of the disk: the next append opens a fresh one

    def _open_read_only(self, cause: BaseException) -> tuple[str]:
        for uri in (f"file:{self.path}?mode=ro", f"file:{self.path}?immutable=1"):  # immutable: no -shm to be had
            try:
                con = sqlite3.connect(uri, uri=True, check_same_thread=False, timeout=30)
                row = con.execute("SELECT value FROM meta WHERE key = 'log_id'").fetchone()
            except sqlite3.Error:
                continue
            self._con, self._reader_uri, self.read_only = con, uri, True
            return row
        raise WriteLogError(f"cannot open the write log {self.path}: {cause}") from cause

    def _connect(self) -> sqlite3.Connection:
        con = sqlite3.connect(self.path, check_same_thread=False, timeout=30, isolation_level=None)
        # WAL: readers (a replay, `indexer compact` in another process) never block the writer, nor it them.
        # synchronous=FULL: every commit fsyncs the WAL, so an acknowledged write survives a crash of the machine,
        # not only of the process.
        con.execute("PRAGMA journal_mode = WAL")
        con.execute("PRAGMA synchronous = FULL")
        return con

    def _writer(self) -> sqlite3.Connection:
        """The connection to append with (under the lock): a fresh one after a fault, or once a read-only log's
        mount is writable again."""
        if not (self.read_only or self._suspect):
            return self._con
        con: sqlite3.Connection | None = None
        try:
            con = self._connect()
            con.execute("SELECT value FROM meta WHERE key = 'log_id'").fetchone()
            if self.read_only:  # appending needs a writable WAL: try it before calling the log writable
                con.execute("BEGIN IMMEDIATE")
                con.execute("ROLLBACK")
        except (OSError, sqlite3.Error) as exc:
            if con is not None:
                con.close()
            fault = as_storage_error(exc, self.path, "opening the write log")
            if self.read_only:
                raise StorageUnavailable(f"the write log {self.path} is read-only here (a read-only mount of the "
                                         f"index root): {exc}", self.path) from exc
            raise fault or WriteLogError(f"cannot reopen the write log {self.path}: {exc}") from exc
        old, self._con = self._con, con
        old.close()
        self._reader_uri, self.read_only, self._suspect = f"file:{self.path}?mode=ro", False, False
        return con

    def append(self, ops: Sequence[Upsert | Delete]) -> int:
        """Write `ops` in one transaction, durable when this returns; returns the seq of the last one. Raises
        StorageFull / StorageUnavailable (nothing appended) when the disk refuses it, WriteLogError otherwise."""
        now = time.time()
        rows: list[tuple[object, ...]] = []
        for op in ops:
            if isinstance(op, Upsert):
                vec = np.ascontiguousarray(op.vector, dtype=np.float32)
                rows.append((UPSERT, op.ext_id, op.text, metadata_json(op.metadata), vec.tobytes(), op.model, now))
            else:
                rows.append((DELETE, op.ext_id, None, None, None, None, now))
        with self._lock:
            con = self._writer()
            try:
                con.execute("BEGIN IMMEDIATE")
                try:
                    con.executemany("INSERT INTO entries (op, ext_id, text, metadata, vector, model, written_at) "
                                    "VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
                    last = con.execute("SELECT MAX(seq) FROM entries").fetchone()[0]
                    con.execute("COMMIT")  # the WAL is fsync'd here (synchronous=FULL)
                except BaseException:
                    try:
                        con.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass  # SQLite rolled back already (a full disk, an I/O error): what failed is reported
                    raise
            except sqlite3.Error as exc:
                fault = as_storage_error(exc, self.path, "appending to the write log")
                if fault is None:
                    raise WriteLogError(f"cannot write to the write log {self.path}: {exc}") from exc
                self._suspect = True
                raise fault from exc
        return int(last)

    def last_seq(self) -> int:
        with self._lock:
            row = self._con.execute("SELECT MAX(seq) FROM entries").fetchone()
        return int(row[0] or 0)

    def entries(self, after: int = 0, upto: int | None = None, batch: int = 2048) -> Iterator[LogEntry]:
        """Entries with after < seq <= upto (default: all there are now), in seq order, read in batches."""
        con = sqlite3.connect(self._reader_uri, uri=True, check_same_thread=False, timeout=30)
        try:
            if upto is None:
                upto = int(con.execute("SELECT COALESCE(MAX(seq), 0) FROM entries").fetchone()[0])
            seq = after
            while seq < upto:
                rows = con.execute(f"SELECT {_WHOLE} FROM entries WHERE seq > ? AND seq <= ? ORDER BY seq LIMIT ?",
                                   (seq, upto, batch)).fetchall()
                if not rows:
                    return
                yield from map(_entry, rows)
                seq = rows[-1][0]
        finally:
            con.close()

    def ids(self, after: int, upto: int) -> list[tuple[int, ExtId]]:
        """(seq, id) of the entries with after < seq <= upto, in seq order, without their texts and vectors (the id
        comes before them in a row): a shard replica routes every entry by its id, then reads whole its own
        (`entries_at`)."""
        con = sqlite3.connect(self._reader_uri, uri=True, check_same_thread=False, timeout=30)
        try:
            return con.execute("SELECT seq, ext_id FROM entries WHERE seq > ? AND seq <= ? ORDER BY seq",
                               (after, upto)).fetchall()
        finally:
            con.close()

    def entries_at(self, seqs: Sequence[int]) -> list[LogEntry]:
        """The whole entries of these seqs (ascending), in seq order."""
        con = sqlite3.connect(self._reader_uri, uri=True, check_same_thread=False, timeout=30)
        try:
            return [_entry(row) for i in range(0, len(seqs), 900) for row in con.execute(
                f"SELECT {_WHOLE} FROM entries WHERE seq IN ({','.join('?' * len(seqs[i:i + 900]))}) ORDER BY seq",
                list(seqs[i:i + 900]))]
        finally:
            con.close()

    def counts(self) -> dict[str, int]:
        """Entries by op (for `indexer info` and the tests)."""
        with self._lock:
            rows = self._con.execute("SELECT op, COUNT(*) FROM entries GROUP BY op").fetchall()
        return {UPSERT: 0, DELETE: 0} | dict(rows)

    def close(self) -> None:
        with self._lock:
            self._con.close()


def open_log(root: Path, *, create: bool) -> WriteLog | None:
    """The root's write log; None when it has none and `create` is off (nothing was ever written)."""
    path = log_path(root)
    if not create and not path.is_file():
        return None
    return WriteLog(path, create=create)


def copy_log(path: Path, out: Path, *, after: int = 0, folded_log: str | None = None) -> tuple[str, int]:
    """A consistent copy of the log at `path` into the new file `out`, for a snapshot: the entries up to the last one
    committed when the copy began (one read transaction, beside a running writer), after `after` when the log is
    `folded_log` (a version holds those already), with the log's id and its seq counter (the copy's next append
    continues the seqs); (log_id, the last seq copied)."""
    con = sqlite3.connect(Path(out).absolute().as_uri(), uri=True, isolation_level=None)
    try:
        con.executescript(_SCHEMA)
        con.execute("ATTACH DATABASE ? AS src", (Path(path).absolute().as_uri() + "?mode=ro",))
        con.execute("BEGIN")
        log_id = con.execute("SELECT value FROM src.meta WHERE key = 'log_id'").fetchone()[0]
        last = int(con.execute("SELECT COALESCE(MAX(seq), 0) FROM src.entries").fetchone()[0])
        first = after if log_id == folded_log else 0
        con.execute("INSERT INTO main.entries SELECT * FROM src.entries WHERE seq > ? AND seq <= ?", (first, last))
        con.execute("INSERT INTO main.meta SELECT * FROM src.meta")
        con.execute("DELETE FROM main.sqlite_sequence WHERE name = 'entries'")
        con.execute("INSERT INTO main.sqlite_sequence (name, seq) VALUES ('entries', ?)", (last,))
        con.execute("COMMIT")
        con.execute("DETACH DATABASE src")
    finally:
        con.close()
    return log_id, last


def net_effect(entries: Sequence[LogEntry]) -> dict[ExtId, LogEntry]:
    """The last entry per external id (a later upsert or delete of the same id supersedes the earlier ones), in
    seq order of those last entries. Keys keep their type: 17 and "17" are two documents."""
    last: dict[ExtId, LogEntry] = {}  # 17 != "17" and they hash apart: one key each
    for e in entries:
        last.pop(e.ext_id, None)  # re-insert: the dict's order becomes the order of the last entries
        last[e.ext_id] = e
    return last
