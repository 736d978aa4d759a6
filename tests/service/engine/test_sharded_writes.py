"""Writes on the sharded backend, in this process: the API's write path (`Writes.attach` / `commit`: the durable log,
the overlay) over a 2-shard version whose replicas (`ShardSearcher`, the deployment's own class, behind a handle's
call shape) apply their share of the log (`indexer.runtime.shard_writes`). After the same writes, the sharded answers
equal a single-node collection's on the same base (IVF probing every list: exact), ids and scores, filtered or not;
every write goes to one shard by `id % N` of its FAISS id; every replica of a shard answers with every acknowledged
write, one started after them included; and a restart (a new API over the same root) replays them.

Serve's transport and a real `python -m service sharded` are test_sharded.py's (the session's local Ray)."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

pytest.importorskip("ray")

from indexer.runtime.faiss.files import read_index  # noqa: E402
from indexer.runtime.ids import shard_of  # noqa: E402
from indexer.runtime.layout import IndexRoot  # noqa: E402
from indexer.runtime.live_index import LiveIndex  # noqa: E402
from indexer.runtime.manifest import Manifest  # noqa: E402
from indexer.runtime.reading import Documents  # noqa: E402
from indexer.runtime.shard_writes import LiveShards  # noqa: E402
from indexer.runtime.store import STORE, Store  # noqa: E402
from indexer.runtime.version import IndexVersion  # noqa: E402
from indexer.runtime.writelog import Delete, Upsert, log_path  # noqa: E402
from indexer.runtime.writes import Writes  # noqa: E402
from service.engine.sharded import ShardedIndex, ShardSearcher  # noqa: E402
from tests.service.engine.test_index_contract import Corpus, unit  # noqa: E402

K = 10
SHA = "sha"  # the corpus' manifests' encoder
FILTERS: list[dict[str, Any]] = [{"tag": "even"}, {"n": {"lt": 40}}, {"tag": "written"}]


class Replicas:
    """A shard's replicas behind one handle: each call goes to the next replica, as Serve spreads calls."""

    def __init__(self, replicas: list[Any]) -> None:
        self.replicas, self.calls = replicas, 0

    def _call(self, method: str, *a: Any, **kw: Any) -> SimpleNamespace:
        replica = self.replicas[self.calls % len(self.replicas)]
        self.calls += 1
        return SimpleNamespace(result=lambda timeout_s=None: getattr(replica, method)(*a, **kw))

    def __getattr__(self, method: str) -> SimpleNamespace:  # handle.search.remote(...), handle.vectors_of.remote(...)
        return SimpleNamespace(remote=lambda *a, **kw: self._call(method, *a, **kw))


def replica(folder: Path, shard: int, root: Path) -> Any:
    manifest = Manifest.load(folder)
    return ShardSearcher.func_or_class(str(folder / manifest.index.shards[shard].file), manifest.index.params.nprobe,
                                       1, str(log_path(root)))


def open_sharded(root: Path, replicas: int = 1) -> ShardedIndex:
    folder = IndexRoot(root).current_dir()
    manifest = Manifest.load(folder)
    handles = [Replicas([replica(folder, s, root) for _ in range(replicas)]) for s in range(len(manifest.index.shards))]
    backend = SimpleNamespace(settings=SimpleNamespace(shard_timeout_s=10.0), retire=lambda apps: None,
                              put=lambda ids: ids)  # no object store in this process
    return ShardedIndex(backend, manifest, [], handles, Store(folder / STORE),  # type: ignore[arg-type]
                        manifest.index.ntotal, manifest.index.params.nprobe, None)


def served(index: Any, version: str) -> SimpleNamespace:
    """What the write path needs of a served searcher (`writes.Served`): the encoder's identity, the index."""
    return SimpleNamespace(index=index, version=version, manifest=index.manifest,
                           encoder=SimpleNamespace(meta=SimpleNamespace(onnx_sha256=SHA)))


def make_roots(tmp: Path, corpus: Corpus) -> tuple[Path, Path]:
    """A sharded root (2 shards) and a single-node root (one IVF index) over the same documents and quantizer
    training, each with one version made current."""
    sharded, single = tmp / "sharded", tmp / "single"
    for root in (sharded, single):
        (root / "versions").mkdir(parents=True)
    corpus.sharded_version(sharded / "versions" / "v1")
    IndexRoot(sharded).set_current("v1")
    corpus.version(single / "versions" / "v1", "ivf")
    IndexRoot(single).set_current("v1")
    return sharded, single


