"""A version of passages answers top_k documents whenever that many match, and its rankings do not depend on top_k:
over random queries on a real build (MiniLM, FAISS flat, BM25, SQLite, the write overlay), in every mode,
with and without a filter, by documents and by passages, the first n hits of top_k 100 are the hits of top_k n.
Documents of very unequal lengths (one of 150 passages that fills any candidate pool, a few of 20, many of 1-3)
make the candidate pools run short, which is what the deepening (`indexer.runtime.doc_topk`) must survive; the
bound that stops it is said in `truncated`. Seconds."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from indexer.runtime import doc_topk
from indexer.runtime.passages import document_of
from indexer.runtime.query import Query
from service.engine import Collection, Document
from tests.service.engine.scenarios import built_root, run
from tests.tiny_bert import WORDS

TOP = 100
NS = (1, 3, 10, 37)
MODES = ("dense", "lexical", "hybrid")
FILTERS: tuple[dict[str, Any] | None, ...] = (None, {"group": "b"})


def tag(rng: random.Random) -> str:
    """A made-up word (letters the tiny vocabulary spells) that keeps every passage's vector and BM25 score its own."""
    return "".join(rng.choice("bcdfghjklmnpqrstvwxz") for _ in range(4))


def sentence(rng: random.Random, words: list[str]) -> str:
    return " ".join(rng.choice(words) for _ in range(6)) + f" {tag(rng)}."


def corpus() -> list[dict[str, Any]]:
    rng = random.Random(7)
    flood = ["python", "learn", "quickly", "best", "way"]  # one document of 150 passages about these, all alike
    rows = [{"id": "flood", "text": " ".join(sentence(rng, flood + ["the", "a"]) for _ in range(150)),
             "group": "b"}]
    for i in range(130):
        n = 20 if i % 25 == 0 else 1 + i % 3
        rows.append({"id": i if i % 2 else f"d{i}", "text": " ".join(sentence(rng, WORDS) for _ in range(n)),
                     "group": "ab"[i % 2]})
    return rows


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, minilm_mean: Path) -> Path:
    return built_root(tmp_path_factory.mktemp("passage-topk"), corpus(), minilm_mean, chunk=12, overlap=0)




def queries(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS[20:]) for _ in range(rng.randint(1, 4))) for _ in range(n)]


def matching(collection: Collection, query: str, mode: str, flt: dict[str, Any] | None, docs: dict[Any, str]
             ) -> int:
    """How many documents match: every one the filter admits (a vector ranks them all), or, lexical, those
    holding a term of the query (all of BM25's passages, searched to the end through the served index)."""
    admitted = [d for d, g in docs.items() if flt is None or g == flt["group"]]
    if mode != "lexical":
        return len(admitted)
    index = collection.leases.current.index  # type: ignore[union-attr]
    match = None if flt is None else index.match(flt)
    _, ids = index.lexical_search([query], 100_000, match)[0]
    found = index.ext_ids([int(i) for i in ids if i >= 0])
    return len({(type(d), d) for d in map(document_of, found.values())})


async def check(collection: Collection, qs: list[str], docs: dict[Any, str]) -> int:
    """The properties over `qs`; returns how many answers needed more than the first candidates."""
    deep = 0
    for q in qs:
        for mode in MODES:
            for flt in FILTERS:
                for passages in (False, True):
                    full = (await collection.search(Query([q], TOP, flt, mode=mode, passages=passages)))
                    top = [(h.ext_id, h.passage.index, h.score) for h in full.hits[0]]  # type: ignore[union-attr]
                    want = matching(collection, q, mode, flt, docs)
                    what = (q, mode, flt, passages)
                    if not passages:
                        assert len(top) == min(TOP, want), what  # top_k documents whenever that many match
                        assert len({(type(d), d) for d, _, _ in top}) == len(top), what
                        assert full.truncated == [False], what
                        deep += len(top) > 30
                    for n in NS:
                        r = await collection.search(Query([q], n, flt, mode=mode, passages=passages))
                        got = [(h.ext_id, h.passage.index, h.score) for h in r.hits[0]]  # type: ignore[union-attr]
                        assert got == top[:n], (*what, n)
    return deep


def test_top_k_documents_and_rankings_independent_of_top_k(root: Path) -> None:
    docs = {r["id"]: r["group"] for r in corpus()}

    async def scenario(collection: Collection) -> None:
        assert await check(collection, queries(1, 6), docs) > 0
        # the write overlay: a second flooding document written, one deleted, one replaced by a shorter text
        rng = random.Random(3)
        flood = " ".join(sentence(rng, ["python", "learn", "money", "invest", "india"]) for _ in range(120))
        await collection.upsert([Document("flood2", flood, {"group": "a"}),
                                 Document(3, sentence(rng, WORDS), {"group": "b"})])
        await collection.delete([5])
        docs.pop(5)
        docs["flood2"], docs[3] = "a", "b"
        await check(collection, queries(2, 4) + ["python learn invest"], docs)

    run(root, scenario)


