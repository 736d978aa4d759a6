"""External id → FAISS id: the one rule, for builds (`indexer.ingest`), the API's writes and their replay
(`indexer.runtime.overlay`) and `indexer compact`'s fold (`indexer.runtime.fold`).

The store maps each external id to a FAISS int64 id, and hits give the external id back as it was given:
- an integer id in [0, 2^62) is its own FAISS id, so integer-keyed corpora (Quora qids, database keys) keep their
  ids everywhere, including in APIs that only know FAISS ids;
- an id the version holds already keeps the FAISS id it has there (a write that replaces a document);
- any other id (a string, a negative or a huge integer) gets the next free FAISS id from 2^62 up, above every id
  the version holds.
The two ranges never meet, so 17 and "17" are two documents. Ids assigned to written documents live in memory
(the overlay) until `indexer compact` writes them into a version: a replay onto another version assigns them anew.

A sharded version keeps each FAISS id in shard `id % N` (`shard_of`): its builds, its split (`indexer shard`), and
the writes the sharded backend routes to one shard each (`indexer.runtime.shard_writes`).
"""

from __future__ import annotations

import numpy as np

ExtId = int | str

ASSIGNED_IDS_FROM = 1 << 62  # FAISS ids of external ids that are not their own start here


def own_faiss_id(ext_id: ExtId) -> int | None:
    """The FAISS id an external id is by itself (an integer in [0, 2^62)), else None: it needs one assigned."""
    if isinstance(ext_id, int) and not isinstance(ext_id, bool) and 0 <= ext_id < ASSIGNED_IDS_FROM:
        return ext_id
    return None


class FaissIds:
    """Assigns FAISS ids to external ids by the rule above, over a version whose largest FAISS id is `held_max`
    (-1: an empty or a new version)."""

    def __init__(self, held_max: int = -1) -> None:
        self.next = max(held_max + 1, ASSIGNED_IDS_FROM)

    def assign(self, ext_id: ExtId, held: int | None = None) -> int:
        """The FAISS id of `ext_id`: `held` (the id the version holds it under, if any), else its own, else the
        next free one."""
        if held is not None:
            return held
        own = own_faiss_id(ext_id)
        if own is not None:
            return own
        fid, self.next = self.next, self.next + 1
        return fid


def shard_of(fids: np.ndarray | int, n_shards: int) -> np.ndarray:
    """Which shard of `n_shards` holds each FAISS id: stable (no hash salt: the same on every node and restart),
    needs no coordination, and spreads dense integer ids evenly."""
    return np.asarray(fids, dtype=np.int64) % n_shards
