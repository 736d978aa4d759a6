"""Writes on the sharded backend: each written document routed to one shard, `ids.shard_of` of its FAISS id (the
`id % N` rule the builds and `indexer shard` split by), and searched by every replica of that shard.

The write path is the local backend's (`indexer.runtime.writes`): the API process logs each write durably in the
root's write log (fsync'd before the 200) and applies it to its overlay, here `LiveShards`, a `LiveIndex` over the
sharded version. So the written documents' texts and metadata, the tombstones, the lexical side (BM25 is read in the
API process), filters' schema, counts and reading documents back are the local backend's, and a restart replays the
log as it does. Only the vector search differs: it goes to the shards, each asked at the overlay's applied seq.

A shard replica holds a `ShardWrites` and catches up to the seq a search carries before it answers: it reads the ids
of the log's entries it has not applied (the log sits on the shared file system beside the shard files, and SQLite's
WAL lets it read while the API appends; the ids alone, not the entries' texts and vectors),
resolves every entry's FAISS id as the API's overlay does (the same store, the same order: the same ids), then reads
whole only the entries of its shard and applies them to a `LiveIndex` of its own: the written vectors, and
tombstones of its base documents deleted or replaced. Every replica of every shard thus answers with every write
acknowledged before the search, whatever the number of replicas and whether one restarted since: nothing is pushed
to them. A search is as exact as the local backend's: the shard skips its tombstones inside its IVF scan and adds
its written rows exactly, and the API merges the shards' top k.

An entry written with another encoder than the version's (a swap to a version with a new encoder while writes were
pending) would need its text encoded anew, and a replica has no encoder: the replica refuses it (`StaleWrite`),
and `LiveShards` refuses such a version before it is served (compact the root on the old version first).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from indexer.runtime.ann import AnnIndex
from indexer.runtime.faiss.filtered import IdFilter, filtered_search
from indexer.runtime.filters import Node
from indexer.runtime.ids import shard_of
from indexer.runtime.live_index import LiveIndex, LiveMatch
from indexer.runtime.manifest import Manifest
from indexer.runtime.store import STORE, Store
from indexer.runtime.version import FilterMatch
from indexer.runtime.writelog import UPSERT, WriteLog, WriteLogError


class StaleWrite(WriteLogError):
    """A logged vector of another encoder than the version's: a shard cannot encode its text anew."""


@dataclass(frozen=True)
class ShardMatch:
    """A filter's base matches as one shard searches them: the version's matching ids (ascending), this shard's
    share prepared, and the lists to probe (the whole version's `filtered_nprobe`)."""

    ids: np.ndarray
    prepared: IdFilter
    probe: int