def test_the_pdf_that_fills_the_pool_leaves_room_for_top_k_documents(root: Path) -> None:
    async def scenario(collection: Collection) -> None:
        for mode in MODES:
            r = await collection.search(Query(["python learn quickly best way"], 3, mode=mode))
            assert len({h.ext_id for h in r.hits[0]}) == 3 and r.hits[0][0].ext_id == "flood", mode

    run(root, scenario)


def test_the_bound_stops_the_deepening_and_says_so(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doc_topk, "MAX_DEPTH", 100)
    monkeypatch.setattr(doc_topk, "TIERS", (100,))

    async def scenario(collection: Collection) -> None:
        for mode in MODES:
            r = await collection.search(Query(["python learn quickly best way", "sky"], TOP, mode=mode))
            assert r.truncated[0] and len(r.hits[0]) < TOP, mode  # 100 passages cannot hold 100 documents
            few = await collection.search(Query(["sky"], 5, mode=mode))  # 100 passages hold 5 documents
            assert few.truncated == [False] and len(few.hits[0]) == 5, mode

    run(root, scenario)


def test_tied_passages_rank_by_id_whatever_the_depth(tmp_path: Path, minilm_mean: Path) -> None:
    """Passages of equal scores (documents repeating one text: boilerplate, copies) rank in one order however deep
    the search: ties by id, and every row tied with the last one kept is seen before the cut. FAISS's own order of
    ties depends on k (a heap below 100, a reservoir from there), so without this the first hit of top_k 1 was
    another copy than the first of top_k 100."""
    same = "The comet tail glows near the sun. " * 12
    rows = [{"id": f"copy{i}", "text": same, "group": "a"} for i in range(6)]
    rows += [{"id": i, "text": f"Rivers carry {w} to the ocean. " * 3, "group": "b"} for i, w in
             enumerate(["sand", "stones", "leaves", "fish", "ice"])]
    built_root(tmp_path, rows, minilm_mean, chunk=16, overlap=0)

    async def scenario(collection: Collection) -> None:
        for query in ("comet", "comet tail glows near the sun", "rivers"):
            for mode in MODES:
                for flt in (None, {"group": "a"}):
                    for passages in (False, True):
                        full = await collection.search(Query([query], TOP, flt, mode=mode, passages=passages))
                        top = [(h.ext_id, h.passage.index, h.score) for h in full.hits[0]]  # type: ignore[union-attr]
                        for n in (1, 2, 3, 5, 7):
                            r = await collection.search(Query([query], n, flt, mode=mode, passages=passages))
                            got = [(h.ext_id, h.passage.index, h.score) for h in r.hits[0]]  # type: ignore[union-attr]
                            assert got == top[:n], (query, mode, flt, passages, n)

    run(tmp_path / "root", scenario)


def test_a_bounded_lexical_leg_ranks_documents_independently_of_top_k(
        tmp_path: Path, minilm_mean: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hybrid's bounded lexical leg (a large collection's common terms: `bounded_leg`, forced here on every query)
    scores the dense candidates it is completed with, so its answer depends on how many there are: completed with
    the candidates of a search as deep as top_k asked for (4 x top_k + 10), the fused documents' scores and order
    moved with top_k. Completed with each tier's own, they do not."""
    pytest.importorskip("tantivy")
    import service.engine.searcher as searcher_module

    monkeypatch.setattr(searcher_module, "BOUNDED_FROM", 0)
    built_root(tmp_path, corpus(), minilm_mean, chunk=12, overlap=0, lexical_engine="tantivy")

    async def scenario(collection: Collection) -> None:
        for q in queries(1, 6):
            for flt in FILTERS:
                full = await collection.search(Query([q], TOP, flt, mode="hybrid"))
                assert full.stages is not None and full.stages.lexical_bounded == 1  # the bounded leg ran
                top = [(h.ext_id, h.passage.index, h.score) for h in full.hits[0]]  # type: ignore[union-attr]
                for n in NS:
                    r = await collection.search(Query([q], n, flt, mode="hybrid"))
                    got = [(h.ext_id, h.passage.index, h.score) for h in r.hits[0]]  # type: ignore[union-attr]
                    assert got == top[:n], (q, flt, n)

    run(tmp_path / "root", scenario)
