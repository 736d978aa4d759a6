"""The one external id → FAISS id rule (`indexer.runtime.ids`), as builds, the overlay and compaction apply it."""

from __future__ import annotations

from indexer.runtime.ids import ASSIGNED_IDS_FROM, FaissIds, own_faiss_id


def test_integers_in_range_are_their_own_faiss_id() -> None:
    top = ASSIGNED_IDS_FROM - 1
    assert own_faiss_id(5) == 5 and own_faiss_id(0) == 0 and own_faiss_id(top) == top
    assert own_faiss_id(1 << 62) is None and own_faiss_id(-1) is None
    assert own_faiss_id("5") is None and own_faiss_id(True) is None  # a bool is not an integer id


def test_held_ids_keep_theirs_and_the_others_count_up_above_the_largest_held() -> None:
    fresh = FaissIds()
    assert [fresh.assign(e) for e in ("a", 17, "17", -3, 1 << 63)] == [
        ASSIGNED_IDS_FROM, 17, ASSIGNED_IDS_FROM + 1, ASSIGNED_IDS_FROM + 2, ASSIGNED_IDS_FROM + 3]
    over = FaissIds(held_max=ASSIGNED_IDS_FROM + 9)  # a version whose assigned ids went up to 2^62 + 9
    assert over.assign("x") == ASSIGNED_IDS_FROM + 10 and over.assign("y") == ASSIGNED_IDS_FROM + 11
    assert over.assign("held", held=ASSIGNED_IDS_FROM + 2) == ASSIGNED_IDS_FROM + 2  # what the version holds wins
    assert over.assign(7, held=ASSIGNED_IDS_FROM + 3) == ASSIGNED_IDS_FROM + 3  # even over an integer's own id
    assert over.assign("z") == ASSIGNED_IDS_FROM + 12
    assert FaissIds(held_max=41).assign("s") == ASSIGNED_IDS_FROM  # integer-held versions start at 2^62
