"""What the engine refuses, as domain errors. `service.errors` is the one place that turns them into HTTP.

A snapshot's refusals (`SnapshotError`, `SnapshotNotFound`, `SnapshotConflict`) are the runtime's, re-exported too,
and so are those of reading documents back (`DocumentNotFound`, `BadCursor`:
`indexer.runtime.reading`).
The write path's refusals are the runtime's own (`indexer.runtime.writes`, where the write path lives, and the
disk's faults, `indexer.runtime.storage`): they are re-exported here, so that the engine's refusals are all found
in one place."""

from __future__ import annotations

from indexer.runtime.reading import BadCursor, DocumentNotFound, ReadError
from indexer.runtime.snapshot import SnapshotConflict, SnapshotError, SnapshotNotFound
from indexer.runtime.storage import StorageError, StorageFull, StorageUnavailable
from indexer.runtime.writes import NotServing, WriteRefused, WritesUnavailable, WritesUnsupported

__all__ = ["BackendUnsupported", "BadCursor", "BadFilter", "BadSearchParams", "DocumentNotFound", "EngineError",
           "Mismatch", "ModeUnavailable", "NotReady", "NotServing", "Overloaded", "ReadError", "ShardUnavailable",
           "SnapshotConflict", "SnapshotError", "SnapshotNotFound", "SnapshotTooLarge", "StorageError", "StorageFull",
           "StorageUnavailable", "SwapRefused", "TimedOut", "WriteRefused", "WritesHeldBack", "WritesUnavailable",
           "WritesUnsupported"]


class SnapshotTooLarge(SnapshotError):
    """An uploaded snapshot past the server's cap (`max_snapshot_bytes`)."""


class EngineError(RuntimeError):
    """Base of the engine's refusals; the message is the reason a client or an operator reads."""


class NotReady(EngineError):
    """No index version is loaded (yet, or the startup load was refused)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"not ready: {reason}")
        self.reason = reason


class Overloaded(EngineError):
    """The in-flight cap is reached: the request is refused at once instead of queued without bound."""

    def __init__(self, in_flight: int, limit: int, retry_after_s: int, what: str = "requests") -> None:
        super().__init__(f"busy: {in_flight} {what} in flight (limit {limit}); retry after {retry_after_s} s")
        self.retry_after_s = retry_after_s


class WritesHeldBack(Overloaded):
    """Upserts wait for a compaction: the served version's overlay holds the policy's `max_unfolded_docs` written
    documents (its memory bound); the compaction that folds them is running or due at once."""

    def __init__(self, unfolded: int, limit: int, retry_after_s: int) -> None:
        EngineError.__init__(self, f"writes held back: {unfolded} written documents wait for a compaction (the "
                             f"collection's compaction.max_unfolded_docs is {limit}); it runs now, retry after "
                             f"{retry_after_s} s")
        self.retry_after_s = retry_after_s


class ShardUnavailable(EngineError):
    """A shard of the sharded backend that did not answer a search: its replica raised, died or is gone, or gave no
    answer within `shard_timeout_s` (the HTTP layer answers 503 with this reason, naming the shard)."""

    def __init__(self, shard: str, why: str) -> None:
        super().__init__(f"shard unavailable: {shard}: {why}")
        self.shard = shard


class TimedOut(EngineError):
    """Encoding and searching took longer than the request timeout (the work itself finishes in the background
    and returns its lease)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"inference took longer than {seconds} s")


class BadFilter(EngineError):
    """A search filter that does not fit the served version's metadata (unknown field or operator, a value of the
    wrong type); the message says why."""


class BadSearchParams(EngineError):
    """A search parameter the served version's index kind does not take (nprobe of a flat or HNSW index,
    ef_search of an IVF one); the message says which it takes."""

    def __init__(self, message: str, name: str | None = None) -> None:
        super().__init__(message)
        self.name = name


class BadConfig(EngineError):
    """A request over its collection's limits (`collection.json`: max_top_k, filter), or a collection config that
    does not validate or that the served version cannot apply; `loc` is the field's path in the request body."""

    def __init__(self, message: str, loc: list[str | int]) -> None:
        super().__init__(message)
        self.loc = loc


class CollectionConflict(EngineError):
    """A collection that cannot be created or deleted as asked: one of that name exists, or this server serves one
    index root rather than a collections folder (the HTTP layer answers 409 with this reason)."""


class UnknownCollection(EngineError):
    """No collection of that name, or one deleted meanwhile (the HTTP layer answers 404 with this reason)."""


class BackendUnsupported(EngineError):
    """An operation the serving backend does not provide in any configuration (the sharded backend: collections
    created, deleted or restored over HTTP); the message says why and what to use instead (the HTTP layer answers
    501)."""


class BadVector(EngineError):
    """A vector a request brings (`/search`'s `vector`, a document's in `PUT /documents`) that does not fit the
    served encoder's space: another dimension, NaN or infinity, all zeros. `loc`: where in the body it is."""

    def __init__(self, message: str, loc: list[str | int]) -> None:
        super().__init__(message)
        self.loc = loc


class ModeUnavailable(EngineError):
    """A `/search` mode the served version cannot run (lexical or hybrid on a version without a lexical index); the
    message says why and what to do."""


class Mismatch(EngineError):
    """An encoder and an index version cannot be served together (dimension, model hash, or a version the
    backend cannot serve)."""


class SwapRefused(EngineError):
    """A candidate version was not swapped in; the served one (if any) keeps answering.

    `kind` is the metric label: corrupt | mismatch | quality | shrink | probe | missing | writes | error.
    `candidate` and `served` are filled in by the swap that refused it."""

    def __init__(self, kind: str, message: str, *, candidate: str | None = None, served: str | None = None) -> None:
        super().__init__(message)
        self.kind, self.candidate, self.served = kind, candidate, served

    @property
    def reason(self) -> str:
        return str(self)
