"""Documents read back from a real version (real FAISS IVF, real SQLite store) under its write overlay: get, count
and scroll answer what a model of the collection holds after any mix of upserts and deletes, a scroll visits
every document live throughout exactly once while writes land between its pages, vectors come back as written,
and a version of passages reads back whole documents."""

from __future__ import annotations

import json
import random
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from indexer.runtime.faiss.files import INDEX_FILE, write_index
from indexer.runtime.faiss.training import build_ivf
from indexer.runtime.filters import FilterError
from indexer.runtime.ids import ASSIGNED_IDS_FROM
from indexer.runtime.live_index import LiveIndex
from indexer.runtime.manifest import DataInfo, IndexInfo, Manifest, ModelInfo, Timings
from indexer.runtime.passages import Passage, passage_id, passage_rows
from indexer.runtime.reading import BadCursor, Documents, encode_cursor, laid_out
from indexer.runtime.store import STORE
from indexer.runtime.store_writer import CorpusStoreWriter
from indexer.runtime.version import IndexVersion
from indexer.runtime.writelog import DELETE, UPSERT, LogEntry
from tests.indexer.runtime.test_overlay import N, make_version, unit


def upsert(seq: int, ext: int | str, vec: np.ndarray, meta: dict | None = None) -> LogEntry:
    return LogEntry(seq, UPSERT, ext, f"written {ext}", meta if meta is not None else {"w": seq}, vec, "sha")


def delete(seq: int, ext: int | str) -> LogEntry:
    return LogEntry(seq, DELETE, ext, None, {}, None, "sha")


def scroll_all(docs: Documents, limit: int, flt: object = None) -> list[int | str]:
    seen, cursor = [], None
    while True:
        page = docs.scroll(limit, cursor, flt)
        seen += [d.id for d in page.documents]
        if page.next_cursor is None:
            return seen
        cursor = page.next_cursor


def order(ids: list[int | str]) -> list[int | str]:
    return sorted(ids, key=lambda e: (isinstance(e, str), e))


@pytest.fixture
def live(tmp_path: Path) -> tuple[LiveIndex, dict[int | str, np.ndarray]]:
    vectors, _ = make_version(tmp_path / "v1")
    return LiveIndex(IndexVersion(tmp_path / "v1")), vectors


def test_get_count_and_scroll_follow_every_write(live: tuple[LiveIndex, dict]) -> None:
    index, vectors = live
    model = {e: (f"text of {e}", {"n": i}) for i, e in enumerate(vectors)}  # id -> (text, metadata) served
    rng = random.Random(3)
    seq, new = 0, unit(200, seed=9)
    base_ids = list(vectors)
    for step in range(200):
        seq += 1
        pick = rng.random()
        ext: int | str = rng.choice(base_ids) if pick < 0.5 else rng.choice([f"new-{step}", 10_000 + step, "doc-1"])
        if rng.random() < 0.3:
            index.overlay.apply([delete(seq, ext)])
            model.pop(ext, None)
        else:
            index.overlay.apply([upsert(seq, ext, new[step])])
            model[ext] = (f"written {ext}", {"w": seq})
    docs = Documents(index)
    assert docs.count() == len(model) == index.ntotal
    assert scroll_all(docs, 7) == order(list(model))
    probe = [*rng.sample(list(model), 20), "never", 123456789, *[e for e in base_ids if e not in model][:5]]
    got = docs.get(probe)
    for e, d in zip(probe, got, strict=True):
        if e in model:
            assert d is not None and (d.id, d.text, d.metadata) == (e, *model[e])
        else:
            assert d is None
    # a filter: the base's field and the written documents' field, counted and paged alike
    for flt, keep in (({"n": {"lt": 100}}, lambda m: m.get("n", 1e9) < 100),
                      ({"w": {"gte": 100}}, lambda m: m.get("w", -1) >= 100)):
        want = [e for e, (_, m) in model.items() if keep(m)]
        assert docs.count(flt) == len(want) > 0
        assert scroll_all(docs, 5, flt) == order(want)


