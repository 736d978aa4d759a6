"""One contract for every index kind behind `indexer.runtime.ann.AnnIndex` — flat, ivf, hnsw — served locally
(`IndexVersion` under the write overlay, `LiveIndex`) and sharded (`ShardedIndex` over the shard replicas'
`ShardSearcher`, called in this process: see `InProcessReplica`).

The same cases run against each (kind, backend): answers equal brute force over what is served; metadata filters
(selective, broad, matching nothing) answer among the matching documents only; integer and string external ids
come back as the corpus gave them; k past the documents served pads nothing; deletes and replacements through
the write overlay never answer again (HNSW cannot remove in place: the tombstones are skipped inside its search);
search parameters are the kind's own (nprobe for ivf, ef_search for hnsw, none for flat) and anything else is
refused with the reason; the index survives save/load; `indexer add`'s and `indexer compact`'s `remove` works.

The lexical retriever beside them (the version's BM25 index, `IndexVersion.lexical_search` under the write overlay)
runs the cases that apply to it, once per lexical engine (`lexical.ENGINES`: bm25s, tantivy, pisa): answers equal
Lucene's BM25 by hand, with the corpus' id types; filters answer among the matching documents only; a filter matching
nothing, or a query sharing no term with any document, is an empty answer; deleted and replaced documents never
answer, written ones do (filtered or not). The same cases but the writes run on the sharded backend, whose shards
hold the vectors and whose BM25 index is read in the API process (`ShardedIndex` is a `LexicalSearching` too).

The sharded backend serves IVF shards only (`indexer build --engine ray` trains one quantizer for all shards):
flat and hnsw versions are refused at deploy with a `Mismatch` naming the kind (tested here). Its writes go through
its own overlay, `LiveShards` (tests/service/engine/test_sharded_writes.py). Real FAISS and SQLite; random unit
vectors.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from indexer.runtime import ann
from indexer.runtime.ann import FlatParams, HnswParams, IndexParamError, IvfParams, KindParams
from indexer.runtime.faiss.files import INDEX_FILE, write_index
from indexer.runtime.faiss.kinds import build_index, read_ann
from indexer.runtime.faiss.training import train_empty_ivf
from indexer.runtime.filters import matches, parse_filter
from indexer.runtime.ids import ASSIGNED_IDS_FROM
from indexer.runtime.lexical import ENGINES, LexicalIndex, build_lexical, lexical_info, open_lexical
from indexer.runtime.live_index import LiveIndex
from indexer.runtime.manifest import DataInfo, IndexInfo, Manifest, ModelInfo, ShardInfo, Timings
from indexer.runtime.reading import Documents
from indexer.runtime.shard_writes import LiveShards
from indexer.runtime.store import STORE
from indexer.runtime.store_writer import CorpusStoreWriter
from indexer.runtime.version import IndexVersion
from indexer.runtime.writelog import DELETE, UPSERT, LogEntry
from indexer.runtime.writes import Writes
from service.engine.errors import Mismatch
from tests.indexer.runtime.test_lexical import reference

DIM, N, NLIST, K = 16, 400, 8, 10
KINDS = ann.KINDS  # every kind declared in `ann.KIND_SPECS`
FILTERS: list[dict[str, Any]] = [{"n": {"lt": 12}}, {"tag": "even"}, {"n": {"gte": 100, "lt": 300}},
                                 {"n": {"in": [3, 5, 7, 200, 399]}}]


def unit(n: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def params_for(kind: str) -> KindParams:
    """Each kind at settings that search exactly at this size: all lists, and a candidate list past N."""
    if kind == "ivf":
        return IvfParams(nlist=NLIST, nlist_requested=NLIST, codec="Flat", nprobe=NLIST)
    spec = ann.KIND_SPECS[kind]
    if issubclass(spec.params, HnswParams):  # every graph kind
        return spec.params(m=16, ef_construction=200, ef_search=2 * N)  # type: ignore[return-value]
    return spec.params()  # type: ignore[return-value]


class Corpus:
    """N documents: even rows have integer external ids (their own FAISS ids), odd rows string ids (FAISS ids
    from 2^62); metadata n (the row) and tag (even/odd)."""

    def __init__(self) -> None:
        self.vectors = unit(N, seed=0)
        self.ext: list[int | str] = [i * 10 if i % 2 == 0 else f"doc-{i}" for i in range(N)]
        nxt, self.fids = ASSIGNED_IDS_FROM, []
        for e in self.ext:
            if isinstance(e, int):
                self.fids.append(e)
            else:
                self.fids.append(nxt)
                nxt += 1
        self.meta = {e: {"n": i, "tag": "even" if i % 2 == 0 else "odd"} for i, e in enumerate(self.ext)}
        self.texts = {e: f"text of {e}" for e in self.ext}

    def served(self) -> dict[int | str, np.ndarray]:
        return dict(zip(self.ext, self.vectors, strict=True))

    def write_store(self, folder: Path) -> None:
        writer = CorpusStoreWriter(folder / STORE)
        writer.put([(f, e, self.texts[e], json.dumps(self.meta[e]))
                    for f, e in zip(self.fids, self.ext, strict=True)])
        writer.finish()

    def manifest(self, folder: Path, info: IndexInfo) -> None:
        Manifest(version=folder.name, created_at=datetime.now(timezone.utc),
                 model=ModelInfo(dir="/nowhere", onnx_sha256="sha", pooling="mean", dim=DIM, max_length=8,
                                 source="test"),
                 index=info,
                 data=DataInfo(source="test", protocol="corpus", rows_read=N, skipped_empty_texts=0, n_docs=N,
                               n_queries=0),
                 build_seconds=Timings()).save(folder)

    def version(self, folder: Path, kind: str) -> Path:
        """A version folder of one index file of `kind`, built through `build_index` as `indexer build` does."""
        folder.mkdir(parents=True)
        index, _, _ = build_index(params_for(kind), self.vectors, np.asarray(self.fids, dtype=np.int64))
        index.save(folder / INDEX_FILE)
        self.write_store(folder)
        self.manifest(folder, IndexInfo.for_params(index.params, index.ntotal))
        return folder

    def sharded_version(self, folder: Path, shards: int = 2) -> Path:
        """An IVF version as `indexer build --engine ray --shards N` lays it out: one trained quantizer, ids split
        by id % N into shard files."""
        (folder / "shards").mkdir(parents=True)
        fids = np.asarray(self.fids, dtype=np.int64)
        infos = []
        for s in range(shards):
            index = train_empty_ivf(self.vectors, NLIST, NLIST, seed=1234, codec="Flat")
            rows = np.flatnonzero(fids % shards == s)
            index.add_with_ids(self.vectors[rows], fids[rows])
            write_index(index, folder / f"shards/shard-{s:05d}.faiss")
            infos.append(ShardInfo(file=f"shards/shard-{s:05d}.faiss", ntotal=len(rows)))
        self.write_store(folder)
        self.manifest(folder, IndexInfo.for_params(params_for("ivf"), N, shards=infos))
        return folder


def brute_force(served: dict[int | str, np.ndarray], queries: np.ndarray, k: int) -> list[list[int | str]]:
    if not served:
        return [[] for _ in queries]
    keys = list(served)
    mat = np.stack([served[e] for e in keys])
    order = np.argsort(-(queries @ mat.T), axis=1, kind="stable")[:, :k]
    return [[keys[j] for j in row] for row in order]


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return Corpus()


# -- the backends ------------------------------------------------------------------------------------------------

class InProcessReplica:
    """A shard replica (`ShardSearcher`, the deployment's own class) called in this process, behind the call shape
    of a Serve handle (`handle.search.remote(...).result()`): the shards' searching, the probe sent to them and the
    merge are the sharded backend's own; Serve's transport is exercised over HTTP by test_sharded.py (a Serve
    deployment started inside pytest on this 2-core machine did not come up within its 300 s deadline)."""

    def __init__(self, replica: Any) -> None:
        self.replica = replica

    def __getattr__(self, method: str) -> SimpleNamespace:  # handle.search.remote(...), handle.vectors_of.remote(...)
        call = getattr(self.replica, method)
        return SimpleNamespace(remote=lambda *a, **kw: SimpleNamespace(result=lambda timeout_s=None: call(*a, **kw)))


def open_sharded(folder: Path) -> Any:
    from service.engine.sharded import ShardedIndex, ShardSearcher
    from service.settings import Settings

    manifest = Manifest.load(folder)
    handles = [InProcessReplica(ShardSearcher.func_or_class(str(folder / s.file), manifest.index.params.nprobe))
               for s in manifest.index.shards]
    backend = SimpleNamespace(settings=Settings(), retire=lambda apps: None, put=lambda ids: ids)  # no object store
    from indexer.runtime.store import Store

    lexical = open_lexical(folder, manifest.lexical, mmap=True) if manifest.lexical is not None else None
    return ShardedIndex(backend, manifest, [], handles, Store(folder / STORE), N,  # type: ignore[arg-type]
                        manifest.index.params.nprobe, lexical)


def open_served(backend: str, kind: str, corpus: Corpus, tmp: Path) -> Any:
    if backend == "local":
        return LiveIndex(IndexVersion(corpus.version(tmp / f"v-{kind}", kind)))
    return open_sharded(corpus.sharded_version(tmp / f"v-{kind}-sharded"))


CASES = [("local", k) for k in KINDS] + [("sharded", "ivf")]


@pytest.fixture(params=CASES, ids=[f"{b}-{k}" for b, k in CASES])
def served(request: pytest.FixtureRequest, corpus: Corpus, tmp_path: Path) -> Iterator[tuple[str, str, Any]]:
    backend, kind = request.param
    if backend == "sharded":
        pytest.importorskip("ray")
    index = open_served(backend, kind, corpus, tmp_path)
    yield backend, kind, index
    index.close()


# -- the contract ------------------------------------------------------------------------------------------------

def answers(index: Any, queries: np.ndarray, k: int, flt: dict | None = None,
            search_params: dict[str, int] | None = None) -> list[list[Any]]:
    scores, ids = index.search(queries, k, None if flt is None else index.match(flt), search_params=search_params)
    return index.hits(scores, ids)


def test_answers_equal_brute_force_with_the_corpus_id_types(served: tuple[str, str, Any], corpus: Corpus) -> None:
    _, kind, index = served
    queries = unit(25, seed=1)
    assert index.ntotal == N and index.manifest.index.kind == kind
    hits = answers(index, queries, K)
    want = brute_force(corpus.served(), queries, K)
    for row, expected in zip(hits, want, strict=True):
        assert [h.ext_id for h in row] == expected
        for h in row:  # an integer id stays an integer, a string id a string, with its text and metadata
            assert type(h.ext_id) is type(corpus.ext[corpus.ext.index(h.ext_id)])
            assert h.text == f"text of {h.ext_id}" and h.metadata == corpus.meta[h.ext_id]
        assert all(a.score >= b.score - 1e-6 for a, b in zip(row, row[1:], strict=False))


def test_k_past_the_documents_returns_every_document_once(served: tuple[str, str, Any]) -> None:
    _, _, index = served
    hits = answers(index, unit(3, seed=2), N + 50)
    for row in hits:
        assert len(row) == N and len({h.ext_id for h in row}) == N


@pytest.mark.parametrize("flt", FILTERS, ids=["1pct-ish", "half", "range", "in"])
def test_filters_answer_among_the_matching_documents_only(served: tuple[str, str, Any], corpus: Corpus,
                                                          flt: dict) -> None:
    _, _, index = served
    node = parse_filter(flt, {"n": "int", "tag": "str"})
    matching = {e: v for e, v in corpus.served().items() if matches(node, corpus.meta[e])}
    queries = unit(15, seed=3)
    hits = answers(index, queries, K, flt)
    want = brute_force(matching, queries, min(K, len(matching)))
    for row, expected in zip(hits, want, strict=True):
        assert [h.ext_id for h in row] == expected
        assert all(matches(node, h.metadata) for h in row)


def test_a_filter_matching_nothing_is_an_empty_answer(served: tuple[str, str, Any]) -> None:
    _, _, index = served
    hits = answers(index, unit(4, seed=4), K, {"n": {"gt": 10_000}})
    assert hits == [[], [], [], []]


def test_search_parameters_are_the_kinds_own(served: tuple[str, str, Any], corpus: Corpus) -> None:
    """nprobe for ivf, ef_search for hnsw (an answer at the given setting), none for flat; anything else is an
    `IndexParamError` naming what the kind takes (the API's 422)."""
    _, kind, index = served
    queries = unit(5, seed=6)
    own = {"ivf": {"nprobe": NLIST}, "hnsw": {"ef_search": 2 * N}}.get(kind, {})  # a kind without a knob: none
    want = brute_force(corpus.served(), queries, K)
    assert [[h.ext_id for h in row] for row in answers(index, queries, K, search_params=own)] == want
    if kind == "ivf":  # one list: fewer neighbours found than with all eight, and the answer still well-formed
        one = answers(index, queries, K, search_params={"nprobe": 1})
        assert sum(len(set(h.ext_id for h in r) & set(w)) for r, w in zip(one, want, strict=True)) < 5 * K
    for other in ({"nprobe": 4}, {"ef_search": 32}):
        if set(other) <= set(own):
            continue
        with pytest.raises(IndexParamError, match=f"'{next(iter(other))}' is not a search parameter of this "
                                                  f"version's {kind} index"):
            answers(index, queries, K, search_params=other)


def check_doc_rows(index: Any, live: np.ndarray, gone: list[int]) -> None:
    """`doc_rows` (what collapses a version of passages' rows to documents): on whole documents every live row is
    a document of its own, written ones included; deleted rows and padding have none."""
    rows = index.doc_rows(live)
    assert (rows >= 0).all() and len(set(rows.tolist())) == len(live)
    assert index.doc_rows(np.array([-1, *gone], np.int64)).tolist() == [-1] * (1 + len(gone))


def test_deletes_and_replacements_through_the_write_overlay(served: tuple[str, str, Any], corpus: Corpus) -> None:
    """Local: deleted and replaced base documents never answer (skipped inside the index's own search, HNSW
    included), written ones do, filtered or not. Sharded: its version takes writes under its own overlay
    (`LiveShards`, its shards applying their share of the log: tests/service/engine/test_sharded_writes.py)."""
    backend, kind, index = served
    if backend == "sharded":
        live = index.live()
        assert isinstance(live, LiveShards) and live.base is index
        Writes.check(SimpleNamespace(index=live, version="v"), [1], False)  # type: ignore[arg-type]
        fids = np.array(sorted(index.store.ids_of(list(corpus.served())).values()), np.int64)
        check_doc_rows(index, fids, [])
        check_doc_rows(live, fids, [])
        return
    new = unit(6, seed=7)
    entries = [LogEntry(1, UPSERT, "w-new", "written w-new", {"n": 5, "tag": "even"}, new[0], "sha"),
               LogEntry(2, UPSERT, 20, "written 20", {"n": 2, "tag": "even"}, new[1], "sha"),  # replaces int id
               LogEntry(3, UPSERT, "doc-3", "written doc-3", {"n": 3, "tag": "odd"}, new[2], "sha"),
               LogEntry(4, DELETE, 0, None, {}, None, "sha"),
               LogEntry(5, DELETE, "doc-1", None, {}, None, "sha"),
               LogEntry(6, DELETE, "doc-7", None, {}, None, "sha")]
    index.overlay.apply(entries)
    served_now, meta = corpus.served(), dict(corpus.meta)
    for e in entries:
        if e.op == UPSERT:
            served_now[e.ext_id], meta[e.ext_id] = e.vector, e.metadata
        else:
            served_now.pop(e.ext_id)
    # the base documents nearest to the queries are the deleted ones: without the selector they would answer
    queries = np.concatenate([new[:3], corpus.vectors[[0, 1, 7, 2, 3]]])
    hits = answers(index, queries, K)
    assert [[h.ext_id for h in row] for row in hits] == brute_force(served_now, queries, K)
    assert not {0, "doc-1", "doc-7"} & {h.ext_id for row in hits for h in row}
    assert hits[1][0].text == "written 20"  # the replacement, not the base text
    check_doc_rows(index, np.unique([h.faiss_id for row in hits for h in row]),
                   list(index.base.store.ids_of([0, "doc-1", "doc-7"]).values()))
    flt = {"n": {"lt": 12}}
    node = parse_filter(flt, {"n": "int", "tag": "str"})
    matching = {e: v for e, v in served_now.items() if matches(node, meta[e])}
    got = answers(index, queries, K, flt)
    assert [[h.ext_id for h in row] for row in got] == brute_force(matching, queries, K)


def test_documents_read_back_with_the_vectors_the_index_holds(served: tuple[str, str, Any], corpus: Corpus) -> None:
    """Reading documents back (`indexer.runtime.reading`) on every kind: by id with the vector the index holds
    (`AnnIndex.vectors_of`; sharded: each asked of its shard's replica, `ShardedIndex.vectors_of`), counted under a
    filter, paged in id order."""
    backend, kind, index = served
    docs = Documents(index)
    ids = [0, "doc-1", 3980, "doc-399", "absent"]
    assert docs.count() == N and docs.count({"tag": "odd"}) == N // 2
    assert [d.id for d in docs.scroll(3, None, {"tag": "odd"}).documents] == ["doc-1", "doc-101", "doc-103"]
    got = docs.get(ids, with_vector=True)
    assert [d and (d.id, d.text, d.metadata) for d in got] == [
        (e, corpus.texts[e], corpus.meta[e]) for e in ids[:4]] + [None]
    want = corpus.served()
    for d in got[:4]:
        np.testing.assert_allclose(d.vector, want[d.id], atol=1e-6)  # type: ignore[union-attr]


@pytest.mark.parametrize("codec,atol", [("SQfp16", 1e-3), ("SQ8", 2e-2)])
def test_ivf_vectors_come_back_as_their_codes_decode(codec: str, atol: float, corpus: Corpus) -> None:
    fids = np.asarray(corpus.fids, dtype=np.int64)
    index, _, _ = build_index(IvfParams(nlist=NLIST, nlist_requested=NLIST, codec=codec, nprobe=NLIST),
                              corpus.vectors, fids)
    got = index.vectors_of(fids[::-7])
    np.testing.assert_allclose(got, corpus.vectors[::-7], atol=atol)
    with pytest.raises(KeyError, match="not in this index"):
        index.vectors_of(np.array([fids[0], 123456789], dtype=np.int64))


def test_save_load_round_trip_and_remove(corpus: Corpus, tmp_path: Path) -> None:
    """Each kind written and read back answers the same; `remove` (what `indexer add` replacing documents and
    `indexer compact` folding deletes call) takes the ids out — HNSW by rebuilding its graph."""
    for kind in KINDS:
        round_trip_and_remove(kind, corpus, tmp_path)


def round_trip_and_remove(kind: str, corpus: Corpus, tmp_path: Path) -> None:
    fids = np.asarray(corpus.fids, dtype=np.int64)
    queries = unit(10, seed=8)
    index, _, _ = build_index(params_for(kind), corpus.vectors, fids)
    assert index.kind == kind and index.ntotal == N and index.dim == DIM
    index.save(tmp_path / f"{kind}.faiss")
    back = read_ann([tmp_path / f"{kind}.faiss"], index.params)
    assert back.kind == kind and back.params == index.params
    s1, i1 = index.search(queries, K)
    s2, i2 = back.search(queries, K)
    assert np.array_equal(i1, i2) and np.allclose(s1, s2)
    exact_s, exact_i = back.exact_search(queries, K)
    assert np.array_equal(exact_i, i1), kind  # exact settings at this size
    ids, vecs = back.stored_vectors()
    assert sorted(ids.tolist()) == sorted(fids.tolist()) and vecs.shape == (N, DIM)
    gone = fids[:50]
    assert back.remove(gone) == 50 and back.ntotal == N - 50
    _, after = back.search(queries, N)
    assert not np.isin(after, gone).any() and (after >= 0).sum(axis=1).max() == N - 50
    back.add(corpus.vectors[:50], gone)  # and they can come back
    assert back.ntotal == N
    assert np.array_equal(back.search(queries, K)[1], i1)


def test_a_manifest_of_the_wrong_kind_for_its_file_is_a_load_error(corpus: Corpus, tmp_path: Path) -> None:
    from indexer.runtime.version import IndexLoadError

    folder = corpus.version(tmp_path / "v", "hnsw")
    manifest = Manifest.load(folder)
    manifest.index = IndexInfo.for_params(FlatParams(), N)
    manifest.save(folder)
    with pytest.raises(IndexLoadError, match="the manifest says flat but the file holds"):
        IndexVersion(folder)


def test_sharded_filter_ids_are_sent_once_and_each_shard_keeps_its_share(corpus: Corpus, tmp_path: Path) -> None:
    """A repeated filter: the API process puts its ids into the object store once (one `put` per filter key), each
    shard prepares its share once and keeps it by the key, and a later search under that key needs no ids at all
    (the shard's share answers alone): what makes a filtered search on shards cost no 800 KB per request."""
    pytest.importorskip("ray")
    from indexer.runtime.version import FilterCache

    index = open_sharded(corpus.sharded_version(tmp_path / "v-sharded"))
    try:
        puts: list[int] = []
        index.backend.put = lambda ids: puts.append(len(ids)) or ids
        queries = unit(6, seed=9)
        flt = FILTERS[1]
        first = answers(index, queries, K, flt)
        assert answers(index, queries, K, flt) == first and answers(index, queries, K, FILTERS[2]) != first
        assert len(puts) == 2  # one per distinct filter, not per search
        key = FilterCache.key(flt)
        replicas = [h.replica for h in index.handles]
        shares = [r.filters.get(key) for r in replicas]
        assert all(s is not None for s in shares)
        assert sum(len(s.prepared.ids) for s in shares) == len(index.match(flt).ids)  # each its own share
        probe = index.nprobe
        alone = [r.search(queries, K, None, probe, filter_key=key, ids_ref=[None]) for r in replicas]  # no ids sent
        scores, ids = index.search(queries, K, index.match(flt))
        merged = np.concatenate([a[1] for a in alone], axis=1)
        for row, got in zip(ids, merged, strict=True):
            assert set(row[row >= 0].tolist()) <= set(got[got >= 0].tolist())
        # the ids held in the object store are bounded like the filter cache (here to one filter's): an evicted
        # filter's ids are put again when it comes back, and it answers the same
        index.filters.max_bytes = 1
        answers(index, queries, K, FILTERS[3])
        assert answers(index, queries, K, flt) == first and len(puts) == 4
    finally:
        index.close()


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_sharded_backend_refuses_kinds_other_than_ivf(kind: str, corpus: Corpus, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    from service.engine.sharded import RayBackend
    from service.settings import Settings

    folder = corpus.version(tmp_path / f"v-{kind}", kind)
    with pytest.raises(Mismatch, match=f"holds a {kind} index: the sharded backend serves IVF shards"):
        RayBackend(Settings()).open_index(folder)  # refused before anything is deployed


# -- the lexical retriever beside them ---------------------------------------------------------------------------

VOCABULARY = ["python", "rice", "java", "cats", "learn", "cook", "music", "river", "garden", "travel", "guitar",
              "winter", "market", "engine", "poetry", "coffee"]


class LexicalCorpus(Corpus):
    """The same documents (ids, metadata, vectors) with texts of 2 to 6 words of a small vocabulary: many
    documents share each term, with different term frequencies and lengths."""

    def __init__(self) -> None:
        super().__init__()
        rng = np.random.default_rng(11)
        self.texts = {e: " ".join(rng.choice(VOCABULARY, size=int(rng.integers(2, 7)))) for e in self.ext}

    def lexical_version(self, folder: Path, engine: str = "bm25s", *, sharded: bool = False) -> Path:
        """A flat version (or a 2-shard IVF one) with its lexical index of `engine`, built as `indexer build` does
        (from the store's texts)."""
        if sharded:
            self.sharded_version(folder)
        else:
            self.version(folder, "flat")
        manifest = Manifest.load(folder)
        manifest.lexical = build_lexical(folder, zip(self.fids, (self.texts[e] for e in self.ext), strict=True),
                                  lexical_info(engine=engine))
        manifest.save(folder)
        return folder


def lexical_of(index: Any) -> LexicalIndex:
    """The BM25 index a served version searches (the overlay's base's, or the sharded version's own)."""
    return getattr(index, "base", index).lexical


LEXICAL_CASES = [("local", e) for e in ENGINES] + [("sharded", e) for e in ENGINES]


@pytest.fixture(params=LEXICAL_CASES, ids=[f"{b}-{e}" for b, e in LEXICAL_CASES])
def lexical_served(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[LexicalCorpus, Any]]:
    """The lexical side served by each backend: the local one (`LiveIndex`), and the sharded one, whose shards hold
    the vectors and whose BM25 index is read in the API process."""
    backend, engine = request.param
    corpus = LexicalCorpus()
    if backend == "sharded":
        pytest.importorskip("ray")
        index = open_sharded(corpus.lexical_version(tmp_path / "v-lexical", engine, sharded=True))
    else:
        index = LiveIndex(IndexVersion(corpus.lexical_version(tmp_path / "v-lexical", engine)))
    assert lexical_of(index) is not None and lexical_of(index).info.engine == engine
    yield corpus, index
    index.close()


@pytest.fixture(params=list(ENGINES))
def local_lexical_served(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[LexicalCorpus, LiveIndex]]:
    """The local backend's lexical side only: the write overlay (the sharded backend takes no writes)."""
    corpus = LexicalCorpus()
    index = LiveIndex(IndexVersion(corpus.lexical_version(tmp_path / "v-lexical", request.param)))
    yield corpus, index
    index.close()


LEXICAL_QUERIES = ["python java", "cook rice rice", "winter river travel guitar", "coffee", "poetry market engine"]


def lexical_answers(index: Any, queries: list[str], k: int, flt: dict | None = None) -> list[list[Any]]:
    found = index.lexical_search(queries, k, None if flt is None else index.match(flt))
    width = max(1, max(len(ids) for _, ids in found))
    scores = np.full((len(found), width), -np.inf, dtype=np.float32)
    ids = np.full((len(found), width), -1, dtype=np.int64)
    for r, (s, i) in enumerate(found):
        scores[r, : len(i)], ids[r, : len(i)] = s, i
    return index.hits(scores, ids)


def assert_bm25_top_k(row: list[Any], ref: dict[int | str, float], k: int) -> None:
    """`row` is a best-k by Lucene's BM25: each hit's score is its own, and the scores are the k best (ties may
    come in any order, so the ids are compared through their scores)."""
    assert len(row) == min(k, len(ref))
    assert [h.score for h in row] == pytest.approx(sorted(ref.values(), reverse=True)[:k], rel=1e-5)
    for h in row:
        assert h.score == pytest.approx(ref[h.ext_id], rel=1e-5)


def by_ext(corpus: Corpus, query: str, texts: dict[int | str, str], lex: LexicalIndex) -> dict[int | str, float]:
    """Lucene BM25 by hand over `texts` at the index's k1/b and on its engine's scale, by external id."""
    fid_of = dict(zip(corpus.ext, corpus.fids, strict=True))
    ext_of = {f: e for e, f in fid_of.items()}
    return {ext_of[f]: s * lex.SCORE_SCALE for f, s in reference(
        query, [(fid_of[e], t) for e, t in texts.items()], lex.info.k1, lex.info.b, lex.analyzer).items()}


def test_lexical_answers_equal_bm25_with_the_corpus_id_types(lexical_served: tuple[LexicalCorpus, Any]
                                                             ) -> None:
    corpus, index = lexical_served
    hits = lexical_answers(index, LEXICAL_QUERIES, K)
    for query, row in zip(LEXICAL_QUERIES, hits, strict=True):
        assert_bm25_top_k(row, by_ext(corpus, query, corpus.texts, lexical_of(index)), K)
        for h in row:  # an integer id stays an integer, a string id a string, with its text and metadata
            assert type(h.ext_id) is type(corpus.ext[corpus.ext.index(h.ext_id)])
            assert h.text == corpus.texts[h.ext_id] and h.metadata == corpus.meta[h.ext_id]
    assert {type(h.ext_id) for row in hits for h in row} == {int, str}


@pytest.mark.parametrize("flt", FILTERS, ids=["1pct-ish", "half", "range", "in"])
def test_lexical_filters_answer_among_the_matching_documents_only(
        lexical_served: tuple[LexicalCorpus, Any], flt: dict) -> None:
    """Exact under any filter: the matching documents' best k by the whole corpus' statistics."""
    corpus, index = lexical_served
    node = parse_filter(flt, {"n": "int", "tag": "str"})
    for query, row in zip(LEXICAL_QUERIES, lexical_answers(index, LEXICAL_QUERIES, K, flt), strict=True):
        ref = by_ext(corpus, query, corpus.texts, lexical_of(index))
        assert_bm25_top_k(row, {e: s for e, s in ref.items() if matches(node, corpus.meta[e])}, K)
        assert all(matches(node, h.metadata) for h in row)


def test_lexical_empty_answers(lexical_served: tuple[LexicalCorpus, Any]) -> None:
    _, index = lexical_served
    assert lexical_answers(index, LEXICAL_QUERIES[:2], K, {"n": {"gt": 10_000}}) == [[], []]
    assert lexical_answers(index, ["zebra quantum", "the of and"], K) == [[], []]  # no shared term; stopwords


def test_a_lexical_filter_used_again_is_prepared_off_the_request_with_the_same_answers(
        lexical_served: tuple[LexicalCorpus, Any]) -> None:
    """A filter used again, its rows found by a first lexical search: both backends prepare its rows once, off the
    request (`prepare_rows`: on PISA its own postings, for a filter of at most `POSTINGS_SHARE` of the documents),
    and answer as before."""
    import time

    from indexer.runtime import lexical_pisa

    _, index = lexical_served
    flt = FILTERS[0]  # 12 of 400 documents
    first = lexical_answers(index, LEXICAL_QUERIES, K, flt)  # finds its rows
    again = lexical_answers(index, LEXICAL_QUERIES, K, flt)  # used again: its rows prepared later
    for _ in range(500):
        if getattr(match := index.match(flt), "base", match).rows_tried:
            break
        time.sleep(0.01)
    base = getattr(match, "base", match)
    assert base.rows_tried
    lexical = lexical_of(index)
    assert lexical.prepared(base._rows[0]) == (lexical.info.engine == "pisa")
    assert len(base._rows[0]) <= lexical_pisa.POSTINGS_SHARE * lexical.ntotal
    for got in (again, lexical_answers(index, LEXICAL_QUERIES, K, flt)):
        assert [[(h.ext_id, h.score) for h in row] for row in got] == [[(h.ext_id, h.score) for h in row]
                                                                       for row in first]


def test_lexical_deletes_and_replacements_through_the_write_overlay(
        local_lexical_served: tuple[LexicalCorpus, LiveIndex]) -> None:
    """Deleted and replaced base documents never answer by their old text; written ones answer by theirs, scored
    with the base's statistics, filtered or not."""
    corpus, index = local_lexical_served
    vec = unit(3, seed=12)
    deleted = [corpus.ext[0], corpus.ext[1], corpus.ext[7]]  # 0, "doc-1", "doc-7"
    entries = [LogEntry(1, UPSERT, "w-new", "zebra zebra python", {"n": 5, "tag": "even"}, vec[0], "sha"),
               LogEntry(2, UPSERT, 20, "quantum coffee", {"n": 2, "tag": "even"}, vec[1], "sha"),  # replaces an int id
               LogEntry(3, UPSERT, "doc-3", "zebra garden", {"n": 3, "tag": "odd"}, vec[2], "sha")]
    entries += [LogEntry(4 + i, DELETE, e, None, {}, None, "sha") for i, e in enumerate(deleted)]
    index.overlay.apply(entries)
    # the old texts of the deleted and replaced documents, searched to the full depth: the deleted ones never
    # answer, the replaced ones only as their written text
    new_text = {20: "quantum coffee", "doc-3": "zebra garden"}
    old = [corpus.texts[e] for e in [*deleted, 20, "doc-3"]]
    found = [h for row in lexical_answers(index, old, N) for h in row]
    assert found and not set(deleted) & {h.ext_id for h in found}
    assert all(h.text == new_text[h.ext_id] for h in found if h.ext_id in new_text)
    zebra = lexical_answers(index, ["zebra"], K)[0]
    assert [h.ext_id for h in zebra] == ["w-new", "doc-3"]  # two zebras in a shorter text beat one
    assert zebra[0].text == "zebra zebra python" and zebra[0].metadata == {"n": 5, "tag": "even"}
    quantum = lexical_answers(index, ["quantum"], K)[0]
    assert [(h.ext_id, h.text) for h in quantum] == [(20, "quantum coffee")]  # the replacement, not the base text
    assert [h.ext_id for h in lexical_answers(index, ["zebra"], K, {"tag": "odd"})[0]] == ["doc-3"]
    assert lexical_answers(index, ["zebra"], K, {"n": {"gt": 100}}) == [[]]
