"""`strata_client.llamaindex` against a real Strata server: LlamaIndex's vector store interface and a
VectorStoreIndex on it, sync and async; nodes written through PUT /documents come back as the nodes they were."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core import VectorStoreIndex  # noqa: E402
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode  # noqa: E402
from llama_index.core.vector_stores.types import (  # noqa: E402
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
)

from strata_client import Client, Document  # noqa: E402
from strata_client.llamaindex import StrataEmbedding, StrataVectorStore, strata_filter  # noqa: E402
from tests.conftest import Server  # noqa: E402

TEXTS = ["Tomatoes need six hours of sun and deep watering twice a week.",
         "Prune roses in late winter, just before new growth starts.",
         "A violin's bow is strung with horsehair and rosin."]


def nodes(prefix: str, source: str, year: int) -> list[TextNode]:
    """The texts as nodes of `source`, under a year of their own (the server is shared by the package's tests)."""
    out = []
    for i, text in enumerate(TEXTS):
        node = TextNode(id_=f"{prefix}-{i}", text=text, metadata={"topic": ("life", "life", "tech")[i], "year": year})
        node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=source)
        out.append(node)
    return out


def test_add_query_filters_modes_and_delete_by_source(corpus_server: Server) -> None:
    store = StrataVectorStore.from_url(corpus_server.url)
    written = nodes("li", "garden-guide", 2031)
    mine = MetadataFilters(filters=[MetadataFilter(key="year", value=2031)])
    assert store.add(written) == ["li-0", "li-1", "li-2"]
    result = store.query(VectorStoreQuery(query_str="how much sun do tomato plants need", similarity_top_k=1,
                                          mode=VectorStoreQueryMode.HYBRID, alpha=1.0, filters=mine))
    [node] = result.nodes
    assert (node.node_id, node.get_content(), node.metadata, node.ref_doc_id) == (
        "li-0", TEXTS[0], written[0].metadata, "garden-guide")
    assert result.ids == ["li-0"] and len(result.similarities) == 1
    # LlamaIndex filters become Strata's; doc_ids filter on the source document
    filters = MetadataFilters(filters=[MetadataFilter(key="topic", value="life"),
                                       MetadataFilter(key="year", value=2030, operator=FilterOperator.GT)])
    found = store.query(VectorStoreQuery(query_str="garden", similarity_top_k=10, filters=filters,
                                         doc_ids=["garden-guide"]))
    assert sorted(found.ids) == ["li-0", "li-1"]
    lexical = store.query(VectorStoreQuery(query_str="horsehair rosin", similarity_top_k=5,
                                           mode=VectorStoreQueryMode.TEXT_SEARCH))
    assert lexical.ids == ["li-2"]
    # a document indexed by Strata itself (not by LlamaIndex) comes back as a TextNode of its text and metadata
    corpus_hit = store.query(VectorStoreQuery(query_str="How do I learn a programming language?",
                                              similarity_top_k=1, filters=MetadataFilters(filters=[
                                                  MetadataFilter(key="topic", value=["tech", "money"],
                                                                 operator=FilterOperator.IN)])))
    assert corpus_hit.nodes[0].metadata["topic"] in ("tech", "money") and corpus_hit.nodes[0].get_content()
    # read back as written: by id (in the order asked), by filters (a scroll), both
    back = store.get_nodes(["li-2", "no-such-node", "li-0"])
    assert [(n.node_id, n.get_content(), n.ref_doc_id) for n in back] == [("li-2", TEXTS[2], "garden-guide"),
                                                                          ("li-0", TEXTS[0], "garden-guide")]
    assert [n.node_id for n in store.get_nodes(filters=mine)] == ["li-0", "li-1", "li-2"]
    assert [n.node_id for n in store.get_nodes(["li-1", "li-9"], filters=mine)] == ["li-1"]
    # an integer id (a built corpus's) is its node's id as a decimal string: read back and deleted by it
    store.client.upsert([Document(987_654, "Integer ids read back by their decimal string.", {"year": 2031})])
    assert [n.node_id for n in store.get_nodes(["987654"])] == ["987654"]  # was []
    assert [n.node_id for n in store.get_nodes(["987654"], filters=mine)] == ["987654"]
    store.delete_nodes(["987654"])  # deleted the string id "987654" only: none
    assert store.client.get(987_654) is None
    store.delete("garden-guide")  # every node of the source document, found by its metadata
    assert store.get_nodes(["li-0", "li-1", "li-2"]) == []
    left = store.query(VectorStoreQuery(query_str="tomatoes roses violin", similarity_top_k=50))
    assert not {"li-0", "li-1", "li-2"} & set(left.ids)


