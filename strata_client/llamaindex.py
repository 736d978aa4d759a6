"""LlamaIndex integration (extra `llamaindex`: llama-index-core): `StrataVectorStore`, a vector store whose nodes
are embedded and searched by a Strata server, and `StrataEmbedding`, the server's encoder as an embed model.

The server embeds: `add` sends node texts (`PUT /documents`, the node id as the document id, the node's metadata
and LlamaIndex's own fields — `_node_content`, `ref_doc_id`, ... — as its metadata), and a query sends its text
(`is_embedding_query` is False: no query vector is computed on the client), so dense, lexical and hybrid search all
work (`VectorStoreQueryMode.DEFAULT`: the store's or the server's mode; `HYBRID` with `alpha` the dense weight, as
in LlamaIndex; `TEXT_SEARCH`/`SPARSE`: lexical). Hits of documents not written by LlamaIndex (an index built
with `indexer build`) come back as `TextNode`s with the document's text, id and metadata.

Filters become Strata filters: `==`, `>`, `>=`, `<`, `<=`, `in`, nested `and`/`or`; other operators are refused
with a ValueError naming them. `delete(ref_doc_id)` (what `VectorStoreIndex.delete_ref_doc` calls) and
`delete_nodes(filters=...)` find the nodes by a filtered search on their metadata (a written field filters at
once); `delete_nodes(node_ids)` deletes by id.
`get_nodes` reads nodes back by id (`get_many`) or by filters (a scroll through the matching documents)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import BaseNode, MetadataMode, TextNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)
from llama_index.core.vector_stores.utils import metadata_dict_to_node, node_to_metadata_dict

from strata_client._base import DEFAULT_TIMEOUT_S
from strata_client._calls import ints_meant, spelled_ints, text_ids_asked, text_ids_found
from strata_client.aio import AsyncClient
from strata_client.client import Client
from strata_client.errors import ValidationError
from strata_client.types import Document, SearchResult, StoredDocument

_OPERATORS = {FilterOperator.GT: "gt", FilterOperator.GTE: "gte", FilterOperator.LT: "lt", FilterOperator.LTE: "lte",
              FilterOperator.IN: "in"}
_MAX_TOP_K = 100  # the server's limit per query


def strata_filter(filters: MetadataFilters | MetadataFilter) -> dict[str, Any]:
    """LlamaIndex metadata filters as a Strata filter (docs/search.md#filtered-search)."""
    if isinstance(filters, MetadataFilter):
        if filters.operator == FilterOperator.EQ:
            return {filters.key: filters.value}
        if filters.operator in _OPERATORS:
            return {filters.key: {_OPERATORS[filters.operator]: filters.value}}
        raise ValueError(f"Strata filters have no operator {filters.operator.value!r} (they take ==, >, >=, <, <=, "
                         "in, and/or)")
    condition = filters.condition or FilterCondition.AND
    if condition not in (FilterCondition.AND, FilterCondition.OR):
        raise ValueError(f"Strata filters have no condition {condition.value!r} (they take and, or)")
    parts = [strata_filter(f) for f in filters.filters]
    return parts[0] if len(parts) == 1 else {condition.value: parts}


def _search_mode(mode: VectorStoreQueryMode) -> str | None:
    if mode == VectorStoreQueryMode.DEFAULT:
        return None
    if mode == VectorStoreQueryMode.HYBRID:
        return "hybrid"
    if mode in (VectorStoreQueryMode.TEXT_SEARCH, VectorStoreQueryMode.SPARSE):
        return "lexical"
    raise ValueError(f"Strata has no query mode {mode.value!r} (default, hybrid, text_search/sparse)")


class StrataEmbedding(BaseEmbedding):
    """The server's encoder as a LlamaIndex embed model (`/encode`; a collection's encoder through /v1)."""

    _client: Client = PrivateAttr()
    _aclient: AsyncClient | None = PrivateAttr(default=None)

    def __init__(self, client: Client, async_client: AsyncClient | None = None, **kwargs: Any) -> None:
        super().__init__(model_name=kwargs.pop("model_name", "strata"), embed_batch_size=64, **kwargs)
        self._client, self._aclient = client, async_client

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._client.encode([query]).vectors[0]

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._client.encode([text]).vectors[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._client.encode(texts).vectors

    async def _aget_query_embedding(self, query: str) -> list[float]:
        if self._aclient is None:
            return self._get_query_embedding(query)
        return (await self._aclient.encode([query])).vectors[0]

    async def _aget_text_embedding(self, text: str) -> list[float]:
        return await self._aget_query_embedding(text)


class StrataVectorStore(BasePydanticVectorStore):
    """A Strata server (one collection of it) as a LlamaIndex vector store. `mode`, `alpha` the default search
    options (None: the server's); `async_client` for the `a*` methods (else they run the sync ones)."""

    stores_text: bool = True
    is_embedding_query: bool = False
    flat_metadata: bool = False
    mode: str | None = None
    alpha: float | None = None

    _client: Client = PrivateAttr()
    _aclient: AsyncClient | None = PrivateAttr(default=None)

    def __init__(self, client: Client, async_client: AsyncClient | None = None, *, mode: str | None = None,
                 alpha: float | None = None) -> None:
        super().__init__(mode=mode, alpha=alpha)  # type: ignore[call-arg]  # this class's pydantic fields
        self._client, self._aclient = client, async_client

    @classmethod
    def from_url(cls, url: str, api_key: str | None = None, collection: str | None = None, *,
                 timeout: float = DEFAULT_TIMEOUT_S, **kwargs: Any) -> StrataVectorStore:
        return cls(Client(url, api_key, collection, timeout=timeout),
                   AsyncClient(url, api_key, collection, timeout=timeout), **kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "StrataVectorStore"

    @property
    def client(self) -> Client:
        return self._client

    # -- writes ------------------------------------------------------------------------------------------------------

    @staticmethod
    def _documents(nodes: Sequence[BaseNode]) -> list[Document]:
        return [Document(n.node_id, n.get_content(metadata_mode=MetadataMode.NONE),
                         node_to_metadata_dict(n, remove_text=True, flat_metadata=False)) for n in nodes]

    def add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        """Upsert the nodes (their embeddings, if any, are not sent: the server embeds their text)."""
        if nodes:
            self._client.upsert(self._documents(nodes))
        return [n.node_id for n in nodes]

    async def async_add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        if self._aclient is None:
            return self.add(nodes)
        if nodes:
            await self._aclient.upsert(self._documents(nodes))
        return [n.node_id for n in nodes]

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Delete every node of the source document `ref_doc_id`."""
        self._delete_matching({"ref_doc_id": ref_doc_id})

    def delete_nodes(self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None,
                     **delete_kwargs: Any) -> None:
        """Delete nodes by id, and/or those matching `filters`."""
        if node_ids:  # an integer id (a built corpus's) is its node's id as a decimal string
            spelled = spelled_ints(node_ids)
            meant = ints_meant(spelled, self._client.get_many(text_ids_asked(spelled))) if spelled else []
            self._client.delete([*node_ids, *meant])
        if filters is not None:
            self._delete_matching(strata_filter(filters))

    def _delete_matching(self, flt: dict[str, Any]) -> None:
        """Search the matching nodes (100 a pass) and delete them until none is left; a pass that deletes
        nothing new ends it (no loop on a search that keeps answering deleted ids; a field no document holds
        matches none)."""
        while True:
            try:
                hits = self._client.search("*", top_k=_MAX_TOP_K, filter=flt, mode="dense").hits
            except ValidationError as exc:
                raise ValueError(f"cannot find the nodes to delete by {flt}: {exc.reason} "
                                 "(delete_nodes(node_ids=...) deletes by id)") from exc
            if not hits or self._client.delete([h.id for h in hits]).deleted == 0:
                return

    # -- reading back --------------------------------------------------------------------------------------------------

    @staticmethod
    def _node(doc: StoredDocument) -> BaseNode:
        if "_node_content" in doc.metadata:  # written by LlamaIndex: the node as it was
            return metadata_dict_to_node(doc.metadata, text=doc.text)
        return TextNode(id_=str(doc.id), text=doc.text, metadata=doc.metadata)  # indexed by Strata itself

    def get_nodes(self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None
                  ) -> list[BaseNode]:
        """The nodes with these ids (in their order; ids no node has left out), or those matching `filters` (a
        scroll through them), or both (those of `node_ids` that match); neither: every node."""
        if filters is None and node_ids is not None:
            ids = [str(i) for i in node_ids]
            return [self._node(d) for d in text_ids_found(ids, self._client.get_many(text_ids_asked(ids)))] \
                if ids else []
        wanted = None if node_ids is None else set(node_ids)
        docs = self._client.iter_documents(filter=None if filters is None else strata_filter(filters))
        return [self._node(d) for d in docs if wanted is None or str(d.id) in wanted]

    async def aget_nodes(self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None
                         ) -> list[BaseNode]:
        if self._aclient is None:
            return self.get_nodes(node_ids, filters)
        if filters is None and node_ids is not None:
            ids = [str(i) for i in node_ids]
            return [self._node(d) for d in text_ids_found(ids, await self._aclient.get_many(text_ids_asked(ids)))] \
                if ids else []
        wanted = None if node_ids is None else set(node_ids)
        docs = self._aclient.iter_documents(filter=None if filters is None else strata_filter(filters))
        return [self._node(d) async for d in docs if wanted is None or str(d.id) in wanted]

    # -- queries -----------------------------------------------------------------------------------------------------

    def _search_options(self, query: VectorStoreQuery) -> dict[str, Any]:
        if query.query_str is None:
            raise ValueError("StrataVectorStore searches by text: the query needs query_str (Strata embeds it)")
        if query.node_ids:
            raise ValueError("Strata filters on metadata, not node ids: use filters (or doc_ids)")
        parts = [strata_filter(query.filters)] if query.filters and query.filters.filters else []
        if query.doc_ids:
            parts.append({"ref_doc_id": {"in": list(query.doc_ids)}})
        mode = _search_mode(query.mode) or self.mode
        options: dict[str, Any] = {"top_k": min(query.similarity_top_k, _MAX_TOP_K), "mode": mode,
                                   "filter": parts[0] if len(parts) == 1 else {"and": parts} if parts else None}
        alpha = query.alpha if query.alpha is not None else self.alpha
        if alpha is not None and mode in ("hybrid", None):
            options["alpha"] = alpha
        return options

    @classmethod
    def _result(cls, result: SearchResult) -> VectorStoreQueryResult:
        nodes = [cls._node(StoredDocument(h.id, h.text, h.metadata)) for h in result.hits]
        return VectorStoreQueryResult(nodes=nodes, similarities=[h.score for h in result.hits],
                                      ids=[n.node_id for n in nodes])

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        options = self._search_options(query)
        return self._result(self._client.search(query.query_str, **options))  # type: ignore[arg-type]

    async def aquery(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        if self._aclient is None:
            return self.query(query, **kwargs)
        options = self._search_options(query)
        return self._result(await self._aclient.search(query.query_str, **options))  # type: ignore[arg-type]
