"""Writes: documents upserted and deleted through the API, durable before they are acknowledged.

The write path of a root, beside its log: the service's engine encodes a write's texts (on its write lane) and
calls `Writes.commit`; everything after the encoding is here, torch-free and HTTP-free, with the refusals as this
module's own errors (`WriteRefused`, `WritesUnsupported`, `WritesUnavailable`, `NotServing`), which the service
maps to HTTP (`service.errors`). The served pairing of an encoder and an index is anything with the `Served`
shape (`service.engine.searcher.Searcher`).

One write, in order (`Collection.upsert` / `Collection.delete` call `Writes.commit` once the texts are encoded):
1. the entries are appended to the root's write log in one SQLite transaction, fsync'd (`indexer.runtime.writelog`);
2. the log's new entries are applied to the served version's overlay (`live_index.LiveIndex`), so the next search sees
   them — visible before the 200, not eventually;
3. the API answers 200.
A crash between 1 and 3 loses nothing acknowledged: on restart the overlay is rebuilt from the log.

Versions and swaps. Each opened version is wrapped in a `LiveIndex` (on the sharded backend a `LiveShards`, whose
shards each apply their share of the log: `indexer.runtime.shard_writes`) and gets the log's entries after the seq it
folded (`attach`, in the swap's worker thread, before the candidate is checked). The switch itself (`switch`) takes
the write lock, applies the entries logged while the candidate was being prepared, and swaps the lease — so a write
acknowledged during a swap is in the new version's overlay, and none is applied to a version nobody will serve.

Encoders. A log entry carries the vector of the encoder that served its write; a version built with another
encoder re-encodes the entry's text when it is applied (`fold.reencode_stale`); the sharded backend's shards
cannot, so such a version is refused there (`WriteLogError` at `attach`).

Restrictions, refused before anything is encoded or logged:
- a served version without an overlay (none is served so: every backend's version gets one at `attach`) would be
  `WritesUnsupported` (501);
- `WriteRefused` (409) is for a write the served version cannot take. Nothing raises it: every store has one
  schema (`indexer.runtime.store`), which takes string and integer ids and metadata;
- a write log that cannot be created (its folder is a file, a foreign file) is `WritesUnavailable` (503).

Faults of the disk are the runtime's `StorageFull` (507) and `StorageUnavailable` (503 with Retry-After), from
`indexer.runtime.storage`, raised as they are: the write was not logged, so it was not applied nor acknowledged,
and the next write after the fault is gone succeeds (`WriteLog.append` opens a fresh connection after a fault).

One process writes a root's log: a second API process on the same root would apply only its own writes (and
the other's on its next restart or swap).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from indexer.runtime.encoder import OnnxEncoder
from indexer.runtime.fold import reencode_stale
from indexer.runtime.ids import ExtId
from indexer.runtime.live_index import LiveIndex
from indexer.runtime.manifest import Manifest
from indexer.runtime.overlay import Applied
from indexer.runtime.storage import StorageError
from indexer.runtime.version import IndexVersion, VectorIndex
from indexer.runtime.writelog import UPSERT, Delete, LogEntry, Upsert, WriteLog, WriteLogError, log_path

log = logging.getLogger(__name__)

REPLAY_BATCH = 2048


class WriteError(RuntimeError):
    """Base of the write path's refusals; the message is the reason a client or an operator reads."""


class WriteRefused(WriteError):
    """A write the served version cannot take; nothing was logged."""


class WritesUnsupported(WriteError):
    """The served version has no write overlay (every backend's gets one at `attach`); nothing was logged."""


class WritesUnavailable(WriteError):
    """The write log cannot be created or written for a reason other than the disk's (whose faults are
    `indexer.runtime.storage`'s StorageFull / StorageUnavailable); nothing was acknowledged."""


class NotServing(WriteError):
    """No version is served: a write has no overlay to go to (the service answers it like its `NotReady`)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"not ready: {reason}")
        self.reason = reason


class Served(Protocol):
    """What the write path needs of the served pairing of an encoder and an index version (a
    `service.engine.searcher.Searcher`): `attach` wraps a local version's `index` in its overlay."""

    encoder: OnnxEncoder
    index: VectorIndex

    @property
    def version(self) -> str: ...

    @property
    def manifest(self) -> Manifest: ...


@dataclass(frozen=True)
class Document:
    """A document to upsert, as the API received it."""

    id: ExtId
    text: str
    metadata: dict[str, Any]
    vector: list[float] | None = None  # brought by the client (`indexer.runtime.vectors`): not encoded


@dataclass(frozen=True)
class WriteResult:
    seq: int  # the log seq of the write's last entry
    version: str  # the version whose overlay holds it now
    # what the entries did to rows (`commit`); on a version of passages `service.engine.document_writes` makes it
    # count documents and moves the rows' counts to `passages`
    applied: Applied
    size: int  # rows served after it (a version of passages: its passages)
    passages: Applied | None = None


S = TypeVar("S", bound=Served)


def start_seq(searcher: Served, wlog: WriteLog) -> int:
    """The last entry of `wlog` that the version holds already (0: replay them all)."""
    w = searcher.manifest.writes
    return w.folded_seq if w is not None and w.log_id == wlog.log_id else 0


