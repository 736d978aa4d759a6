"""`strata_client.langchain` against a real Strata server: LangChain's VectorStore and retriever interfaces, sync
and async, write through PUT /documents and search through /search (filters and modes included)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

pytest.importorskip("langchain_core")

from langchain_core.documents import Document  # noqa: E402

from strata_client import Client, ValidationError  # noqa: E402
from strata_client import Document as StrataDocument  # noqa: E402
from strata_client.langchain import StrataEmbeddings, StrataVectorStore  # noqa: E402
from tests.conftest import Server  # noqa: E402

NOTES = ["Tomatoes need six hours of sun and deep watering twice a week.",
         "Prune roses in late winter, just before new growth starts.",
         "A violin's bow is strung with horsehair and rosin."]


def test_add_search_filter_modes_and_delete(corpus_server: Server) -> None:
    store = StrataVectorStore.from_url(corpus_server.url)
    ids = store.add_texts(NOTES, [{"topic": "life", "year": 2030}] * 2 + [{"topic": "tech", "year": 2030}],
                          ids=["lc-1", "lc-2", "lc-3"])
    assert ids == ["lc-1", "lc-2", "lc-3"]
    # each test writes under its own year: the server is shared by the package's tests
    [top] = store.similarity_search("how much sun do tomato plants need", k=1, mode="dense", filter={"year": 2030})
    assert (top.id, top.page_content, top.metadata) == ("lc-1", NOTES[0], {"topic": "life", "year": 2030})
    # filters on the corpus's metadata fields, modes and fusion are Strata's
    found = store.similarity_search("pruning roses in winter", k=5, filter={"topic": "life", "year": 2030})
    assert {d.id for d in found} == {"lc-1", "lc-2"}
    scored = store.similarity_search_with_score("horsehair rosin", k=3, mode="lexical")
    assert [d.id for d, _ in scored] == ["lc-3"] and scored[0][1] > 0  # BM25: only documents with the words
    with Client(corpus_server.url) as raw:  # the scores are the server's
        want = raw.search("violin bow", top_k=3, mode="hybrid", fusion="rrf", k=10)
    got = store.similarity_search_with_score("violin bow", k=3, mode="hybrid", fusion="rrf", rrf_k=10)
    assert [(d.id, s) for d, s in got] == [(str(h.id), h.score) for h in want.hits]
    # relevance in [0, 1] from dense cosine; refused for scores that are not bounded similarities
    relevant = store.similarity_search_with_relevance_scores("tomato sun", k=3, mode="dense")
    assert relevant[0][0].id == "lc-1" and all(0 <= s <= 1 for _, s in relevant)
    with pytest.raises(ValueError, match="need mode 'dense'"):
        store.similarity_search_with_relevance_scores("tomato sun", k=3, mode="lexical")
    assert store.similarity_search("x", filter={"colour": "red"}) == []  # a field no document holds: no match
    with pytest.raises(ValidationError, match="colour: unknown operator 'near'"):
        store.similarity_search("x", filter={"colour": {"near": "red"}})
    # read back by id: ids not found are left out; a corpus's integer id by its decimal string
    got = store.get_by_ids(["lc-3", "no-such-id", "lc-1", "0"])
    assert [(d.id, d.page_content, d.metadata.get("year")) for d in got[:2]] == [("lc-3", NOTES[2], 2030),
                                                                                 ("lc-1", NOTES[0], 2030)]
    assert len(got) == 3 and got[2].id == "0" and got[2].page_content
    assert store.delete(["lc-1", "lc-2", "lc-3"])
    assert not {"lc-1", "lc-2", "lc-3"} & {d.id for d in store.similarity_search("tomatoes roses violin", k=20)}
    assert store.get_by_ids(["lc-1", "lc-2"]) == []
    # a hit's id of a corpus built with integer ids deletes its document (it deleted the string id "987655": none)
    store.client.upsert([StrataDocument(987_655, "An integer id deleted by its decimal string.", {"year": 2030})])
    [hit] = store.similarity_search("integer id deleted by its decimal string", k=1, filter={"year": 2030})
    assert hit.id == "987655" and store.delete([hit.id])
    assert store.client.get(987_655) is None


def test_add_documents_from_texts_retriever_and_embeddings(corpus_server: Server) -> None:
    store = StrataVectorStore.from_texts(NOTES[:1], None, [{"year": 2032}], ids=["lc-t"], url=corpus_server.url,
                                         mode="dense")
    ids = store.add_documents([Document(page_content=NOTES[1], metadata={"year": 2032}, id="lc-d"),
                               Document(page_content=NOTES[2])])
    assert ids[0] == "lc-d" and len(ids[1]) == 36  # a uuid4 for the document without an id
    retriever = store.as_retriever(search_kwargs={"k": 2, "filter": {"year": 2032}})
    assert [d.id for d in retriever.invoke("when should I prune my roses")] == ["lc-d", "lc-t"]
    assert [d.id for d in retriever.invoke("violin strings", k=1)] != []
    emb = store.embeddings
    assert isinstance(emb, StrataEmbeddings)
    vector = emb.embed_query("when should I prune my roses")
    assert len(vector) == 384 and emb.embed_documents([NOTES[1]])[0] == pytest.approx(
        Client(corpus_server.url).encode(NOTES[1]).vectors[0], abs=1e-6)
    store.delete(ids + ["lc-t"])


def test_async_store_and_retriever(corpus_server: Server) -> None:
    async def main() -> None:
        store = StrataVectorStore.from_url(corpus_server.url, mode="dense")
        ids = await store.aadd_documents([Document(page_content=n, metadata={"year": 2033}, id=f"lca-{i}")
                                          for i, n in enumerate(NOTES)])
        retriever = store.as_retriever(search_kwargs={"k": 1, "filter": {"year": 2033}})
        docs = await retriever.ainvoke("sunlight for tomato plants")
        assert [d.id for d in docs] == ["lca-0"]
        hits = await store.asimilarity_search_with_score("rosin for the bow", k=1, filter={"year": 2033})
        assert hits[0][0].id == "lca-2"
        assert [d.id for d in await store.aget_by_ids(["lca-1", "lca-9"])] == ["lca-1"]
        assert await store.adelete(ids)
        assert await store.aget_by_ids(ids) == []
        assert "lca-0" not in {d.id for d in await store.asimilarity_search("sunlight for tomato plants", k=10)}
        assert len(await store.embeddings.aembed_query("a query")) == 384

    asyncio.run(main())


def test_max_marginal_relevance_trades_relevance_for_diversity(corpus_server: Server) -> None:
    store = StrataVectorStore.from_url(corpus_server.url)
    texts = ["Tomatoes need six hours of sun and deep watering.", "Tomato plants need six hours of sunlight and "
             "deep watering.", "Tomatoes want six hours of sun and watering deeply.", NOTES[1], NOTES[2]]
    store.add_texts(texts, [{"year": 2036}] * 5, ids=[f"mmr-{i}" for i in range(5)])
    query, mine = "how much sun and water do tomatoes need", {"year": 2036}
    plain = [d.id for d in store.similarity_search(query, k=2, filter=mine, mode="dense")]
    assert set(plain) <= {"mmr-0", "mmr-1", "mmr-2"}  # two near-duplicates
    # lambda 1: relevance only, the same ranking as the search
    assert [d.id for d in store.max_marginal_relevance_search(query, k=2, fetch_k=5, lambda_mult=1.0,
                                                               filter=mine, mode="dense")] == plain
    diverse = [d.id for d in store.max_marginal_relevance_search(query, k=2, fetch_k=5, lambda_mult=0.2,
                                                                  filter=mine, mode="dense")]
    assert diverse[0] == plain[0] and diverse[1] in {"mmr-3", "mmr-4"}  # the second is no near-duplicate
    retriever = store.as_retriever(search_type="mmr", search_kwargs={"k": 2, "fetch_k": 5, "lambda_mult": 0.2,
                                                                     "filter": mine, "mode": "dense"})
    assert [d.id for d in retriever.invoke(query)] == diverse
    assert [d.id for d in asyncio.run(retriever.ainvoke(query))] == diverse
    with pytest.raises(NotImplementedError, match="max_marginal_relevance_search"):
        store.max_marginal_relevance_search_by_vector([0.0] * 384, k=2)
    with pytest.raises(NotImplementedError, match=r"use similarity_search\(query"):  # LangChain's own is bare
        store.similarity_search_by_vector([0.0] * 384, k=2)
    assert store.max_marginal_relevance_search("x", k=2, filter={"year": 1999}) == []
    store.delete([f"mmr-{i}" for i in range(5)])


def test_mmr_chooses_as_langchains_own_rule() -> None:
    import numpy as np
    from langchain_core.vectorstores.utils import maximal_marginal_relevance as langchains

    from strata_client.langchain import maximal_marginal_relevance

    rng = np.random.default_rng(3)
    for n, k, lam in ((20, 4, 0.5), (7, 7, 0.0), (30, 5, 0.9), (3, 5, 0.3)):
        vecs = rng.normal(size=(n + 1, 16))
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        want = langchains(vecs[0], vecs[1:].tolist(), lambda_mult=lam, k=k)
        assert maximal_marginal_relevance(vecs[0].tolist(), vecs[1:].tolist(), k, lam) == want


def test_mmr_over_hits_longer_than_the_apis_text_limit(tmp_path: Path, minilm_mean: Path) -> None:
    """A built corpus's documents (a file's text, a row's) may run past the 2,000 characters `/encode` takes: MMR
    embeds each candidate by its first 2,000 characters (the encoder reads a window shorter than that anyway)
    rather than failing on the server's 422 for a text it never sent itself."""
    from tests.conftest import start_server, stop_server
    from tests.strata_client.conftest import indexer_build

    long = " ".join(f"Gardening note {i}: tomatoes need sun, water and patience." for i in range(60))
    rows = [{"id": "long", "text": long}, {"id": "short", "text": "Tomatoes need sun."},
            {"id": "other", "text": "A violin's bow is strung with horsehair."}]
    assert len(long) > 2000
    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    indexer_build("--data", str(data), "--model", str(minilm_mean), "--root", str(tmp_path / "root"), "--chunk", "off")
    srv = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(tmp_path / "root")})
    try:
        store = StrataVectorStore.from_url(srv.url)
        found = store.max_marginal_relevance_search("tomatoes need sun", k=2, fetch_k=3, lambda_mult=0.5)
        assert len(found) == 2 and {d.id for d in found} <= {"long", "short", "other"}
        assert any(len(d.page_content) > 2000 for d in store.similarity_search("gardening note", k=3))
    finally:
        stop_server(srv)