def test_filters_strata_cannot_express_are_refused_by_name() -> None:
    assert strata_filter(MetadataFilters(filters=[MetadataFilter(key="a", value=1), MetadataFilter(key="b", value=2)],
                                         condition=FilterCondition.OR)) == {"or": [{"a": 1}, {"b": 2}]}
    with pytest.raises(ValueError, match="no operator '!='"):
        strata_filter(MetadataFilter(key="a", value=1, operator=FilterOperator.NE))
    with pytest.raises(ValueError, match="no condition 'not'"):
        strata_filter(MetadataFilters(filters=[MetadataFilter(key="a", value=1)], condition=FilterCondition.NOT))


def test_vector_store_index_retriever_and_async(corpus_server: Server) -> None:
    client = Client(corpus_server.url)
    store = StrataVectorStore.from_url(corpus_server.url, mode="dense")
    index = VectorStoreIndex.from_vector_store(store, embed_model=StrataEmbedding(client))
    index.insert_nodes(nodes("vi", "handbook", 2034))
    mine = MetadataFilters(filters=[MetadataFilter(key="year", value=2034)])
    retrieved = index.as_retriever(similarity_top_k=2, filters=mine).retrieve("when should I prune roses")
    assert retrieved[0].node.node_id == "vi-1" and retrieved[0].score >= retrieved[1].score

    async def main() -> None:
        extra = TextNode(id_="vi-async", text="Saxophones are woodwind instruments made of brass.",
                         metadata={"year": 2034})
        assert await store.async_add([extra]) == ["vi-async"]
        got = await index.as_retriever(similarity_top_k=1, filters=mine).aretrieve("a brass woodwind instrument")
        assert got[0].node.node_id == "vi-async"
        assert [n.node_id for n in await store.aget_nodes(["vi-async", "vi-0"])] == ["vi-async", "vi-0"]
        assert [n.node_id for n in await store.aget_nodes(filters=mine)] == ["vi-0", "vi-1", "vi-2", "vi-async"]

    asyncio.run(main())
    index.delete_ref_doc("handbook", delete_from_docstore=True)  # LlamaIndex's own delete: the source's nodes
    left = set(store.query(VectorStoreQuery(query_str="roses saxophones", similarity_top_k=50)).ids)
    assert not left & {"vi-0", "vi-1", "vi-2"} and "vi-async" in left  # the node of no source stays
    store.delete_nodes(["vi-async"])
    assert not set(store.query(VectorStoreQuery(query_str="roses saxophones", similarity_top_k=50)).ids) & {
        "vi-0", "vi-1", "vi-2", "vi-async"}
    assert len(StrataEmbedding(client).get_text_embedding("a text")) == 384


def test_delete_ref_doc_on_a_version_built_without_the_field(demo_server: Server) -> None:
    """The served version knows no `ref_doc_id` (a Quora build): the written nodes' field filters at once, and
    deleting the last nodes that hold it (the field leaves the schema) ends the delete, no error."""
    store = StrataVectorStore.from_url(demo_server.url, mode="dense")
    index = VectorStoreIndex.from_vector_store(store, embed_model=StrataEmbedding(Client(demo_server.url)))
    index.insert_nodes(nodes("dr", "notes", 2040) + nodes("keep", "other-notes", 2040))
    index.delete_ref_doc("notes")
    left = set(store.query(VectorStoreQuery(query_str="tomatoes roses violin", similarity_top_k=50)).ids)
    assert not left & {"dr-0", "dr-1", "dr-2"} and {"keep-0", "keep-1", "keep-2"} <= left
    index.delete_ref_doc("other-notes")  # the last nodes holding the field
    index.delete_ref_doc("never-written")  # nothing to delete: no error either
    left = set(store.query(VectorStoreQuery(query_str="tomatoes roses violin", similarity_top_k=50)).ids)
    assert not left & {"keep-0", "keep-1", "keep-2"}