def test_a_scroll_visits_each_live_document_once_while_writes_land(live: tuple[LiveIndex, dict]) -> None:
    index, vectors = live
    docs = Documents(index)
    stable = set(vectors) - {e for i, e in enumerate(vectors) if i % 7 == 0}  # left alone during the scroll
    churn = [e for i, e in enumerate(vectors) if i % 7 == 0]
    seen: list[int | str] = []
    cursor, seq, rng = None, 0, random.Random(5)
    while True:
        page = docs.scroll(13, cursor)
        seen += [d.id for d in page.documents]
        for _ in range(5):  # between pages: replace, delete, re-add churned documents and add new ones
            seq += 1
            e = rng.choice([*churn, f"late-{seq}", -seq])
            entry = delete(seq, e) if rng.random() < 0.4 else upsert(seq, e, unit(1, seed=seq)[0])
            index.overlay.apply([entry])
        if rng.random() < 0.3:  # the stable documents replaced in place keep their place
            seq += 1
            index.overlay.apply([upsert(seq, rng.choice(sorted(stable, key=str)), unit(1, seed=seq)[0])])
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert len(seen) == len(set(seen)), "a document visited twice"
    assert stable <= set(seen), "a document live throughout was missed"
    assert seen == order(seen)


def test_vectors_come_back_as_the_index_and_the_overlay_hold_them(live: tuple[LiveIndex, dict]) -> None:
    index, vectors = live
    written = unit(1, seed=77)[0]
    index.overlay.apply([upsert(1, "doc-1", written), upsert(2, "brand-new", written)])
    docs = Documents(index)
    got = docs.get([0, 20, "doc-3", "doc-1", "brand-new"], with_vector=True)
    for d, want in zip(got, [vectors[0], vectors[20], vectors["doc-3"], written, written], strict=True):
        assert d is not None and d.vector is not None
        np.testing.assert_allclose(d.vector, want, atol=1e-6)
    assert docs.get([0])[0].vector is None  # type: ignore[union-attr]
    page = docs.scroll(3, None, with_vector=True)
    for d in page.documents:
        np.testing.assert_allclose(d.vector, vectors[d.id], atol=1e-6)  # type: ignore[arg-type]


def test_ids_order_integers_first_then_strings_and_cursors_are_checked(live: tuple[LiveIndex, dict]) -> None:
    index, vectors = live
    docs = Documents(index)
    first = docs.scroll(3).documents
    assert [d.id for d in first] == [0, 20, 40]
    past_ints = docs.scroll(2, encode_cursor(10 * (N - 2))).documents  # the last integer id, then strings
    assert [d.id for d in past_ints] == order([e for e in vectors if isinstance(e, str)])[:2]
    for bad in ("not-a-cursor", encode_cursor(1.5), "W10"):  # type: ignore[arg-type]
        with pytest.raises(BadCursor, match="not one this API made"):
            docs.scroll(3, bad)
    assert docs.count({"nope": 1}) == 0  # a field no document holds matches nothing
    with pytest.raises(FilterError, match="unknown operator"):
        docs.count({"nope": {"near": 1}})
    assert docs.scroll(5, encode_cursor("\U0010ffff")).next_cursor is None


