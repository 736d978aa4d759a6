"""The net effect of logged writes on a version, in its FAISS ids: what the live overlay serves and what `indexer
compact` writes into the next version (`fold`), by the same rules.

FAISS ids of written documents (`indexer.runtime.ids`' rule, applied per version by `resolve_ids`, in the overlay
and in `fold`): an integer id in [0, 2^62) is its own; an id the version holds keeps the version's FAISS id; any
other id gets the next one above every FAISS id the version holds (from 2^62 up). They live only in memory: a
replay onto another version assigns them anew, and `indexer compact` writes them into the version it builds.

Encoders: an upsert carries the vector of the encoder that served its write; applied to a version built with
another encoder, its text is encoded anew with the version's (`reencode_stale`, for the replay and the fold).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from indexer.runtime.ids import ExtId, FaissIds
from indexer.runtime.store import Store
from indexer.runtime.writelog import UPSERT, LogEntry


def resolve_ids(store: Store, ext_ids: Iterable[ExtId], ids: FaissIds) -> tuple[dict[ExtId, int], set[int]]:
    """The FAISS ids of `ext_ids` in the version of `store`: the one it holds an id under, else `ids`' rule (its own,
    or the next free one); and those of them that the version holds."""
    wanted = list(dict.fromkeys(ext_ids))
    held = store.ids_of(wanted)
    return {e: ids.assign(e, held.get(e)) for e in wanted}, set(held.values())


def reencode_stale(entries: list[LogEntry], sha: str, encode: Callable[[list[str]], np.ndarray]) -> int:
    """Give the upserts of `entries` written with another encoder than `sha` the vector of their text by `encode`
    (the version's encoder), in place; returns how many."""
    stale = [i for i, e in enumerate(entries) if e.op == UPSERT and e.model != sha]
    if stale:
        vecs = encode([entries[i].text or "" for i in stale])
        for i, v in zip(stale, vecs, strict=True):
            e = entries[i]
            entries[i] = LogEntry(e.seq, e.op, e.ext_id, e.text, e.metadata, v, sha)
    return len(stale)


@dataclass(frozen=True)
class Fold:
    """Log entries' net effect on a version, in its FAISS ids (`fold`)."""

    upserts: list[tuple[int, LogEntry]]  # (FAISS id, upsert) of each document written, in seq order
    deletes: list[int]  # FAISS ids of the version's documents deleted
    replaced: list[int]  # FAISS ids of the version's documents that an upsert replaces

    @property
    def created(self) -> int:
        """Documents the version did not hold."""
        return len(self.upserts) - len(self.replaced)


def fold(net: Sequence[LogEntry], store: Store) -> Fold:
    """The net effect `net` (one entry per external id: `writelog.net_effect`) on the version of `store`, with the
    FAISS ids the overlay would give it: what `indexer compact` writes into the next version. A delete of an id the
    version does not hold changes nothing."""
    fid_of, held = resolve_ids(store, [e.ext_id for e in net], FaissIds(store.max_id()))
    upserts = [(fid_of[e.ext_id], e) for e in net if e.op == UPSERT]
    deletes = [fid_of[e.ext_id] for e in net if e.op != UPSERT and fid_of[e.ext_id] in held]
    return Fold(upserts, deletes, [f for f, _ in upserts if f in held])
