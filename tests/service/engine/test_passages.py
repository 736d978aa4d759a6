"""A version built with passages (`indexer build --chunk`) on the real engine: ONNX Runtime, FAISS, BM25, SQLite and
the write log. /search ranks documents by their best passage (top_k counts documents) and returns it with its
offsets and snippet; `passages` returns passages; filters select by the document's metadata; writes replace or
delete all of a document's passages in one log transaction, and concurrent writes of one document leave the last
acknowledged one's passages; a brought vector is refused; so are corpora that bring vectors, bad --chunk/--overlap
at build time and --add onto passages. A build with qrels and a repeated id is evaluated by documents (as /search
ranks them), keeps the last occurrence's passages, and compacts and swaps through the gate. 13-14 short documents,
flat indexes: seconds."""

from __future__ import annotations

import asyncio
import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from indexer.build import BuildConfig, build
from indexer.corpus_rows import CorpusFormatError
from indexer.runtime.manifest import Manifest
from indexer.runtime.passage_rows import PASSAGE_KEY
from indexer.runtime.passages import document_of, parse_passage_id, snippet
from indexer.runtime.query import Query
from indexer.runtime.writelog import WriteLog, log_path
from service.engine import BadFilter, BadVector, Collection, Document
from tests.conftest import indexer_cli
from tests.service.engine.scenarios import run

TOPICS = {
    "geology": ["Rocks form over millions of years.", "Sediment settles in layers at the bottom of lakes.",
                "Volcanic basalt cools quickly and forms small crystals.",
                "Metamorphic rocks change under heat and pressure."],
    "cooking": ["Bread rises because yeast produces carbon dioxide.", "Salt draws moisture out of vegetables.",
                "A hot pan sears meat and browns its surface.", "Slow simmering makes a stock rich."],
    "space": ["The moon orbits the earth every twenty-seven days.",
              "Jupiter is the largest planet of the solar system.", "Comets grow tails when they approach the sun.",
              "Neutron stars are the dense cores of collapsed stars."],
}
COMET = "Why do comets grow tails near the sun?"


def corpus() -> list[dict[str, Any]]:
    """12 documents of 6 sentences (several passages each at chunk 24), ids alternating int and str, + 1 short."""
    rows: list[dict[str, Any]] = []
    for t, sents in TOPICS.items():
        for k in range(4):
            i = len(rows)
            text = " ".join(f"{sents[(k + j) % 4]} Note {k}-{j} about {t}." for j in range(6))
            rows.append({"id": i if i % 2 else f"d{i}", "text": text, "topic": t})
    rows.append({"id": 99, "text": "A short note on kites & <b>wind</b>.", "topic": "misc"})
    return rows


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory, minilm_mean: Path) -> Path:
    tmp = tmp_path_factory.mktemp("passages")
    root = tmp / "root"
    build(BuildConfig(model_dir=minilm_mean, data=str(write_jsonl(tmp / "docs.jsonl", corpus())), root=root,
                      index="flat", evaluate=False, chunk=24, overlap=4, threads=1))
    return root


