"""`apply_writes` (what `indexer compact` folds into a copy of the store) on a real SQLite store as large as the
writes it folds (an empty collection's store after a first fold, as the API's compactions make it): the replaced
and deleted documents' metadata rows go and the written ones' come, filters answer from them, and it takes time in
proportion to the store, not to the store times the writes (a delete of doc_meta rows per id, which has no index
on id, scanned the whole table for each: the ingest bench's second compaction spent most of its time there)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from indexer.runtime.store import STORE, Store
from indexer.runtime.store_writer import CorpusStoreWriter, apply_writes

N = 40_000


def test_folding_as_many_writes_as_the_store_holds_is_right_and_not_quadratic(tmp_path: Path) -> None:
    CorpusStoreWriter(tmp_path / STORE).finish()  # an empty collection's store (`POST /collections`), folded into
    apply_writes(tmp_path / STORE, [(i, i, f"text {i}", json.dumps({"bucket": i % 7, "tag": "old"})) for i in range(N)],
                 [])
    upserts = [(i, i, f"new {i}", json.dumps({"bucket": i % 5, "tag": "new"})) for i in range(0, N, 2)]  # replaced
    upserts += [(N + i, N + i, f"added {i}", json.dumps({"tag": "added"})) for i in range(N // 2)]  # created
    deletes = list(range(1, N, 4))
    t0 = time.perf_counter()
    schema = apply_writes(tmp_path / STORE, upserts, deletes)
    seconds = time.perf_counter() - t0
    assert schema == {"bucket": "int", "tag": "str"}
    store = Store(tmp_path / STORE)
    try:
        assert store.count() == N + N // 2 - len(deletes)
        assert len(store.filter_ids({"tag": "old"})) == N // 2 - len(deletes)
        assert len(store.filter_ids({"tag": "new"})) == N // 2 and len(store.filter_ids({"tag": "added"})) == N // 2
        assert store.filter_ids({"bucket": 6}).tolist() == [i for i in range(N) if i % 2 and i % 4 != 1 and i % 7 == 6]
        assert store.documents([2, 3])[2].metadata == {"bucket": 2, "tag": "new"}
    finally:
        store.close()
    # one id at a time visits every metadata row per id (minutes); one pass over them takes a fraction of the bound
    assert seconds < 15, seconds