def attach(writes: Writes, searcher: SimpleNamespace) -> SimpleNamespace:
    writes.attach(searcher)
    return searcher


def batches(corpus: Corpus) -> list[list[Upsert | Delete]]:
    """Upserts of new integer and string ids, replacements of base documents of both kinds, deletes of base and of
    written documents, a document written, deleted and written again."""
    new = unit(40, seed=11)
    meta = lambda i: {"n": i, "tag": "written"}  # noqa: E731
    first = [Upsert(10_000 + i, f"new {i}", meta(i), new[i], SHA) for i in range(10)]
    first += [Upsert(f"s-{i}", f"string {i}", meta(i), new[10 + i], SHA) for i in range(10)]
    second = [Upsert(corpus.ext[i], f"replaced {i}", meta(i), new[20 + i], SHA) for i in range(0, 10, 1)]
    second += [Delete(corpus.ext[i]) for i in range(10, 30)] + [Delete(10_003), Delete("s-4")]
    third = [Upsert("s-4", "again", meta(4), new[30], SHA), Delete("absent")]
    return [first, second, third]


def answers(index: Any, queries: np.ndarray, flt: dict | None = None) -> list[list[tuple[Any, float]]]:
    scores, ids = index.search(queries, K, None if flt is None else index.match(flt))
    return [[(h.ext_id, h.score) for h in row] for row in index.hits(scores, ids)]


def assert_same(got: list[list[tuple[Any, float]]], want: list[list[tuple[Any, float]]]) -> None:
    assert [[i for i, _ in row] for row in got] == [[i for i, _ in row] for row in want]
    assert np.allclose([s for row in got for _, s in row], [s for row in want for _, s in row], atol=1e-5)


def documents(docs: list[Any]) -> list[Any]:
    """Documents as comparable values: id, text, metadata, passages, and the vector's bytes."""
    def vec(v: np.ndarray | None) -> bytes | None:
        return None if v is None else np.asarray(v, dtype=np.float32).tobytes()
    return [None if d is None else (d.id, d.text, d.metadata, vec(d.vector), None if d.passages is None else
                                    [(p.index, p.start, p.end, p.text, vec(p.vector)) for p in d.passages])
            for d in docs]


def pages(docs: Documents, flt: dict | None, limit: int = 37) -> list[list[Any]]:
    """A whole scroll, page by page through its cursors, vectors included."""
    out, cursor = [], None
    while True:
        page = docs.scroll(limit, cursor, flt, with_vector=True)
        out.append(documents(page.documents))
        if (cursor := page.next_cursor) is None:
            return out


def same_reads(sharded: Any, single: Any, corpus: Corpus) -> Documents:
    """Every read of documents answers on the sharded index as on the single node's: get of one id and of many
    (written, replaced, deleted, never written), with and without vectors (a base document's read from its shard,
    a written one from the API's overlay), counts and whole scrolls page by page, unfiltered and filtered."""
    mine, theirs = Documents(sharded), Documents(single)
    ids = [10_000, 10_003, "s-4", "s-0", *corpus.ext[:60:7], corpus.ext[10], corpus.ext[51], "absent"]
    for with_vector in (False, True):
        assert documents(mine.get(ids, with_vector=with_vector)) == documents(theirs.get(ids,
                                                                                        with_vector=with_vector))
        for one in ids:
            assert documents(mine.get([one], with_vector=with_vector)) == \
                   documents(theirs.get([one], with_vector=with_vector))
    got = [d for d in mine.get(ids, with_vector=True) if d is not None]
    assert got and all(d.vector is not None and d.vector.shape == (sharded.dim,) for d in got)
    for flt in (None, *FILTERS):
        assert mine.count(flt) == theirs.count(flt)
        assert pages(mine, flt) == pages(theirs, flt)
    return mine