@pytest.fixture()
def root(template: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "root"
    shutil.copytree(template, dst, symlinks=True)
    return dst




def check_doc_rows(collection: Collection, gone: list[int] | None = None) -> list[int]:
    """The served index's document ordinals (`doc_rows`: what collapses ranked passages to their documents) group
    its live rows exactly as their ids' documents do, one ordinal per document; the rows `gone` (deleted since)
    and padding have none (-1). Returns the live rows' FAISS ids."""
    index = collection.leases.current.index  # type: ignore[union-attr]
    ids = index.search(np.ones((1, index.dim), np.float32), index.ntotal)[1][0]  # flat: every live row
    ids = ids[ids >= 0]
    assert len(ids) == index.ntotal
    ext = index.ext_ids(ids.tolist())
    rows = index.doc_rows(ids)
    assert rows.shape == ids.shape and (rows >= 0).all()
    ordinals: dict[tuple[type, Any], set[int]] = {}
    for i, r in zip(ids.tolist(), rows.tolist(), strict=True):
        ordinals.setdefault((type(document_of(ext[i])), document_of(ext[i])), set()).add(r)
    assert all(len(o) == 1 for o in ordinals.values())  # one ordinal per document ...
    assert len(set().union(*ordinals.values())) == len(ordinals)  # ... and one document per ordinal
    assert index.doc_rows(np.array([-1, *(gone or [])], np.int64)).tolist() == [-1] * (1 + len(gone or []))
    return ids.tolist()


async def passages_of(collection: Collection, query: str, **kw: Any) -> list[tuple[Any, int, int]]:
    """(document id, passage number, passage count) of every passage BM25 finds for `query`."""
    r = await collection.search(Query([query], 100, mode="lexical", passages=True, **kw))
    return [(h.ext_id, h.passage.index, h.passage.count) for h in r.hits[0]]


def test_the_build_records_its_passages_and_why(template: Path) -> None:
    from indexer.runtime.layout import IndexRoot

    manifest = Manifest.load(IndexRoot(template).current_dir())
    p = manifest.chunking()
    assert p is not None and (p.chunk, p.overlap, p.reason) == (24, 4, "--chunk 24")
    assert p.docs_split == 12 and p.passages == manifest.index.ntotal > 13
    assert manifest.data.n_docs == 13  # documents, not passages


def test_search_returns_documents_with_their_best_passage(template: Path) -> None:
    texts = {r["id"]: r["text"] for r in corpus()}

    async def scenario(collection: Collection) -> None:
        for mode in ("dense", "lexical", "hybrid"):
            r = await collection.search(Query([COMET], 3, mode=mode))
            hits = r.hits[0]
            assert len(hits) == 3 and len({h.ext_id for h in hits}) == 3, mode  # top_k counts documents
            assert {corpus()[i]["topic"] for i in range(12) if corpus()[i]["id"] in {h.ext_id for h in hits}} == \
                {"space"}
            for h in hits:
                p = h.passage
                assert p is not None and texts[h.ext_id][p.start : p.end] == h.text, (mode, h)
                assert "Comets grow tails" in h.text and "<mark>Comets</mark>" in p.snippet
                assert set(h.metadata) == {"topic"}
            assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        # passages themselves: several of one document may rank, ids are still the documents'
        r = await collection.search(Query([COMET], 8, mode="dense", passages=True))
        ids = [h.ext_id for h in r.hits[0]]
        assert len(ids) == 8 and len(set(ids)) < 8
        # the short document: one passage, its text escaped in the snippet
        r = await collection.search(Query(["kites wind"], 1, mode="lexical"))
        h = r.hits[0][0]
        assert h.ext_id == 99 and (h.passage.start, h.passage.end, h.passage.count) == (0, len(h.text), 1)
        assert h.passage.snippet == "A short note on <mark>kites</mark> &amp; &lt;b&gt;<mark>wind</mark>&lt;/b&gt;."

    run(template, scenario)


def test_snippets_are_each_returned_passages_own_and_left_out_when_not_asked_for(template: Path) -> None:
    """`snippets` false answers the same documents, passages, offsets and scores with empty snippets; true (the
    default) gives each hit the snippet of its own passage's text for the query."""
    async def scenario(collection: Collection) -> None:
        for mode, passages, query in [(m, p, q) for m in ("dense", "lexical", "hybrid") for p in (False, True)
                                      for q in (COMET, "kites wind and tails of comets")]:
            with_ = (await collection.search(Query([query], 6, mode=mode, passages=passages))).hits[0]
            without = (await collection.search(Query([query], 6, mode=mode, passages=passages,
                                                     snippets=False))).hits[0]
            assert with_ and [(h.ext_id, h.text, h.score, h.metadata) for h in without] == \
                [(h.ext_id, h.text, h.score, h.metadata) for h in with_], (mode, passages)
            assert [replace(h.passage, snippet="") for h in with_] == [h.passage for h in without]
            assert all(h.passage.snippet == snippet(h.text, query) != "" for h in with_), (mode, passages)

    run(template, scenario)


def test_filters_select_by_the_documents_metadata(template: Path) -> None:
    async def scenario(collection: Collection) -> None:
        for mode in ("dense", "hybrid"):
            r = await collection.search(Query([COMET], 5, {"topic": "cooking"}, mode=mode))
            assert len(r.hits[0]) == 4 and {h.metadata["topic"] for h in r.hits[0]} == {"cooking"}
        none = await collection.search(Query([COMET], 5, {"colour": "red"}))  # a field no document holds
        assert none.hits == [[]]
        with pytest.raises(BadFilter) as refused:  # the passage record is never shown, nor filtered on
            await collection.search(Query([COMET], 5, {PASSAGE_KEY: 1}))
        assert str(refused.value) == "the passage record is not a metadata field and cannot be filtered"

    run(template, scenario)


def test_writes_replace_and_delete_all_of_a_documents_passages_in_one_transaction(root: Path) -> None:
    count_seen: list[int] = []

    async def scenario(collection: Collection) -> None:
        before = [p for p in await passages_of(collection, "comets") if p[0] == 9]
        assert len(before) >= 1 and before[0][2] == 6
        check_doc_rows(collection)
        status = collection.status()  # passages counted apart from documents
        assert (status.documents, status.passages) == (13, status.size) and status.size > 13
        # a shorter text: 1 passage now; the other 5 are deleted in the same log transaction
        w = await collection.upsert([Document(9, "Comets are icy visitors.", {"topic": "space"})])
        assert (w.applied.created, w.applied.replaced, w.applied.deleted) == (0, 1, 0)  # documents
        assert w.passages is not None and (w.passages.replaced, w.passages.deleted) == (1, 5)  # passage rows
        assert [p for p in await passages_of(collection, "comets") if p[0] == 9] == [(9, 0, 1)]
        r = await collection.search(Query(["Comets are icy visitors."], 1, mode="dense"))
        assert r.hits[0][0].ext_id == 9 and r.hits[0][0].text == "Comets are icy visitors."
        # longer again: 6 passages, created where there were none
        text = " ".join(f"Comets are visitor number {i} from the cold outer solar system." for i in range(8))
        w = await collection.upsert([Document(9, text, {"topic": "space"})])
        count = (await passages_of(collection, "visitor", filter={"topic": "space"}))[0][2]
        count_seen.append(count)
        assert (w.applied.created, w.applied.replaced) == (0, 1)
        assert w.passages is not None and count > 1 and (w.passages.created, w.passages.replaced) == (count - 1, 1)
        assert collection.status().documents == 13  # replaced: one document still, of `count` passages
        index = collection.leases.current.index  # type: ignore[union-attr]
        live = check_doc_rows(collection)  # written rows: the rows of 9 share an ordinal of their own
        doomed = [i for i, e in index.ext_ids(live).items() if document_of(e) in (9, "d8")]
        # a delete removes every passage
        w = await collection.delete([9, "d8"])
        assert (w.applied.deleted, w.applied.missing) == (2, 0)
        assert w.passages is not None and w.passages.deleted == count + 6
        check_doc_rows(collection, gone=doomed)
        status = collection.status()
        assert status.documents == 11 and status.passages == status.size
        await collection.upsert([Document("new", "A kite flies in the wind.", {"topic": "misc"})])
        assert collection.status().documents == 12
        # the compaction policy counts the overlay's rows: on a version of passages, passages
        from indexer.runtime.collection_config import Compaction
        from service.engine.compactor import measure

        pending = measure(root, collection.leases, Compaction(written_docs=1))
        assert pending.due == f"{pending.written_docs} passages written, the policy's limit is 1", pending
        assert not [p for p in await passages_of(collection, "comets visitor") if p[0] in (9, "d8")]
        # a brought vector stands for a whole document: refused, nothing logged
        with pytest.raises(BadVector, match="passages"):
            await collection.upsert([Document(7, "x", {}, np.ones(384, dtype=np.float32).tolist())])

    run(root, scenario)
    wlog = WriteLog(log_path(root))
    try:
        entries = list(wlog.entries(after=0))
    finally:
        wlog.close()
    # what was logged is passages only, never the documents' own ids: 6 + count + (count + 6) entries, + 1 ("new")
    assert all(parse_passage_id(e.ext_id) is not None for e in entries)
    assert len(entries) == 12 + 2 * count_seen[0] + 1


def test_corpora_that_bring_vectors_and_bad_sizes_are_refused(tmp_path: Path, minilm_mean: Path) -> None:
    rows = [{"id": 1, "text": "One sentence. Two sentences.", "vector": [0.1] * 384}]
    data = write_jsonl(tmp_path / "vectors.jsonl", rows)
    with pytest.raises(CorpusFormatError, match=r"vectors\.jsonl:1: .*vector.*--chunk"):
        build(BuildConfig(model_dir=minilm_mean, data=str(data), root=tmp_path / "r1", index="flat",
                          evaluate=False, chunk=32))
    assert not (tmp_path / "r1" / "current").exists()
    data = write_jsonl(tmp_path / "docs.jsonl", corpus()[:2])
    for flags, why in ((["--chunk", "many"], "a number of tokens, 'auto' or 'off'"),
                       (["--chunk", "400"], "encoder's window of 256"), (["--chunk", "32", "--overlap", "20"],
                                                                         "half the chunk")):
        got = indexer_cli("build", "--root", str(tmp_path / "r2"), "--model", str(minilm_mean), "--data", str(data),
                          *flags)
        assert got.returncode == 2 and why in got.stderr, (flags, got.stderr[-500:])


async def passages_with_offsets(collection: Collection, query: str, doc: Any) -> list[tuple[int, int, int, int]]:
    """(passage number, start, end, count) of every passage of `doc` that BM25 finds for `query`."""
    r = await collection.search(Query([query], 100, mode="lexical", passages=True))
    return sorted((h.passage.index, h.passage.start, h.passage.end, h.passage.count) for h in r.hits[0]
                  if h.ext_id == doc)


def visitors(n: int) -> str:
    return " ".join(f"Comets are visitor number {i} from the cold outer solar system." for i in range(n))


def test_concurrent_writes_of_one_document_leave_the_passages_of_the_one_acknowledged_last(
        root: Path, minilm_mean: Path) -> None:
    """Two concurrent PUTs of one id, 5 and 2 passages, in both orders: the log's later one (higher seq) is what
    is served, all of its passages and none of the other's (the stale ones are counted under the write lock).
    The passages are those of the served manifest's chunk and overlap, split by an independent splitter."""
    from indexer.runtime.encoder import OnnxEncoder
    from indexer.runtime.layout import IndexRoot
    from indexer.runtime.passages import Splitter

    p = Manifest.load(IndexRoot(root).current_dir()).chunking()
    assert p is not None and (p.chunk, p.overlap) == (24, 4)
    splitter = Splitter(OnnxEncoder(minilm_mean, threads=1).tokenizer, p.chunk, p.overlap)
    text = {n: visitors(next(k for k in range(1, 40) if len(splitter.split(visitors(k))) == n)) for n in (5, 2)}
    expected = {n: [(i, s.start, s.end, n) for i, s in enumerate(splitter.split(text[n]))] for n in (5, 2)}

    async def scenario(collection: Collection) -> None:
        def encoded() -> float:
            return collection.metrics.registry.get_sample_value("strata_texts_encoded_total",
                                                            {"endpoint": "/documents"}) or 0.0

        for order in ((5, 2), (2, 5)):
            await collection.upsert([Document(9, "Comets are icy visitors.", {"topic": "space"})])  # 1 passage
            # the write lock held until both writes are encoded and on their way to the log: each sees the
            # document's 1 passage before either is logged, the interleaving that left stale passages behind
            start = encoded()
            collection.writes.lock.acquire()
            try:
                both = asyncio.gather(*(collection.upsert([Document(9, text[n], {"topic": "space"})]) for n in order))
                for _ in range(6000):
                    if encoded() >= start + 7:
                        break
                    await asyncio.sleep(0.01)
                assert encoded() == start + 7
            finally:
                collection.writes.lock.release()
            done = await both
            last = order[max(range(2), key=lambda i: done[i].seq)]
            assert await passages_with_offsets(collection, "comets visitor", 9) == expected[last], order

    run(root, scenario)


def _mrr_at_10(ranked: list[list[Any]], relevant: list[set[Any]]) -> float:
    rr = [next((1 / (i + 1) for i, d in enumerate(ids[:10]) if d in rel), 0.0) for ids, rel in
          zip(ranked, relevant, strict=True)]
    return sum(rr) / len(rr)


QUERIES = {"q1": (COMET, ["d8", 9, "d10", 11]), "q2": ("How does bread rise?", ["d4", 5, "d6", 7]),
           "q3": ("How do rocks form over time?", ["d0", 1, "d2", 3])}


def test_a_build_with_qrels_evaluates_documents_keeps_a_repeated_ids_last_passages_and_compacts(
        tmp_path: Path, minilm_mean: Path) -> None:
    """A corpus with queries and qrels and a repeated id (6 passages, then 1): the build keeps exactly the last
    occurrence's passage; its evaluation (every mode) ranks documents by their best passage, as /search returns
    them, so its MRR@10 is the one computed from /search's hits. Writes and deletes, then `indexer compact`: the
    compacted version keeps documents, passages and search results, is evaluated the same way, and the swap gate
    compares it (same evaluation set) and lets it through."""
    from indexer.commands.compact import summary
    from indexer.compact import compact
    from indexer.runtime.layout import IndexRoot
    from indexer.runtime.passages import passage_id
    from indexer.runtime.store import STORE, Store

    rows = [*corpus(), {"id": 9, "text": "Comets are icy visitors.", "topic": "space"}]
    queries = tmp_path / "queries.jsonl"
    queries.write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, (t, _) in QUERIES.items()))
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t1\n" for q, (_, ds) in QUERIES.items()
                                                               for d in ds))
    root = tmp_path / "root"
    manifest = build(BuildConfig(model_dir=minilm_mean, data=str(write_jsonl(tmp_path / "docs.jsonl", rows)), root=root,
                          index="flat", chunk=24, overlap=4, threads=1, queries=queries, qrels=qrels))
    store = Store(IndexRoot(root).current_dir() / STORE)
    try:
        nine = sorted(e for _, e in store.all_ext_ids() if parse_passage_id(e) and parse_passage_id(e)[0] == 9)
    finally:
        store.close()
    assert nine == [passage_id(9, 0)]  # the first occurrence's passages 1..5 are gone with it
    assert ((manifest.data.n_docs, manifest.data.duplicate_ids, manifest.passages.passages) == (13, 1,
                                                                                                manifest.index.ntotal))
    assert manifest.passages.docs_split == 11 and manifest.data.n_queries == 3
    assert manifest.eval is not None and set(manifest.eval_modes) == {"dense", "lexical", "hybrid"}
    relevant = [set(ds) for _, ds in QUERIES.values()]

    async def searched(collection: Collection, mode: str) -> list[list[Any]]:
        r = await collection.search(Query([t for t, _ in QUERIES.values()], 10, mode=mode))
        return [[h.ext_id for h in hits] for hits in r.hits]

    async def scenario(collection: Collection) -> None:
        for mode in ("dense", "lexical"):
            assert manifest.eval_modes[mode].mrr_at_10 == pytest.approx(_mrr_at_10(await searched(collection, mode),
                                                                                   relevant),
                                                                 abs=1e-6), mode
        assert manifest.eval.mrr_at_10 > 0.5 and manifest.eval_modes["hybrid"].mrr_at_10 > 0.5
        await collection.upsert([Document(9, TOPICS["space"][2] + " " + visitors(3), {"topic": "space"}),
                             Document(50, "Kites fly higher in a steady wind.", {"topic": "misc"})])
        await collection.delete(["d10", 1])
        before = {mode: await collection.search(Query([t for t, _ in QUERIES.values()], 10, mode=mode))
                  for mode in ("dense", "lexical")}
        nine_before = await passages_with_offsets(collection, "comets visitor", 9)
        check_doc_rows(collection)
        rows_before = collection.leases.current.index.ntotal  # the version's rows and the writes' overlay
        assert len(nine_before) > 1
        done = await asyncio.to_thread(compact, root, threads=1)
        assert done.manifest is not None
        # `indexer compact`'s line: the log's rows are passages, the version's documents said beside them
        line = summary(done, root)
        assert f"{done.upserted} passages written" in line and "documents written" not in line, line
        assert line.endswith(f"{done.manifest.index.ntotal} vectors (12 documents)"), line
        swap = await collection.reload("test")
        assert (swap.outcome, swap.version) == ("swapped", done.manifest.version)
        m2 = Manifest.load(IndexRoot(root).current_dir())
        assert (m2.data.n_docs, m2.data.n_queries) == (12, 3)  # 13 + 1 written - 2 deleted; the same queries
        assert m2.passages.passages == m2.index.ntotal == rows_before
        check_doc_rows(collection)  # the compacted version's own ordinals
        assert m2.gate_mrr_at_10() is not None and manifest.gate_mrr_at_10() is not None  # compared by the gate
        assert await passages_with_offsets(collection, "comets visitor", 9) == nine_before
        for mode, r in before.items():
            now = await collection.search(Query([t for t, _ in QUERIES.values()], 10, mode=mode))
            assert [[(h.ext_id, h.passage.index) for h in hits] for hits in now.hits] == \
                [[(h.ext_id, h.passage.index) for h in hits] for hits in r.hits], mode
            assert not {"d10", 1} & {h.ext_id for hits in now.hits for h in hits}
            assert m2.eval_modes[mode].mrr_at_10 == pytest.approx(_mrr_at_10(await searched(collection, mode),
                                                                              relevant), abs=1e-6), mode

    run(root, scenario)


