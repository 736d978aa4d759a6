"""A version built with passages (`indexer build --chunk`) on the real engine: ONNX Runtime, FAISS, BM25, SQLite and
the write log. /search ranks documents by their best passage (top_k counts documents) and returns it with its
offsets and snippet; `passages` returns passages; filters select by the document's metadata; writes replace or
delete all of a document's passages in one log transaction; a brought vector is refused; so are corpora that bring
vectors and bad --chunk/--overlap at build time. 13 short documents, a flat index: seconds."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from indexer.build import BuildConfig, build
from indexer.corpus_rows import CorpusFormatError
from indexer.runtime.manifest import Manifest
from indexer.runtime.passages import parse_passage_id
from indexer.runtime.query import Query
from indexer.runtime.writelog import WriteLog, log_path
from service.engine import BadVector, Document, Engine
from service.settings import Settings
from tests.conftest import indexer_cli

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


def run(root: Path, scenario) -> None:  # noqa: ANN001 - an async function of the engine
    async def go() -> None:
        engine = Engine(Settings(index_root=root, workers=1, threads=1, watch_interval_s=0, write_threads=1,
                                 request_timeout_s=300))
        await engine.start()
        try:
            await scenario(engine)
        finally:
            await engine.stop()

    asyncio.run(go())


async def passages_of(engine: Engine, query: str, **kw: Any) -> list[tuple[Any, int, int]]:
    """(document id, passage number, passage count) of every passage BM25 finds for `query`."""
    r = await engine.search(Query([query], 100, mode="lexical", passages=True, **kw))
    return [(h.ext_id, h.passage.index, h.passage.count) for h in r.hits[0]]


def test_the_build_records_its_passages_and_why(template: Path) -> None:
    from indexer.runtime.layout import IndexRoot

    m = Manifest.load(IndexRoot(template).current_dir())
    p = m.chunking()
    assert p is not None and (p.chunk, p.overlap, p.reason) == (24, 4, "--chunk 24")
    assert p.docs_split == 12 and p.passages == m.index.ntotal > 13
    assert m.data.n_docs == 13  # documents, not passages


def test_search_returns_documents_with_their_best_passage(template: Path) -> None:
    texts = {r["id"]: r["text"] for r in corpus()}

    async def scenario(engine: Engine) -> None:
        for mode in ("dense", "lexical", "hybrid"):
            r = await engine.search(Query([COMET], 3, mode=mode))
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
        r = await engine.search(Query([COMET], 8, mode="dense", passages=True))
        ids = [h.ext_id for h in r.hits[0]]
        assert len(ids) == 8 and len(set(ids)) < 8
        # the short document: one passage, its text escaped in the snippet
        r = await engine.search(Query(["kites wind"], 1, mode="lexical"))
        h = r.hits[0][0]
        assert h.ext_id == 99 and (h.passage.start, h.passage.end, h.passage.count) == (0, len(h.text), 1)
        assert h.passage.snippet == "A short note on <mark>kites</mark> &amp; &lt;b&gt;<mark>wind</mark>&lt;/b&gt;."

    run(template, scenario)


def test_filters_select_by_the_documents_metadata(template: Path) -> None:
    async def scenario(engine: Engine) -> None:
        for mode in ("dense", "hybrid"):
            r = await engine.search(Query([COMET], 5, {"topic": "cooking"}, mode=mode))
            assert len(r.hits[0]) == 4 and {h.metadata["topic"] for h in r.hits[0]} == {"cooking"}

    run(template, scenario)


def test_writes_replace_and_delete_all_of_a_documents_passages_in_one_transaction(root: Path) -> None:
    count_seen: list[int] = []

    async def scenario(engine: Engine) -> None:
        before = [p for p in await passages_of(engine, "comets") if p[0] == 9]
        assert len(before) >= 1 and before[0][2] == 6
        # a shorter text: 1 passage now; the other 5 are deleted in the same log transaction
        w = await engine.upsert([Document(9, "Comets are icy visitors.", {"topic": "space"})])
        assert (w.applied.replaced, w.applied.deleted) == (1, 5)
        assert [p for p in await passages_of(engine, "comets") if p[0] == 9] == [(9, 0, 1)]
        r = await engine.search(Query(["Comets are icy visitors."], 1, mode="dense"))
        assert r.hits[0][0].ext_id == 9 and r.hits[0][0].text == "Comets are icy visitors."
        # longer again: 6 passages, created where there were none
        text = " ".join(f"Comets are visitor number {i} from the cold outer solar system." for i in range(8))
        w = await engine.upsert([Document(9, text, {"topic": "space"})])
        count = (await passages_of(engine, "visitor", filter={"topic": "space"}))[0][2]
        count_seen.append(count)
        assert count > 1 and w.applied.created == count - 1 and w.applied.replaced == 1
        # a delete removes every passage
        w = await engine.delete([9, "d8"])
        assert w.applied.deleted == count + 6
        assert not [p for p in await passages_of(engine, "comets visitor") if p[0] in (9, "d8")]
        # a brought vector stands for a whole document: refused, nothing logged
        with pytest.raises(BadVector, match="passages"):
            await engine.upsert([Document(7, "x", {}, np.ones(384, dtype=np.float32).tolist())])

    run(root, scenario)
    wlog = WriteLog(log_path(root))
    try:
        entries = list(wlog.entries(after=0))
    finally:
        wlog.close()
    # what was logged is passages only, never the documents' own ids: 6 + count + (count + 6) entries
    assert all(parse_passage_id(e.ext_id) is not None for e in entries)
    assert len(entries) == 12 + 2 * count_seen[0]


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