def test_sharded_writes_answer_like_a_single_node_collection(tmp_path: Path) -> None:
    corpus = Corpus()
    sharded_root, single_root = make_roots(tmp_path, corpus)
    sw, lw = Writes(sharded_root), Writes(single_root)
    sharded = attach(sw, served(open_sharded(sharded_root, replicas=2), "v1"))
    single = attach(lw, served(IndexVersion(IndexRoot(single_root).current_dir()), "v1"))
    assert isinstance(sharded.index, LiveShards) and isinstance(single.index, LiveIndex)
    queries = np.concatenate([unit(20, seed=12), corpus.vectors[:10], unit(40, seed=11)[:25]])
    try:
        for ops in batches(corpus):
            got, want = sw.commit(lambda: sharded, ops), lw.commit(lambda: single, ops)
            assert (got.seq, got.size, got.applied) == (want.seq, want.size, want.applied)
            for flt in (None, *FILTERS):  # at once: the next search of every replica holds the write
                for _ in range(2):  # both replicas of each shard
                    assert_same(answers(sharded.index, queries, flt), answers(single.index, queries, flt))
        hits = answers(sharded.index, queries)
        assert {10_000, "s-0", "s-4"} <= {i for row in hits for i, _ in row}
        assert not {corpus.ext[10], 10_003} & {i for row in hits for i, _ in row}
        mine = same_reads(sharded.index, single.index, corpus)
        assert mine.get(["s-4"])[0].text == "again"  # type: ignore[union-attr]
        assert mine.count() == 400 + 20 - 20 - 2 + 1 == sharded.index.ntotal
    finally:
        sharded.index.close()
        single.index.close()
        sw.close()
        lw.close()


def test_each_write_lands_in_one_shard_by_its_faiss_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`id % N` of the FAISS id (an integer id's own, a string's assigned from 2^62 up), the rule the split uses:
    each replica holds exactly its shard's written rows and tombstones, and reads whole (texts, vectors) only the
    log entries of its shard: each entry's bytes are read once over the shards, not once per shard."""
    from indexer.runtime.writelog import WriteLog

    read_whole: list[list[int]] = []
    entries_at = WriteLog.entries_at
    monkeypatch.setattr(WriteLog, "entries_at", lambda self, seqs: read_whole.append(list(seqs)) or
                        entries_at(self, seqs))
    corpus = Corpus()
    root, _ = make_roots(tmp_path, corpus)
    writes = Writes(root)
    searcher = attach(writes, served(open_sharded(root), "v1"))
    try:
        ops = batches(corpus)[0] + [Delete(corpus.ext[i]) for i in range(10, 20)]
        writes.commit(lambda: searcher, ops)
        answers(searcher.index, unit(2, seed=1))  # each replica catches up with the search
        assert sorted(s for seqs in read_whole for s in seqs) == list(range(1, len(ops) + 1))
        fid_of = dict(zip([op.ext_id for op in ops], searcher.index.overlay.resolve([op.ext_id for op in ops]),
                          strict=True))
        assert [{shard_of(fid_of[ops[s - 1].ext_id], 2) for s in seqs} for seqs in read_whole] == [{0}, {1}]
        held = {}
        for s, handle in enumerate(searcher.index.base.handles):
            live = handle.replicas[0].writes.live
            snap = live.overlay.snapshot()
            held[s] = (set(snap.fids[snap.fids >= 0].tolist()), set(snap.exclusion.ids.tolist()))
        api = searcher.index.overlay
        fids = dict(zip([op.ext_id for op in ops], api.resolve([op.ext_id for op in ops]), strict=True))
        for s in (0, 1):
            written = {fids[op.ext_id] for op in ops if isinstance(op, Upsert)}
            assert held[s][0] == {f for f in written if shard_of(f, 2) == s} and held[s][0]
            assert held[s][1] == {corpus.fids[i] for i in range(10, 20) if corpus.fids[i] % 2 == s}
        for s in (0, 1):  # the base shard files are untouched: the writes are the replicas' overlay
            index = read_index(str(IndexRoot(root).current_dir() / f"shards/shard-0000{s}.faiss"))
            assert index.ntotal == sum(1 for f in corpus.fids if f % 2 == s)
    finally:
        searcher.index.close()
        writes.close()