def test_add_refuses_a_version_of_passages(root: Path, tmp_path: Path) -> None:
    """`indexer build --add` adds whole questions: onto a version of passages it is refused, nothing published."""
    from indexer.add import add_questions
    from indexer.runtime.layout import IndexRoot

    served = IndexRoot(root).current_dir()
    questions = tmp_path / "more.tsv"
    questions.write_text("id\tquestion\n500\tWhy do comets have two tails?\n")
    with pytest.raises(ValueError, match="indexes passages"):
        add_questions(root, questions)
    assert IndexRoot(root).current_dir() == served


def test_a_version_of_passages_keeps_its_rows_documents_in_a_file_and_one_without_it_still_opens(
        root: Path, tmp_path: Path, minilm_mean: Path) -> None:
    """Sealing a version of passages writes its rows' document ordinals (`store.DOC_ROWS`), covered by the
    manifest's checksums; opening it reads them from the file — equal to what SQLite finds — rather than finding
    them; a file that does not fit its store is ignored. A version sealed without the file (before it existed)
    verifies, opens and serves as before, the ordinals found in SQLite; a version of whole documents has none."""
    from indexer.runtime.integrity import verify, write_manifest
    from indexer.runtime.layout import IndexRoot
    from indexer.runtime.store import DOC_ROWS, STORE, Store

    folder = IndexRoot(root).current_dir()
    manifest = Manifest.load(folder)
    assert manifest.checksums is not None and DOC_ROWS in manifest.checksums.files
    verify(folder, manifest.checksums.model_dump())
    saved = np.load(folder / DOC_ROWS)
    store = Store(folder / STORE)
    try:
        found = store.rows_in_sqlite()
        assert saved.tolist() == [found[0].tolist(), found[1].tolist()] and len(found[0]) == manifest.index.ntotal
        assert [a.tolist() for a in store.document_rows()] == saved.tolist()
    finally:
        store.close()
    # the file is what is read: another mapping of the same rows is served as written; one that does not fit is not
    for rows, want in ((np.stack([saved[0], saved[1][::-1]]), saved[1][::-1]), (saved[:, 1:], saved[1])):
        np.save(folder / DOC_ROWS, rows)
        store = Store(folder / STORE)
        try:
            assert store.doc_rows(saved[0]).tolist() == want.tolist()
        finally:
            store.close()
    # a version sealed before the file existed: neither the file nor its checksum
    (folder / DOC_ROWS).unlink()
    raw = json.loads((folder / "manifest.json").read_text())
    del raw["checksums"]["files"][DOC_ROWS]
    write_manifest(folder, raw)
    verify(folder, Manifest.load(folder).checksums.model_dump())  # type: ignore[union-attr]

    async def scenario(collection: Collection) -> None:
        check_doc_rows(collection)
        r = await collection.search(Query([COMET], 3, mode="lexical"))
        assert r.hits[0][0].passage is not None and "<mark>" in r.hits[0][0].passage.snippet

    run(root, scenario)
    assert not (folder / DOC_ROWS).exists()
    whole = tmp_path / "whole"
    build(BuildConfig(model_dir=minilm_mean, data=str(write_jsonl(tmp_path / "docs.jsonl", corpus()[:3])),
                      root=whole, index="flat", evaluate=False, chunk="off", threads=1))
    assert not (IndexRoot(whole).current_dir() / DOC_ROWS).exists()