def passages_version(folder: Path) -> dict[int | str, str]:
    """A version whose store holds documents as passage rows, three passages each, the gaps one space."""
    folder.mkdir(parents=True)
    texts = {7: "Alpha one.  Beta two. Gamma three.", "b": "Delta four. Epsilon five. Zeta six."}
    rows, fids, nxt = [], [], ASSIGNED_IDS_FROM
    for doc, text in texts.items():
        cuts = [0, text.index("Beta") if doc == 7 else 12, text.index("Gamma") if doc == 7 else 26, len(text)]
        parts = [Passage(a, text.rindex(".", a, b) + 1, 3) for a, b in zip(cuts, cuts[1:], strict=False)]
        for rid, ptext, meta in passage_rows(doc, text, {"kind": str(doc)}, parts):
            rows.append((nxt, rid, ptext, json.dumps(meta)))
            fids.append(nxt)
            nxt += 1
    writer = CorpusStoreWriter(folder / STORE)
    writer.put(rows)
    writer.finish()
    x = unit(len(rows), seed=1)
    index, _, _ = build_ivf(x, np.asarray(fids, dtype=np.int64), 2, 2, codec="Flat")
    write_index(index, folder / INDEX_FILE)
    n = len(rows)
    Manifest(version=folder.name, created_at=datetime.now(timezone.utc),
             model=ModelInfo(dir="/nowhere", onnx_sha256="sha", pooling="mean", dim=16, max_length=8, source="test"),
             index=IndexInfo(factory="IVF2,Flat", nlist=2, nlist_requested=2, nprobe=2, ntotal=n),
             data=DataInfo(source="test", protocol="corpus", rows_read=n, skipped_empty_texts=0, n_docs=n,
                           n_queries=0), build_seconds=Timings()).save(folder)
    return texts


def test_a_version_of_passages_reads_back_documents(tmp_path: Path) -> None:
    texts = passages_version(tmp_path / "v1")
    index = LiveIndex(IndexVersion(tmp_path / "v1"))
    docs = Documents(index)
    assert docs.count() == 2 and docs.count({"kind": "7"}) == 1
    d7, db, missing = docs.get([7, "b", "7"], with_vector=True)
    assert missing is None and d7 is not None and db is not None
    assert d7.metadata == {"kind": "7"} and [p.index for p in d7.passages or []] == [0, 1, 2]
    assert d7.text == texts[7] and db.text == "Delta four. Epsilon five. Zeta six."
    assert all(p.text == d7.text[p.start : p.end] and p.vector is not None for p in d7.passages or [])
    # an id spelling a passage row's names no document (not document 7 read from its passage 1, nor from 0)
    assert docs.get([passage_id(7, 1), passage_id(7, 0), passage_id("b", 2)]) == [None, None, None]
    # paged in the order of their first passages' row ids ('\x1fP["b",0]' < '\x1fP[7,0]'): stable, not the ids' own
    assert [d.id for d in docs.scroll(10).documents] == ["b", 7]
    assert [d.id for d in docs.scroll(1, docs.scroll(1).next_cursor).documents] == [7]
    # a write replaces all of a document's passages; a delete removes them all: both read back at once
    text = "Only one passage now."
    rows = passage_rows(7, text, {"kind": "new"}, [Passage(0, len(text), 4)])
    entries = [LogEntry(1, UPSERT, rid, t, m, unit(1, seed=4)[0], "sha") for rid, t, m in rows]
    entries += [delete(2, rid) for rid, _, _ in passage_rows(7, "x y z", {}, [Passage(0, 1, 1)] * 3)[1:]]
    index.overlay.apply(entries)
    (d7,) = docs.get([7])
    assert d7 is not None and (d7.text, d7.metadata, len(d7.passages or [])) == (text, {"kind": "new"}, 1)
    index.overlay.apply([delete(3, rid) for rid, _, _ in passage_rows("b", "x y z", {}, [Passage(0, 1, 1)] * 3)])
    assert docs.get(["b"]) == [None] and docs.count() == 1 and [d.id for d in docs.scroll(10).documents] == [7]


def test_laid_out_fills_what_no_passage_covers_with_spaces() -> None:
    from indexer.runtime.reading import PassageText

    parts = [PassageText(0, 0, 5, "Hello"), PassageText(1, 3, 9, "lo you"), PassageText(2, 11, 14, "end")]
    assert laid_out(parts) == "Hello you  end"
