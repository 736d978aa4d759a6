"""The live overlay on a real version (real FAISS IVF, real SQLite store; random unit vectors, no encoder): after
any mix of upserts and deletes its answers equal brute force over the documents that should be served; a
written document replacing a base one keeps its FAISS id and never shows twice; concurrent writes and searches
raise nothing and never show a document twice."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from indexer.runtime.faiss.files import INDEX_FILE, write_index
from indexer.runtime.faiss.training import build_ivf
from indexer.runtime.fold import fold
from indexer.runtime.ids import ASSIGNED_IDS_FROM
from indexer.runtime.live_index import LiveIndex
from indexer.runtime.manifest import DataInfo, IndexInfo, Manifest, ModelInfo, Timings
from indexer.runtime.store import STORE
from indexer.runtime.store_writer import CorpusStoreWriter
from indexer.runtime.version import IndexVersion, VectorIndex
from indexer.runtime.writelog import DELETE, UPSERT, LogEntry, net_effect
from indexer.runtime.writes import Writes, WritesUnsupported

DIM, N, NLIST = 16, 400, 8


def unit(n: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def make_version(folder: Path) -> tuple[dict[int | str, np.ndarray], dict[int | str, int]]:
    """A corpus version of N documents: even rows have integer ids (their own FAISS ids), odd rows string ids
    (FAISS ids from 2^62). Exact search: nprobe = nlist."""
    folder.mkdir(parents=True)
    x = unit(N, seed=0)
    ext = [i * 10 if i % 2 == 0 else f"doc-{i}" for i in range(N)]
    fids, nxt = [], ASSIGNED_IDS_FROM
    for e in ext:
        if isinstance(e, int):
            fids.append(e)
        else:
            fids.append(nxt)
            nxt += 1
    writer = CorpusStoreWriter(folder / STORE)
    writer.put([(f, e, f"text of {e}", json.dumps({"n": i})) for i, (f, e) in enumerate(zip(fids, ext, strict=True))])
    writer.finish()
    index, _, _ = build_ivf(x, np.asarray(fids, dtype=np.int64), NLIST, NLIST, codec="Flat")
    write_index(index, folder / INDEX_FILE)
    Manifest(version=folder.name, created_at=datetime.now(timezone.utc),
             model=ModelInfo(dir="/nowhere", onnx_sha256="sha", pooling="mean", dim=DIM, max_length=8, source="test"),
             index=IndexInfo(factory=f"IVF{NLIST},Flat", nlist=NLIST, nlist_requested=NLIST, nprobe=NLIST, ntotal=N),
             data=DataInfo(source="test", protocol="corpus", rows_read=N, skipped_empty_texts=0, n_docs=N,
                           n_queries=0),
             build_seconds=Timings()).save(folder)
    return dict(zip(ext, x, strict=True)), dict(zip(ext, fids, strict=True))


def entry(seq: int, op: str, ext: int | str, vec: np.ndarray | None = None) -> LogEntry:
    return LogEntry(seq, op, ext, f"written {ext}" if op == UPSERT else None, {"w": seq} if op == UPSERT else {},
                    vec, "sha")


def brute_force(served: dict[int | str, np.ndarray], queries: np.ndarray, k: int) -> list[list[int | str]]:
    keys = list(served)
    mat = np.stack([served[e] for e in keys])
    order = np.argsort(-(queries @ mat.T), axis=1)[:, :k]
    return [[keys[j] for j in row] for row in order]


def test_overlay_answers_equal_brute_force_over_what_is_served(tmp_path: Path) -> None:
    served, fid_of = make_version(tmp_path / "v1")
    live = LiveIndex(IndexVersion(tmp_path / "v1"))
    base_fid = {f: e for e, f in fid_of.items()}
    new = unit(8, seed=5)
    queries = np.concatenate([new, unit(20, seed=6)])  # the written vectors rank first for their own query
    entries = [
        entry(1, UPSERT, "fresh-a", new[0]),  # new string id: a FAISS id above every base id
        entry(2, UPSERT, 20, new[1]),  # replaces base int id 20 (keeps FAISS id 20)
        entry(3, UPSERT, "doc-3", new[2]),  # replaces a base string id (keeps its FAISS id)
        entry(4, DELETE, 40),  # deletes a base document
        entry(5, DELETE, "never-there"),  # deletes nothing here
        entry(6, UPSERT, 123457, new[3]),  # new int id: its own FAISS id
        entry(7, UPSERT, "fresh-b", new[4]),
        entry(8, DELETE, "fresh-b"),  # written, then deleted
        entry(9, UPSERT, "20", new[5]),  # "20" is not 20: a new document
    ]
    applied = live.overlay.apply(entries)
    assert (applied.created, applied.replaced, applied.deleted, applied.missing) == (4, 2, 2, 1)
    assert live.overlay.applied_seq == 9
    for e in entries:
        if e.op == UPSERT:
            served[e.ext_id] = e.vector  # type: ignore[assignment]
        else:
            served.pop(e.ext_id, None)
    served.pop("fresh-b", None)
    assert live.ntotal == len(served) == N + 3 - 1

    scores, ids = live.search(queries, 10)
    hits = live.hits(scores, ids)
    fid_to_ext = {**base_fid, live.overlay._fid_of["fresh-a"]: "fresh-a", 123457: 123457,
                  live.overlay._fid_of["20"]: "20"}
    assert fid_of[20] == 20 and live.overlay._fid_of[20] == 20 and live.overlay._fid_of["doc-3"] == fid_of["doc-3"]
    assert live.overlay._fid_of["fresh-a"] > max(fid_of.values())
    expected = brute_force(served, queries, 10)
    for row_ids, row_hits, want in zip(ids.tolist(), hits, expected, strict=True):
        assert [fid_to_ext[i] for i in row_ids] == want
        assert len(set(row_ids)) == 10
        for hit in row_hits:
            ext = fid_to_ext[hit.faiss_id]
            assert hit.ext_id == ext
            assert hit.text == (f"written {ext}" if ext in {"fresh-a", 20, "doc-3", 123457, "20"} else f"text of {ext}")
    assert ids[0, 0] == live.overlay._fid_of["fresh-a"] and ids[1, 0] == 20 and abs(scores[1, 0] - 1) < 1e-5
    assert live.overlay.document(20).text == "written 20" and live.overlay.deleted(40)  # type: ignore[union-attr]

    # `indexer compact`'s fold of the same entries gives the same FAISS ids and the same documents served
    folded = fold(list(net_effect(entries).values()), live.base.store)
    assert {e.ext_id: f for f, e in folded.upserts} == {e: live.overlay._fid_of[e]
                                                       for e in ("fresh-a", 20, "doc-3", 123457, "20")}
    assert folded.deletes == [40] and sorted(folded.replaced) == sorted([20, fid_of["doc-3"]])
    assert folded.created == applied.created - 1  # "fresh-b" was written then deleted: nothing to fold
    assert N - len(folded.deletes) + folded.created == live.ntotal
    live.close()


def test_the_overlay_is_the_version_interface_and_forwards_nothing_else(tmp_path: Path) -> None:
    make_version(tmp_path / "v1")
    base = IndexVersion(tmp_path / "v1")
    live = LiveIndex(base)
    try:
        assert isinstance(base, VectorIndex) and isinstance(live, VectorIndex)
        assert callable(live.lexical_search)
        assert not hasattr(LiveIndex, "__getattr__")  # no silent forwarding: the base is `live.base`
        for name in ("store", "ann", "folder", "nprobe", "filters"):
            assert hasattr(base, name) and not hasattr(live, name)
        assert (live.version, live.dim, live.ntotal, live.manifest) == (base.version, base.dim, base.ntotal,
                                                                        base.manifest)
    finally:
        live.close()


def test_rows_are_packed_and_search_stays_right(tmp_path: Path) -> None:
    served, fid_of = make_version(tmp_path / "v1")
    live = LiveIndex(IndexVersion(tmp_path / "v1"))
    vecs = unit(3000, seed=9)
    seq = 0
    for i in range(3000):  # each id written, then most of them deleted: rows die and get packed
        seq += 1
        live.overlay.apply([entry(seq, UPSERT, f"w{i}", vecs[i])])
        if i % 3:
            seq += 1
            live.overlay.apply([entry(seq, DELETE, f"w{i}")])
        else:
            served[f"w{i}"] = vecs[i]
    assert live.overlay._rows < 3000 and live.overlay._dead <= max(1024, live.overlay._rows // 2)
    assert live.ntotal == len(served)
    queries = np.concatenate([vecs[:30], unit(10, seed=10)])
    _, ids = live.search(queries, 10)
    ext_of = {f: e for e, f in fid_of.items()} | {f: e for e, f in live.overlay._fid_of.items()}
    assert [[ext_of[i] for i in row] for row in ids.tolist()] == brute_force(served, queries, 10)
    live.close()


def test_concurrent_writes_and_searches(tmp_path: Path) -> None:
    make_version(tmp_path / "v1")
    live = LiveIndex(IndexVersion(tmp_path / "v1"))
    vecs = unit(2000, seed=3)
    queries = unit(8, seed=4)
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer() -> None:
        try:
            for i in range(2000):  # replace base documents and add new ones, delete some again
                ext: int | str = (i % 200) * 20 if i % 2 else f"n{i % 300}"
                op = DELETE if i % 7 == 0 else UPSERT
                live.overlay.apply([entry(i + 1, op, ext, vecs[i] if op == UPSERT else None)])
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            stop.set()

    def searcher() -> None:
        try:
            while not stop.is_set():
                scores, ids = live.search(queries, 10)
                for row in ids:
                    real = row[row >= 0]
                    assert len(set(real.tolist())) == len(real), row  # never one document twice
                live.hits(scores, ids)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=searcher) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors[:3]
    live.close()


def test_writes_are_refused_where_there_is_no_overlay_or_the_version_cannot_hold_them(tmp_path: Path) -> None:
    """A version served without an overlay: 501 (WritesUnsupported; every backend's version gets one at attach). A
    corpus version takes any id."""
    make_version(tmp_path / "v1")
    plain = IndexVersion(tmp_path / "v1")  # what a backend without overlays would serve
    with pytest.raises(WritesUnsupported, match="without a write overlay"):
        Writes.check(SimpleNamespace(index=plain, version="v1"), [1], False)  # type: ignore[arg-type]
    live = LiveIndex(plain)
    Writes.check(SimpleNamespace(index=live, version="v1"), ["s", (1 << 63) - 1, -4], True)  # type: ignore[arg-type]
    live.close()


@pytest.mark.parametrize("flt", [{"n": {"lt": 40}}, {"n": {"in": [1, 3, 5, 7, 21]}}, {"n": {"gte": 200}}])
def test_filtered_search_over_the_overlay_equals_brute_force_over_matching_documents(tmp_path: Path,
                                                                                    flt: dict) -> None:
    """Base documents deleted or replaced (by documents whose metadata no longer matches) never answer; written
    documents answer when their metadata matches; the rest is the base's filtered search (exact here)."""
    from indexer.runtime.filters import matches, parse_filter

    served, fid_of = make_version(tmp_path / "v1")
    meta = {e: {"n": i} for i, e in enumerate(served)}  # what make_version stored
    live = LiveIndex(IndexVersion(tmp_path / "v1"))
    new = unit(12, seed=11)
    queries = np.concatenate([new, unit(10, seed=12)])
    written: list[tuple[int | str, dict]] = [
        (0, {"n": 500}), (10, {"n": 3}), ("doc-1", {"n": 300}), ("w-a", {"n": 5}), ("w-b", {"n": 250}),
        ("w-c", {"n": 21}), (60, {"n": 7}), ("doc-5", {"n": 1}), ("w-d", {"n": 0}), (2000, {"n": 210}),
    ]
    entries = [LogEntry(i + 1, UPSERT, e, f"written {e}", m, new[i], "sha") for i, (e, m) in enumerate(written)]
    entries += [LogEntry(20, DELETE, 20, None, {}, None, "sha"), LogEntry(21, DELETE, "doc-7", None, {}, None, "sha"),
                LogEntry(22, DELETE, "w-d", None, {}, None, "sha"), LogEntry(23, DELETE, 30, None, {}, None, "sha")]
    live.overlay.apply(entries)
    for e in entries:
        if e.op == UPSERT:
            served[e.ext_id], meta[e.ext_id] = e.vector, e.metadata  # type: ignore[assignment]
        else:
            served.pop(e.ext_id, None)
    node = parse_filter(flt, {"n": "int"})
    matching = {e: v for e, v in served.items() if matches(node, meta[e])}
    k = 8
    scores, ids = live.search(queries, k, live.match(flt))
    hits = live.hits(scores, ids)
    expected = brute_force(matching, queries, min(k, len(matching)))
    for row_hits, want in zip(hits, expected, strict=True):
        assert [h.ext_id for h in row_hits] == want
        assert all(matches(node, h.metadata) for h in row_hits)
    live.close()


WORDS = ["kite", "river", "python", "garden", "quartz", "violin", "harbor", "meadow", "copper", "lantern", "orbit",
         "falcon"]


def words_text(seed: int, n: int = 6) -> str:
    rng = np.random.default_rng(seed)
    return " ".join(rng.choice(WORDS, size=int(rng.integers(1, n + 1))).tolist())


@pytest.mark.parametrize("flt", [None, {"n": {"lt": 200}}])
def test_lexical_search_over_the_overlay_equals_bm25_over_what_is_served(tmp_path: Path, flt: dict | None) -> None:
    """The lexical side of the overlay: after upserts (new, replacing a base document, replacing a written one)
    and deletes (base and written), the lexical answers equal BM25 by hand over the documents that should be served
    — each scored with the base version's statistics (N, avgdl, document frequencies; a term the base never saw
    counts as in one document) — restricted to the filter's matches."""
    import math

    from indexer.runtime.filters import matches, parse_filter
    from indexer.runtime.lexical import Analyzer, build_lexical, lexical_info

    folder = tmp_path / "v1"
    served_vecs, fid_of = make_version(folder)
    base_texts = {e: words_text(i) for i, e in enumerate(served_vecs)}
    info = build_lexical(folder, [(fid_of[e], t) for e, t in base_texts.items()], lexical_info())
    manifest = Manifest.load(folder)
    manifest.lexical = info
    manifest.save(folder)
    live = LiveIndex(IndexVersion(folder))
    meta = {e: {"n": i} for i, e in enumerate(served_vecs)}
    texts = dict(base_texts)
    vec = unit(1, seed=1)[0]
    written = [(0, "kite kite unseenword", {"n": 5}), ("doc-1", "violin orbit", {"n": 300}),
               ("w-a", "falcon harbor harbor", {"n": 7}), ("w-b", "unseenword copper", {"n": 150}),
               ("w-a", "meadow lantern", {"n": 8}), (123457, "quartz quartz quartz", {"n": 9})]
    entries = [LogEntry(i + 1, UPSERT, e, t, md, vec, "sha") for i, (e, t, md) in enumerate(written)]
    entries += [LogEntry(10, DELETE, 20, None, {}, None, "sha"), LogEntry(11, DELETE, "w-b", None, {}, None, "sha"),
                LogEntry(12, DELETE, "doc-3", None, {}, None, "sha")]
    live.overlay.apply(entries)
    for e in entries:
        if e.op == UPSERT:
            texts[e.ext_id], meta[e.ext_id] = e.text, e.metadata  # type: ignore[assignment]
        else:
            texts.pop(e.ext_id, None)

    an = Analyzer("english", "english")
    base_terms = [an.terms(t) for t in base_texts.values()]
    n_base, avgdl = len(base_terms), sum(map(len, base_terms)) / len(base_terms)

    def bm25(query: str, text: str) -> float:
        dt, s = an.terms(text), 0.0
        for q in an.terms(query):
            tf = dt.count(q)
            if tf:
                df = sum(q in t for t in base_terms) or 1
                s += math.log(1 + (n_base - df + 0.5) / (df + 0.5)) * tf / (tf + 0.9 * (0.6 + 0.4 * len(dt) / avgdl))
        return s

    node = parse_filter(flt, {"n": "int"}) if flt is not None else None
    queries = ["kite", "unseenword", "harbor falcon", "meadow", "quartz river", "copper", "violin orbit"]
    got = live.lexical_search(queries, 10, live.match(flt) if flt is not None else None)
    for q, (scores, ids) in zip(queries, got, strict=True):
        want = {e: bm25(q, t) for e, t in texts.items() if node is None or matches(node, meta[e])}
        want = {e: s for e, s in want.items() if s > 0}
        hits = live.hits(scores[None, :], ids[None, :])[0]
        got_scores = {h.ext_id: h.score for h in hits}
        top = sorted(want.values(), reverse=True)[:10]
        assert sorted(got_scores.values(), reverse=True) == pytest.approx(top, rel=1e-5), q
        assert all(want[e] == pytest.approx(s, rel=1e-5) for e, s in got_scores.items()), q
        assert len(set(ids.tolist())) == len(ids)
    # the replaced and deleted texts are gone; the written ones answer
    assert "w-b" not in {h.ext_id for h in live.hits(*[x[None, :] for x in live.lexical_search(["copper"], 50)[0]])[0]}
    falcon = live.lexical_search(["falcon"], 50)[0][1]
    assert live.overlay._fid_of["w-a"] not in falcon.tolist()
    live.close()


def kites(tmp_path: Path, engine: str = "auto") -> tuple[dict[int | str, np.ndarray], LiveIndex]:
    """`make_version`'s version with a lexical index of "kite <i>" texts (by `engine`), served live."""
    from indexer.runtime.lexical import build_lexical, lexical_info

    folder = tmp_path / "v1"
    served, fid_of = make_version(folder)
    info = build_lexical(folder, [(fid_of[e], f"kite {i}") for i, e in enumerate(served)],
                         lexical_info(engine=engine))
    manifest = Manifest.load(folder)
    manifest.lexical = info
    manifest.save(folder)
    return served, LiveIndex(IndexVersion(folder))


@pytest.mark.parametrize("engine", ["auto", "pisa"])
def test_a_cached_filter_match_still_honours_later_writes(tmp_path: Path, engine: str) -> None:
    """A filter's base matches are cached per version, with the matching vectors gathered once it is used again
    (few match: exact search over their codes) and, on PISA, its lexical rows given their own postings once a
    lexical search has found them; writes after that are applied at every search: a base document written with
    metadata that no longer matches leaves the next filtered answer, one written to match joins it, a deleted one
    leaves — in dense and lexical search alike, while the cached base match is reused."""
    served, live = kites(tmp_path, engine)
    flt = {"n": {"lt": 10}}  # 10 of 400 base documents
    q = served[40][None, :]  # document 40 (n=4) is its own nearest neighbour
    assert live.match(flt).base.prepared.gathered is None  # a filter seen once: the lists' exact search
    # used again: the cached match answers at once, its codes gathered on the version's own thread, into the cache
    assert live.match(flt).base.prepared.gathered is None
    for _ in range(200):
        if (first := live.match(flt)).base.prepared.gathered is not None:
            break
        time.sleep(0.01)
    assert first.base.prepared.gathered is not None and first.base.codes_tried
    dense = live.hits(*live.search(q, 5, first))[0]
    lexical = live.hits(*[x[None, :] for x in live.lexical_search(["kite"], 50, first)[0]])[0]
    assert dense[0].ext_id == 40 and 40 in {h.ext_id for h in lexical} and len(lexical) == 10
    far = unit(1, seed=99)[0]
    live.overlay.apply([LogEntry(1, UPSERT, 40, "kite again", {"n": 900}, served[40], "sha"),  # now outside
                        LogEntry(2, UPSERT, "w-new", "kite new", {"n": 3}, served[40], "sha"),  # written inside
                        LogEntry(3, UPSERT, 80, "kite moved", {"n": 2}, far, "sha"),  # same metadata, new vector
                        LogEntry(4, DELETE, 60, None, {}, None, "sha")])  # n=6: deleted
    again = live.match(flt)
    assert again.base is first.base  # the cached match, not recomputed
    if engine == "pisa":  # its rows, found by the lexical search above, prepared on the version's own thread
        rows, base = again.base._rows[0], live.base.lexical
        for _ in range(200):
            if base.prepared(rows):
                break
            time.sleep(0.01)
        assert base.prepared(rows) and live.match(flt).base.rows_tried
    dense = live.hits(*live.search(q, 12, again))[0]
    lexical = live.hits(*[x[None, :] for x in live.lexical_search(["kite"], 50, again)[0]])[0]
    for hits in (dense, lexical):
        got = {h.ext_id for h in hits}
        assert 40 not in got and 60 not in got and "w-new" in got and 80 in got
        assert all(h.metadata["n"] < 10 for h in hits)
    assert dense[0].ext_id == "w-new"  # the written vector equals document 40's old one
    assert len(dense) == 9 and len(lexical) == 9  # 10 base - 40 - 60 + w-new (80 is still inside)
    live.close()



def test_a_search_is_not_held_back_while_a_write_analyses_its_texts(tmp_path: Path) -> None:
    """An apply computes its texts' BM25 weights (and the room for its rows) before it takes the lock every
    search's snapshot takes: held in that analysis, it lets dense and lexical searches through, which do not see
    the write yet; once it returns, both see it."""
    served, live = kites(tmp_path)
    assert live.overlay.lexical is not None
    entered, release = threading.Event(), threading.Event()
    weights = live.overlay.lexical.base.weights

    def held(text: str) -> dict[str, float]:
        entered.set()
        assert release.wait(30)
        return weights(text)

    live.overlay.lexical.base.weights = held  # type: ignore[method-assign]
    vec = -next(iter(served.values()))  # a direction no served document points to
    writer = threading.Thread(target=live.overlay.apply, args=(
        [LogEntry(1, UPSERT, "w-new", "a zeppelin over the bay", {"n": 1}, vec.astype(np.float32), "m")],))
    writer.start()
    try:
        assert entered.wait(30)
        t0 = time.perf_counter()
        scores, ids = live.search(vec[None, :], 1)
        lexical = live.lexical_search(["zeppelin"], 5)[0]
        assert time.perf_counter() - t0 < 5 and writer.is_alive()  # answered while the write is held
        assert live.ext_ids([int(ids[0, 0])]) != {int(ids[0, 0]): "w-new"} and not (lexical[1] >= 0).any()
    finally:
        release.set()
        writer.join(30)
    scores, ids = live.search(vec[None, :], 1)
    assert live.ext_ids([int(ids[0, 0])])[int(ids[0, 0])] == "w-new"
    assert live.ext_ids([int(i) for i in live.lexical_search(["zeppelin"], 5)[0][1] if i >= 0]) == \
        {int(ids[0, 0]): "w-new"}


def test_closing_a_live_index_frees_its_written_documents(tmp_path: Path) -> None:
    """`LiveIndex.close` (a retired searcher's, `service.engine.leases`) empties the overlay: its written documents,
    their ids, metadata, BM25 postings, vector rows and inverted lists, and the tombstones."""
    served, live = kites(tmp_path)
    overlay = live.overlay
    vecs = unit(300, seed=5)
    overlay.apply([LogEntry(i + 1, UPSERT, f"w-{i}", f"kite written {i}", {"n": i}, vecs[i], "sha")
                   for i in range(300)] + [LogEntry(301, DELETE, 40, None, {}, None, "sha")])
    lists = overlay._lists
    assert lists is not None and lists.rows == 300 and overlay.lexical is not None
    assert overlay.written == 300 and len(overlay.lexical) == 300 and overlay.snapshot().exclusion is not None
    live.close()
    assert overlay.written == 0 and len(overlay.lexical) == 0 and not overlay.lexical._postings
    assert lists.rows == 0 and lists._index.ntotal == 0
    assert not (overlay._fid_of or overlay._meta or overlay._row_of or overlay._ever or overlay._tombstones)
    snap = overlay.snapshot()
    assert snap.empty and len(snap.vectors) == 0


@pytest.mark.parametrize("failing", ["lexical rows", "codes"])
def test_a_filter_whose_rows_or_codes_cannot_be_prepared_is_searched_as_before(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, failing: str) -> None:
    """Preparing a filter used again (its lexical rows, its vectors' codes) runs on the version's gathering thread:
    when it fails (no memory, a mapped file that cannot be read), the failure is logged once, the filter is not
    tried again, and its searches answer as before."""
    _, live = kites(tmp_path, "pisa")
    base = live.base.lexical
    assert base is not None

    def no_memory(*args: object) -> object:
        raise MemoryError("no room for them")

    if failing == "lexical rows":
        monkeypatch.setattr(base, "prepare_rows", no_memory)
    else:
        monkeypatch.setattr(live.base.ann, "with_codes", no_memory)
    flt = {"n": {"lt": 10}}
    first = live.lexical_search(["kite 3"], 5, live.match(flt))[0]  # its rows found
    for _ in range(200):
        if (match := live.match(flt)).base.rows_tried:
            break
        time.sleep(0.01)
    assert match.base.rows_tried and match.base.codes_tried and not base.prepared(match.base._rows[0])
    assert match.base.prepared is not None  # its codes gathered (few matches) unless that failed
    assert (match.base.prepared.gathered is None) == (failing == "codes") and match.base.prepared.own is None
    again = live.lexical_search(["kite 3"], 5, live.match(flt))[0]
    assert again[1].tolist() == first[1].tolist() and again[0].tolist() == first[0].tolist()
    assert [r.message for r in caplog.records].count(
        f"filter {json.dumps(flt, sort_keys=True)}: its codes or lexical rows were not prepared: no room for them") == 1
    live.close()