def test_a_document_rewritten_between_a_search_and_its_lookup_is_left_out(root: Path) -> None:
    """A rewrite keeps its rows' FAISS ids (a passage row's id is its document's and number), so a hit read after a
    write that landed while its search ran would carry the new text and metadata for a row the search scored and
    filtered as the old one: a document outside the filter. Applied between every search and its lookup (each
    lookup flips document 9 between "space" and "cooking", its passages rewritten in one transaction), the
    document is left out, as a deleted one is; every hit matches the filter, in every mode, by documents and by
    passages."""
    from indexer.runtime.passages import passage_rows
    from indexer.runtime.writelog import UPSERT, LogEntry

    nine = next(r["text"] for r in corpus() if r["id"] == 9)

    async def scenario(collection: Collection) -> None:
        searcher = collection.leases.current
        assert searcher is not None
        index, look_up, flips = searcher.index, searcher.look_up, []
        parts = searcher.splitter().split(nine)  # type: ignore[union-attr]

        def rewrite_then_look_up(batch: Any) -> bool:  # noqa: ANN401
            topic = ("cooking", "space")[len(flips) % 2]
            seq = index.overlay.applied_seq
            rows = passage_rows(9, nine, {"topic": topic}, parts)
            index.overlay.apply([LogEntry(seq + 1 + i, UPSERT, rid, text, meta, np.ones(index.dim, np.float32)
                                          / np.sqrt(index.dim), "test") for i, (rid, text, meta) in enumerate(rows)])
            flips.append(topic)
            return look_up(batch)

        searcher.look_up = rewrite_then_look_up  # type: ignore[method-assign]
        for mode in ("dense", "lexical", "hybrid"):
            for passages in (False, True):
                for _ in range(2):  # doc 9 matches at the search, then not at the lookup; then the reverse
                    r = await collection.search(Query([COMET], 5, {"topic": "space"}, mode=mode, passages=passages))
                    hits = r.hits[0]
                    assert hits and all(h.metadata == {"topic": "space"} for h in hits), (mode, passages, hits)
        assert len(flips) == 12

    run(root, scenario)