class Writes:
    def __init__(self, index_root: Path) -> None:
        self.path = log_path(index_root)
        self.lock = threading.Lock()  # one write, or one switch of the served version, at a time
        self._log: WriteLog | None = None
        self._log_lock = threading.Lock()

    def _open(self, *, create: bool) -> WriteLog | None:
        with self._log_lock:
            if self._log is None and (create or self.path.is_file()):
                # an existing log that cannot be written (a read-only mount) opens read-only: replayed, and
                # appended to once the mount is writable again
                self._log = WriteLog(self.path, create=create)
            return self._log

    def close(self) -> None:
        with self._log_lock:
            if self._log is not None:
                self._log.close()
                self._log = None

    # -- versions ------------------------------------------------------------------------------------------------
    def attach(self, searcher: Served) -> None:
        """Wrap a freshly opened local version in its overlay and replay the log entries it does not hold (in the
        swap's worker thread: the served version keeps answering meanwhile). Raises WriteLogError."""
        wlog = self._open(create=False)
        # a local version gets the overlay; the sharded backend's version makes its own (`shard_writes.LiveShards`)
        live = (LiveIndex(searcher.index) if isinstance(searcher.index, IndexVersion)
                else searcher.index.live())  # type: ignore[attr-defined]
        searcher.index = live
        if wlog is None:
            return
        live.overlay.applied_seq = start_seq(searcher, wlog)
        replayed = self._catch_up(searcher)
        if replayed:
            log.info("replayed %d write(s) onto %s (log seq %d..%d): %d documents written, %d removed from the "
                     "version", replayed, searcher.version, start_seq(searcher, wlog) + 1, live.overlay.applied_seq,
                     live.overlay.written, live.overlay.removed_from_base)

    def switch(self, new: S, swap: Callable[[S], object], check: Callable[[], object] | None = None) -> None:
        """Make `new` the served searcher with every write acknowledged so far, none lost in between. `check`
        runs once `new` is caught up, before the swap, while no write can land: served and candidate then hold the
        same log entries (the shrink guard compares their sizes there); what it raises leaves the served one."""
        with self.lock:
            if isinstance(new.index, LiveIndex):
                self._catch_up(new)
            if check is not None:
                check()
            swap(new)

    def _catch_up(self, searcher: Served) -> int:
        """Apply the log's entries after the overlay's last one; returns how many."""
        wlog = self._open(create=False)
        live = searcher.index
        if wlog is None or not isinstance(live, LiveIndex):
            return 0
        n = 0
        batch: list[LogEntry] = []
        for entry in wlog.entries(after=live.overlay.applied_seq):
            batch.append(entry)
            if len(batch) >= REPLAY_BATCH:
                self._apply(searcher, batch)
                n, batch = n + len(batch), []
        if batch:
            self._apply(searcher, batch)
        return n + len(batch)

    @staticmethod
    def _apply(searcher: Served, entries: list[LogEntry]) -> Applied:
        """Apply entries to the searcher's overlay, re-encoding those written with another encoder."""
        encoder, live = searcher.encoder, searcher.index
        assert isinstance(live, LiveIndex)
        sha = encoder.meta.onnx_sha256
        if not live.reencodes and (e := next((e for e in entries if e.op == UPSERT and e.model != sha), None)):
            raise WriteLogError(f"write log entry {e.seq} (id {e.ext_id!r}) was encoded by another encoder than "
                                f"version {searcher.version}'s, and the sharded backend cannot encode it anew: serve "
                                f"the version it was written on, or compact the root with the local backend's "
                                f"`indexer compact` first")
        reencode_stale(entries, sha, lambda texts: encoder.encode(texts, batch_size=64))
        return live.overlay.apply(entries)

    # -- the write path ------------------------------------------------------------------------------------------
    @staticmethod
    def check(searcher: Served | None, ext_ids: Sequence[ExtId], with_metadata: bool) -> None:
        """Refuse what this served version cannot take, before anything is encoded or logged (`WritesUnsupported`:
        a version without an overlay)."""
        if searcher is None:
            return  # the caller answers that nothing is served
        if not isinstance(searcher.index, LiveIndex):
            raise WritesUnsupported(f"version {searcher.version} is served without a write overlay")
        # Every version takes every id and metadata: all stores have one schema (`indexer.runtime.store`; a Quora
        # version of before it too, whose store `indexer compact` brings to it). `ext_ids` and `with_metadata` are
        # what a refusal of a version's own would look at.

    def commit(self, current: Callable[[], Served | None],
               ops: Sequence[Upsert | Delete] | Callable[[Served], Sequence[Upsert | Delete]]) -> WriteResult:
        """Log `ops` durably, then apply them to the served version's overlay (runs in the write thread). `ops` may
        be a function of the served searcher, called under the write lock: what it reads of the served state (a
        document's passages now) cannot change before its ops are logged and applied."""
        with self.lock:
            searcher = current()
            if searcher is None:
                raise NotServing("no index loaded")
            if callable(ops):
                ops = ops(searcher)
            self.check(searcher, [op.ext_id for op in ops], any(isinstance(op, Upsert) and op.metadata
                                                                 for op in ops))
            sha = searcher.encoder.meta.onnx_sha256
            if not searcher.index.reencodes and any(isinstance(op, Upsert) and op.model != sha for op in ops):  # type: ignore[attr-defined]
                raise WritesUnavailable(f"the served version changed to {searcher.version} (another encoder) during "
                                        f"the write: send it again")
            try:
                wlog = self._open(create=True)
                assert wlog is not None
                seq = wlog.append(ops)
            except StorageError:
                raise  # the disk's fault (full, I/O error, read-only): nothing logged, nothing applied
            except WriteLogError as exc:
                raise WritesUnavailable(str(exc)) from exc
            live = searcher.index
            assert isinstance(live, LiveIndex)
            # apply from the log, not from `ops`: what is served is exactly what a restart would replay
            applied = self._apply(searcher, list(wlog.entries(after=live.overlay.applied_seq, upto=seq)))
            return WriteResult(seq, searcher.version, applied, live.ntotal)