def test_a_restarted_api_and_new_replicas_serve_every_acknowledged_write(tmp_path: Path) -> None:
    """Acknowledged writes are in the log before the commit returns: a new API process (a new `Writes` over the
    root, new replicas: a restart of the sharded service, or a replica Serve started again) serves them all."""
    corpus = Corpus()
    root, single_root = make_roots(tmp_path, corpus)
    writes = Writes(root)
    first = attach(writes, served(open_sharded(root), "v1"))
    queries = unit(30, seed=21)
    for ops in batches(corpus):
        writes.commit(lambda: first, ops)
    before = answers(first.index, queries)
    first.index.close()
    writes.close()
    # the single node given the same writes answers the same (its log: a copy of the sharded root's)
    shutil.copytree(log_path(root).parent, log_path(single_root).parent)  # the log and its WAL
    again, lw = Writes(root), Writes(single_root)
    restarted = attach(again, served(open_sharded(root, replicas=2), "v1"))
    single = attach(lw, served(IndexVersion(IndexRoot(single_root).current_dir()), "v1"))
    try:
        assert restarted.index.overlay.applied_seq == sum(len(b) for b in batches(corpus))
        assert_same(answers(restarted.index, queries), before)
        assert_same(answers(restarted.index, queries), answers(single.index, queries))
        assert_same(answers(restarted.index, queries, {"tag": "written"}), answers(single.index, queries,
                                                                                     {"tag": "written"}))
    finally:
        restarted.index.close()
        single.index.close()
        again.close()
        lw.close()


def test_a_version_whose_encoder_differs_from_pending_writes_is_refused(tmp_path: Path) -> None:
    """The shards read logged vectors as they are: a write logged by another encoder than the version's cannot be
    applied there, so the version is refused at attach (the swap's refusal), naming the entry."""
    from indexer.runtime.writelog import WriteLog, WriteLogError
    from indexer.runtime.writes import WritesUnavailable

    corpus = Corpus()
    root, _ = make_roots(tmp_path, corpus)
    writes = Writes(root)
    searcher = attach(writes, served(open_sharded(root), "v1"))
    other = [Upsert("other", "x", {}, unit(1, seed=3)[0], "another-sha")]
    with pytest.raises(WritesUnavailable, match="another encoder"):  # nothing logged
        writes.commit(lambda: searcher, other)
    searcher.index.close()
    writes.close()
    wlog = WriteLog(log_path(root))
    assert wlog.last_seq() == 0
    wlog.append(other)  # as the API on a version of that encoder logged it
    wlog.close()
    writes = Writes(root)
    try:
        with pytest.raises(WriteLogError, match="entry 1 .*another encoder"):
            writes.attach(served(open_sharded(root), "v1"))
    finally:
        writes.close()


def test_compact_folds_each_shards_writes_into_that_shard(tmp_path: Path) -> None:
    """`indexer compact` on the sharded root: each shard file gains the written documents of its `id % N` and loses
    its deleted and replaced ones (a shard no write touched is hard-linked), the shared quantizer kept; the new
    version, served with nothing left to replay, answers as the overlay did and as the single node compacted."""
    from indexer.compact import compact
    from indexer.runtime.faiss.kinds import read_ann

    corpus = Corpus()
    root, single_root = make_roots(tmp_path, corpus)
    writes, lw = Writes(root), Writes(single_root)
    sharded = attach(writes, served(open_sharded(root), "v1"))
    single = attach(lw, served(IndexVersion(IndexRoot(single_root).current_dir()), "v1"))
    queries = np.concatenate([unit(20, seed=31), unit(40, seed=11)[:20]])
    for ops in batches(corpus):
        writes.commit(lambda: sharded, ops)
        lw.commit(lambda: single, ops)
    before = answers(sharded.index, queries)
    for s in (sharded, single):
        s.index.close()
    writes.close()
    lw.close()
    # only shard 1 is touched: odd FAISS ids ("doc-3": 2^62 + 1, a document of the compacted version; a new id)
    only_odd = [Delete(corpus.ext[3]), Upsert(10_001 + 2 * 40, "odd", {"n": 1, "tag": "written"},
                                              unit(1, seed=41)[0], SHA)]
    result = compact(root, run_eval=False)
    single_result = compact(single_root, run_eval=False)
    assert result.manifest is not None and single_result.manifest is not None
    assert result.manifest.index.ntotal == single_result.manifest.index.ntotal == 400 + 20 - 20 - 2 + 1
    folder = IndexRoot(root).current_dir()
    assert result.manifest.writes is not None
    assert folder.name == result.manifest.version and result.manifest.writes.folded_seq == sum(
        len(b) for b in batches(corpus))
    params = result.manifest.index.params
    for s, info in enumerate(result.manifest.index.shards):
        ids, _ = read_ann([folder / info.file], params).stored_vectors()
        assert len(ids) == info.ntotal and set((np.asarray(ids) % 2).tolist()) == {s}
    writes, lw = Writes(root), Writes(single_root)
    compacted = attach(writes, served(open_sharded(root, replicas=2), result.manifest.version))
    one = attach(lw, served(IndexVersion(IndexRoot(single_root).current_dir()), single_result.manifest.version))
    try:
        assert compacted.index.overlay.written == 0 and compacted.index.overlay.removed_from_base == 0
        assert_same(answers(compacted.index, queries), before)
        assert_same(answers(compacted.index, queries), answers(one.index, queries))
        same_reads(compacted.index, one.index, corpus)  # the written documents' vectors now in their shards
        assert_same(answers(compacted.index, queries, {"tag": "written"}), answers(one.index, queries,
                                                                                    {"tag": "written"}))
        writes.commit(lambda: compacted, only_odd)  # writes go on after it, into its overlay
        lw.commit(lambda: one, only_odd)
        assert_same(answers(compacted.index, queries), answers(one.index, queries))
        same_reads(compacted.index, one.index, corpus)
    finally:
        compacted.index.close()
        one.index.close()
        writes.close()
        lw.close()
    again = compact(root, run_eval=False)
    assert again.manifest is not None
    shard0 = [s for s in again.manifest.index.shards if s.file.endswith("00000.faiss")][0]
    new, old = IndexRoot(root).current_dir() / shard0.file, folder / shard0.file
    assert new.stat().st_ino == old.stat().st_ino  # untouched: hard-linked


