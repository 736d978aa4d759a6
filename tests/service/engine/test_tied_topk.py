"""Ties on a version of whole documents (no passages) settle by id, as a version of passages' do: over a real build
(MiniLM, FAISS flat, BM25, SQLite) where most documents repeat one of a few texts (exact ties: equal vectors, equal
BM25 scores), with written documents in the overlay beside them (new copies, a copy replacing a document of the
version, which keeps its low FAISS id, and copies written twice), in dense, lexical and hybrid, with and without
a filter: the first n hits of top_k N are the hits of top_k n for every n < N, and hits of equal scores come by
ascending FAISS id. FAISS orders ties as its own k makes it (a heap below 100, a reservoir from there), and the
overlay's merge kept tied rows in its parts' order (the written documents' BM25 postings in the order they were
last written): the first moved with top_k, the second came out of id order. Seconds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from indexer.runtime.query import Query
from service.engine import Collection, Document
from tests.service.engine.scenarios import built_root, run

TOP = 100  # hybrid fuses each leg's best 100 (`fusion.HYBRID_DEPTH`): up to there no depth depends on top_k
NS = (1, 2, 3, 5, 8, 13, 21, 34, 55, 99)
MODES = ("dense", "lexical", "hybrid")
TEXTS = ("The comet tail glows near the sun.", "Rivers carry sand to the ocean.", "Bread rises because of yeast.")


def corpus() -> list[dict[str, Any]]:
    """150 copies of three texts, interleaved, and 20 documents of their own; ids are the build's rows."""
    rows = [{"id": i, "text": TEXTS[i % 3], "group": "ab"[i % 2]} for i in range(150)]
    rows += [{"id": 150 + i, "text": f"A note on {w} and the sun.", "group": "a"} for i, w in
             enumerate("kites moss tides salt glass coral dust frost hail ink lava mist opal pearl reed silk "
                       "slate tin wax zinc".split())]
    return rows


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, minilm_mean: Path) -> Path:
    return built_root(tmp_path_factory.mktemp("tied-topk"), corpus(), minilm_mean)


def ranked(hits: list[Any]) -> list[tuple[Any, float]]:
    return [(h.ext_id, h.score) for h in hits]


def test_tied_documents_rank_by_id_and_independently_of_top_k(root: Path) -> None:
    async def scenario(collection: Collection) -> None:
        # written copies: new ids (FAISS ids past the version's) and one replacing document 4 (its own FAISS id)
        await collection.upsert([Document(4, TEXTS[0], {"group": "a"}),
                                 *(Document(1000 + i, TEXTS[i % 3], {"group": "ab"[i % 2]}) for i in range(12))])
        # written again: the overlay's BM25 postings now hold 1006 and 1009 before 1000 and 1003
        await collection.upsert([Document(1000, TEXTS[0], {"group": "a"}), Document(1003, TEXTS[0], {})])
        for query in ("comet tail sun", TEXTS[1], "bread yeast", "sun"):
            for mode in MODES:
                for flt in (None, {"group": "a"}):
                    full = (await collection.search(Query([query], TOP, flt, mode=mode))).hits[0]
                    assert len(full) == TOP or mode == "lexical", (query, mode, flt)
                    ties = [(a.faiss_id, b.faiss_id) for a, b in zip(full, full[1:], strict=False)
                            if a.score == b.score]
                    assert ties and all(a < b for a, b in ties), (query, mode, flt, ties)
                    for n in NS:
                        r = await collection.search(Query([query], n, flt, mode=mode))
                        assert ranked(r.hits[0]) == ranked(full)[:n], (query, mode, flt, n)

    run(root, scenario)