class _ShardBase:
    """One shard file as the `IndexVersion` a `LiveIndex` wraps: its vectors, the version's store (the written
    documents' FAISS ids are resolved in it) and manifest; no lexical index (BM25 is the API process's)."""

    lexical = None

    def __init__(self, ann: AnnIndex, manifest: Manifest, store: Store) -> None:
        self.ann, self.manifest, self.store = ann, manifest, store
        self.version, self.dim = manifest.version, ann.dim

    def search(self, vectors: np.ndarray, k: int, match: ShardMatch | None = None, *,
               search_params: dict[str, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        if match is None:
            return self.ann.search(vectors, k, search_params=search_params)
        scores, found, _ = filtered_search(self.ann.faiss, vectors, k, match.prepared, match.probe)  # type: ignore[attr-defined]
        return scores, found

    def close(self) -> None:
        self.store.close()


class ShardWrites:
    """A shard replica's share of the root's writes, caught up from the write log to the seq each search carries."""

    def __init__(self, shard_path: Path, ann: AnnIndex, log_file: Path | None) -> None:
        self.path, self.ann, self.log_file = shard_path, ann, log_file
        self.live: LiveIndex | None = None  # created with the first write to apply
        self._lock = threading.Lock()
        self._log: WriteLog | None = None

    def _open(self, seq: int) -> LiveIndex:
        """The shard's overlay, at the seq its version folded: its manifest, store and the log read at the first
        write to apply (a shard file alone, without them, answers searches that carry none)."""
        if self.log_file is None or not self.log_file.is_file():
            raise WriteLogError(f"a search at write seq {seq}, but {self.path} has no write log to read it from "
                                f"({self.log_file}: is the index root on a file system every node shares?)")
        folder = self.path.parent.parent  # <version>/shards/shard-NNNNN.faiss
        self.manifest = Manifest.load(folder)
        files = [s.file for s in self.manifest.index.shards]
        self.shard, self.shards = files.index(self.path.relative_to(folder).as_posix()), len(files)
        self._log = WriteLog(self.log_file, create=False)
        w = self.manifest.writes
        start = w.folded_seq if w is not None and w.log_id == self._log.log_id else 0
        return LiveIndex(_ShardBase(self.ann, self.manifest, Store(folder / STORE)), applied_seq=start)  # type: ignore[arg-type]

    def at(self, seq: int) -> LiveIndex | None:
        """This shard with every write up to `seq` applied (None: no write since the version was made)."""
        live = self.live
        if seq <= 0 or (live is not None and seq <= live.overlay.applied_seq):
            return live
        with self._lock:
            if self.live is None:
                self.live = self._open(seq)
            live, wlog = self.live, self._log
            assert wlog is not None
            if seq > live.overlay.applied_seq:
                self._apply(live, wlog, seq)
        return live

    def _apply(self, live: LiveIndex, wlog: WriteLog, seq: int) -> None:
        """Route every entry up to `seq` by its FAISS id (its id alone read), then read whole and apply this
        shard's."""
        ids = wlog.ids(live.overlay.applied_seq, seq)
        fids = live.overlay.resolve([e for _, e in ids])  # every entry: the ids it assigns stay the API's
        mine = shard_of(np.asarray(fids, dtype=np.int64), self.shards) == self.shard
        entries = wlog.entries_at([s for (s, _), m in zip(ids, mine, strict=True) if m])
        sha = self.manifest.model.onnx_sha256
        stale = next((e for e in entries if e.op == UPSERT and e.model != sha), None)
        if stale is not None:
            raise StaleWrite(f"write log entry {stale.seq} (id {stale.ext_id!r}) holds a vector of another encoder "
                             f"than version {self.manifest.version}'s: a shard cannot encode it anew")
        live.overlay.apply(entries)
        live.overlay.applied_seq = max(live.overlay.applied_seq, seq)

    def search(self, vectors: np.ndarray, k: int, seq: int, match: tuple[FilterMatch, int, Node] | None = None, *,
               search_params: dict[str, int] | None = None) -> tuple[np.ndarray, np.ndarray] | None:
        """The shard's answer with its writes up to `seq`; None when it has none (the replica searches as
        before). `match`: the base's matches (this shard's share prepared), the lists to probe, the filter for
        the written documents."""
        live = self.at(seq)
        if live is None:
            return None
        if match is None:
            return live.search(vectors, k, search_params=search_params)
        base, probe, node = match
        assert base.prepared is not None
        return live.search(vectors, k, LiveMatch(ShardMatch(base.ids, base.prepared, probe), node),  # type: ignore[arg-type]
                           search_params=search_params)

    def close(self) -> None:
        if self.live is not None:
            self.live.close()
        if self._log is not None:
            self._log.close()


class LiveShards(LiveIndex):
    """The API process's overlay on a sharded version (`service.engine.sharded.ShardedIndex`): the local
    backend's, but its vector search is the shards', each at the overlay's applied seq."""

    reencodes = False  # the shards read the logged vectors as they are (`StaleWrite`)

    def __init__(self, base: Any, applied_seq: int = 0) -> None:  # noqa: ANN401 (a ShardedIndex)
        super().__init__(base, applied_seq)

    def search(self, vectors: np.ndarray, k: int, match: LiveMatch | None = None, *,
               search_params: dict[str, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        seq = self.overlay.applied_seq
        if match is None:
            return self.base.search(vectors, k, search_params=search_params, seq=seq)
        return self.base.search(vectors, k, match.base, search_params=search_params, seq=seq, node=match.node)