class PassageCorpus(Corpus):
    """The corpus' 400 rows as the passages of 100 documents (4 each, as `indexer build --chunk` stores them: row id
    `passage_id(doc, i)`, the passage's offsets and count in its metadata); documents of integer and string ids."""

    def __init__(self) -> None:
        super().__init__()
        from indexer.runtime.ids import ASSIGNED_IDS_FROM
        from indexer.runtime.passages import PASSAGE_KEY, passage_id

        words = [f"word{i}" for i in range(4)]
        self.ext, self.meta, self.texts = [], {}, {}
        for d in range(100):
            doc = d * 10 if d % 2 == 0 else f"pdoc-{d}"
            for i, w in enumerate(words):
                row = passage_id(doc, i)
                start = sum(len(x) + 1 for x in words[:i])
                self.ext.append(row)
                self.texts[row] = w
                self.meta[row] = {"n": d, "tag": "even" if d % 2 == 0 else "odd",
                                  PASSAGE_KEY: [start, start + len(w), len(words)]}
        self.fids = [ASSIGNED_IDS_FROM + r for r in range(len(self.ext))]


def test_documents_of_passages_read_back_on_the_shards_as_on_one_node(tmp_path: Path) -> None:
    """A version of passages: a document read back (its passages, their offsets and vectors: each passage's from the
    shard of its own FAISS id), counted and scrolled as the single node's, filtered or not."""
    corpus = PassageCorpus()
    sharded_root, single_root = make_roots(tmp_path, corpus)
    sw, lw = Writes(sharded_root), Writes(single_root)
    sharded = attach(sw, served(open_sharded(sharded_root), "v1"))
    single = attach(lw, served(IndexVersion(IndexRoot(single_root).current_dir()), "v1"))
    try:
        mine, theirs = Documents(sharded.index), Documents(single.index)
        ids = [0, 20, "pdoc-1", "pdoc-7", 990, "absent"]
        got = mine.get(ids, with_vector=True)
        assert documents(got) == documents(theirs.get(ids, with_vector=True))
        doc = got[2]
        assert doc is not None and doc.text == "word0 word1 word2 word3" and len(doc.passages or []) == 4
        assert {shard_of(f, 2) for f in corpus.fids[4:8]} == {0, 1}  # its passages live in both shards
        assert all(p.vector is not None for p in doc.passages or [])
        for flt in (None, {"tag": "even"}):
            assert mine.count(flt) == theirs.count(flt) == (100 if flt is None else 50)
            assert pages(mine, flt, limit=7) == pages(theirs, flt, limit=7)
    finally:
        sharded.index.close()
        single.index.close()
        sw.close()
        lw.close()
