"""LangChain integration (extra `langchain`: langchain-core): `StrataVectorStore`, a `VectorStore` whose texts are
embedded and searched by a Strata server, its retriever (`store.as_retriever()`), and `StrataEmbeddings`.

The server embeds: `add_texts`/`add_documents` send texts (`PUT /documents`), searches send the query text
(`POST /search`), so dense, lexical (BM25) and hybrid search all work and the vectors always come from the
encoder the index was built with. `embedding` arguments LangChain's interfaces take are not needed (pass None).

Ids: LangChain's are strings. Documents written here get string ids (`uuid4` when none is given); a corpus with
integer ids (a Quora build) returns them as decimal strings in `Document.id`; `delete` and `get_by_ids` find them
by that string (a string id "17" first, else the integer id 17).
Search options (`filter`, `mode`, `fusion`, `alpha`, `rrf_k`) are the store's defaults, and can be given per
call (`store.similarity_search(q, k=4, filter={"topic": "docs"}, mode="lexical")`) or to the retriever
(`store.as_retriever(search_kwargs={"k": 4, "filter": {...}})`). Maximal marginal relevance
(`max_marginal_relevance_search`, `as_retriever(search_type="mmr")`) embeds the query and the candidates' texts
with the server's encoder; the `_by_vector` variants are refused, naming the call to use (the server embeds
queries)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from langchain_core.documents import Document as LCDocument
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from strata_client._base import DEFAULT_TIMEOUT_S
from strata_client._calls import MAX_TEXT_CHARS, ints_meant, spelled_ints, text_ids_asked, text_ids_found
from strata_client.aio import AsyncClient
from strata_client.client import Client
from strata_client.types import Document, Found, SearchResult

_SEARCH_OPTIONS = ("filter", "mode", "fusion", "alpha", "rrf_k", "nprobe", "ef_search")
_MAX_TOP_K = 100  # the server's limit per query


def maximal_marginal_relevance(query: list[float], candidates: list[list[float]], k: int, lambda_mult: float
                               ) -> list[int]:
    """The indexes of `k` candidates chosen one at a time by lambda · sim(query) − (1 − lambda) · the highest sim to
    those already chosen (Carbonell & Goldstein 1998; LangChain's rule), sims the dot products of the server's unit
    vectors; the first is the most similar to the query. In plain Python: the client needs no numpy."""
    def dot(a: list[float], b: list[float]) -> float:
        return sum(x * y for x, y in zip(a, b, strict=True))

    to_query = [dot(query, c) for c in candidates]
    redundancy = [float("-inf")] * len(candidates)  # each candidate's highest sim to the chosen ones
    chosen: list[int] = []
    while len(chosen) < min(k, len(candidates)):
        left = [i for i in range(len(candidates)) if i not in chosen]
        best = max(left, key=lambda i: to_query[i] if not chosen else
                   lambda_mult * to_query[i] - (1 - lambda_mult) * redundancy[i])
        chosen.append(best)
        for i in left:
            redundancy[i] = max(redundancy[i], dot(candidates[i], candidates[best]))
    return chosen


class StrataEmbeddings(Embeddings):
    """The server's encoder as LangChain `Embeddings` (`/encode`; a collection's encoder through /v1)."""

    def __init__(self, client: Client, async_client: AsyncClient | None = None) -> None:
        self.client, self.async_client = client, async_client

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.client.encode(texts).vectors if texts else []

    def embed_query(self, text: str) -> list[float]:
        return self.client.encode([text]).vectors[0]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.async_client is None or not texts:
            return await super().aembed_documents(texts)
        return (await self.async_client.encode(texts)).vectors

    async def aembed_query(self, text: str) -> list[float]:
        if self.async_client is None:
            return await super().aembed_query(text)
        return (await self.async_client.encode([text])).vectors[0]


class StrataVectorStore(VectorStore):
    """A Strata server (one collection of it) as a LangChain vector store.

    `client` the sync client; `async_client` for the `a*` methods (without it they run the sync ones in a
    thread, as LangChain does by default); `filter`, `mode`, `fusion`, `alpha`, `rrf_k` the default search
    options (None: the server's)."""

    def __init__(self, client: Client, async_client: AsyncClient | None = None, *,
                 filter: dict[str, Any] | None = None, mode: str | None = None, fusion: str | None = None,
                 alpha: float | None = None, rrf_k: float | None = None) -> None:
        self.client, self.async_client = client, async_client
        self.defaults: dict[str, Any] = {"filter": filter, "mode": mode, "fusion": fusion, "alpha": alpha,
                                         "rrf_k": rrf_k}

    @classmethod
    def from_url(cls, url: str, api_key: str | None = None, collection: str | None = None, *,
                 timeout: float = DEFAULT_TIMEOUT_S, **defaults: Any) -> StrataVectorStore:
        """A store with its own sync and async clients."""
        return cls(Client(url, api_key, collection, timeout=timeout),
                   AsyncClient(url, api_key, collection, timeout=timeout), **defaults)

    @property
    def embeddings(self) -> Embeddings:
        return StrataEmbeddings(self.client, self.async_client)

    # -- writes ------------------------------------------------------------------------------------------------------

    @staticmethod
    def _documents(texts: Iterable[str], metadatas: list[dict[str, Any]] | None,
                   ids: list[str] | None) -> list[Document]:
        texts = list(texts)
        if metadatas is not None and len(metadatas) != len(texts):
            raise ValueError(f"{len(metadatas)} metadatas for {len(texts)} texts")
        if ids is not None and len(ids) != len(texts):
            raise ValueError(f"{len(ids)} ids for {len(texts)} texts")
        return [Document(ids[i] if ids and ids[i] is not None else str(uuid.uuid4()), text,
                         dict(metadatas[i]) if metadatas else {}) for i, text in enumerate(texts)]

    def add_texts(self, texts: Iterable[str], metadatas: list[dict[str, Any]] | None = None, *,
                  ids: list[str] | None = None, **kwargs: Any) -> list[str]:
        """Upsert the texts (a text whose id is served replaces it); durable and searchable on return."""
        docs = self._documents(texts, metadatas, ids)
        if docs:
            self.client.upsert(docs)
        return [str(d.id) for d in docs]

    async def aadd_texts(self, texts: Iterable[str], metadatas: list[dict[str, Any]] | None = None, *,
                         ids: list[str] | None = None, **kwargs: Any) -> list[str]:
        if self.async_client is None:
            return await super().aadd_texts(texts, metadatas, ids=ids, **kwargs)
        docs = self._documents(texts, metadatas, ids)
        if docs:
            await self.async_client.upsert(docs)
        return [str(d.id) for d in docs]

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Delete by id (Strata deletes by id only: `ids` is required); a decimal string no string id has deletes
        the integer id it spells (a hit's `Document.id` of a corpus built with integer ids)."""
        if not ids:
            raise ValueError("StrataVectorStore.delete needs the ids to delete")
        spelled = spelled_ints(ids)
        meant = ints_meant(spelled, self.client.get_many(text_ids_asked(spelled))) if spelled else []
        self.client.delete([*ids, *meant])
        return True

    async def adelete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        if self.async_client is None:
            return await super().adelete(ids, **kwargs)
        if not ids:
            raise ValueError("StrataVectorStore.adelete needs the ids to delete")
        spelled = spelled_ints(ids)
        meant = ints_meant(spelled, await self.async_client.get_many(text_ids_asked(spelled))) if spelled else []
        await self.async_client.delete([*ids, *meant])
        return True

    # -- reading back --------------------------------------------------------------------------------------------------

    @staticmethod
    def _found(ids: Sequence[str], found: Found) -> list[LCDocument]:
        """One document per id asked (its string id first, else the integer it spells), in the order asked."""
        return [LCDocument(page_content=d.text, metadata=d.metadata, id=str(d.id)) for d in text_ids_found(ids, found)]

    def get_by_ids(self, ids: Sequence[str], /) -> list[LCDocument]:
        """The documents with these ids as the server serves them now (writes included); ids no document has
        are left out."""
        ids = [str(i) for i in ids]
        return self._found(ids, self.client.get_many(text_ids_asked(ids))) if ids else []

    async def aget_by_ids(self, ids: Sequence[str], /) -> list[LCDocument]:
        if self.async_client is None:
            return await super().aget_by_ids(ids)
        ids = [str(i) for i in ids]
        return self._found(ids, await self.async_client.get_many(text_ids_asked(ids))) if ids else []

    # -- search ------------------------------------------------------------------------------------------------------

    def _options(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        unknown = set(kwargs) - set(_SEARCH_OPTIONS) - {"score_threshold"}
        if unknown:
            raise TypeError(f"unknown search option(s) {sorted(unknown)}; Strata takes {list(_SEARCH_OPTIONS)}")
        merged = self.defaults | {k: v for k, v in kwargs.items() if k in _SEARCH_OPTIONS}
        merged["k"] = merged.pop("rrf_k", None)
        return {k: v for k, v in merged.items() if v is not None}

    @staticmethod
    def _scored(result: SearchResult) -> list[tuple[LCDocument, float]]:
        return [(LCDocument(page_content=h.text, metadata=h.metadata, id=str(h.id)), h.score) for h in result.hits]

    def similarity_search_with_score(self, query: str, k: int = 4, **kwargs: Any) -> list[tuple[LCDocument, float]]:
        """The `k` best documents with Strata's scores (cosine in mode dense, BM25 in lexical, the fused score in
        hybrid: higher is better in every mode)."""
        return self._scored(self.client.search(query, top_k=k, **self._options(kwargs)))

    async def asimilarity_search_with_score(self, query: str, k: int = 4,
                                            **kwargs: Any) -> list[tuple[LCDocument, float]]:
        if self.async_client is None:
            return await super().asimilarity_search_with_score(query, k, **kwargs)
        return self._scored(await self.async_client.search(query, top_k=k, **self._options(kwargs)))

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[LCDocument]:
        return [doc for doc, _ in self.similarity_search_with_score(query, k, **kwargs)]

    async def asimilarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[LCDocument]:
        return [doc for doc, _ in await self.asimilarity_search_with_score(query, k, **kwargs)]

    def _relevance(self, result: SearchResult) -> list[tuple[LCDocument, float]]:
        """Relevance in [0, 1] exists for dense scores only (cosine of unit vectors, mapped by (1 + cos) / 2):
        BM25 is unbounded and a fused score is relative to the query's other candidates."""
        if result.mode != "dense":
            raise ValueError(f"relevance scores in [0, 1] need mode 'dense' (this search ran {result.mode!r}, whose "
                             "scores are not bounded similarities): pass mode='dense'")
        return [(doc, (1 + score) / 2) for doc, score in self._scored(result)]

    def _similarity_search_with_relevance_scores(self, query: str, k: int = 4,
                                                 **kwargs: Any) -> list[tuple[LCDocument, float]]:
        return self._relevance(self.client.search(query, top_k=k, **self._options(kwargs)))

    async def _asimilarity_search_with_relevance_scores(self, query: str, k: int = 4,
                                                        **kwargs: Any) -> list[tuple[LCDocument, float]]:
        if self.async_client is None:
            return await super()._asimilarity_search_with_relevance_scores(query, k, **kwargs)
        return self._relevance(await self.async_client.search(query, top_k=k, **self._options(kwargs)))

    # -- maximal marginal relevance ----------------------------------------------------------------------------------

    def _mmr(self, result: SearchResult, vectors: list[list[float]], k: int, lambda_mult: float) -> list[LCDocument]:
        docs = self._scored(result)
        return [docs[i][0] for i in maximal_marginal_relevance(vectors[0], vectors[1:], k, lambda_mult)]

    @staticmethod
    def _fetch(k: int, fetch_k: int) -> int:
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        return min(max(k, fetch_k), _MAX_TOP_K)

    def max_marginal_relevance_search(self, query: str, k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5,
                                      **kwargs: Any) -> list[LCDocument]:
        """`k` documents among the `fetch_k` best (at most 100, the server's top_k limit; any mode and filter)
        chosen for relevance and diversity: the query and the candidates' texts embedded by the server's encoder
        (`POST /encode`: search answers carry no vectors; a text past what the API takes, as a built corpus's
        documents may be, by its first `MAX_TEXT_CHARS`: the encoder's window is shorter), then LangChain's
        `maximal_marginal_relevance`."""
        result = self.client.search(query, top_k=self._fetch(k, fetch_k), **self._options(kwargs))
        if not result.hits:
            return []
        vectors = self.client.encode(_candidates(query, result)).vectors
        return self._mmr(result, vectors, k, lambda_mult)

    async def amax_marginal_relevance_search(self, query: str, k: int = 4, fetch_k: int = 20,
                                             lambda_mult: float = 0.5, **kwargs: Any) -> list[LCDocument]:
        if self.async_client is None:
            return self.max_marginal_relevance_search(query, k, fetch_k, lambda_mult, **kwargs)
        result = await self.async_client.search(query, top_k=self._fetch(k, fetch_k), **self._options(kwargs))
        if not result.hits:
            return []
        vectors = (await self.async_client.encode(_candidates(query, result))).vectors
        return self._mmr(result, vectors, k, lambda_mult)

    def similarity_search_by_vector(self, embedding: list[float], k: int = 4, **kwargs: Any) -> list[LCDocument]:
        raise NotImplementedError("StrataVectorStore searches by text (the server embeds the query): use "
                                  "similarity_search(query, k=...) with the query's text")

    def max_marginal_relevance_search_by_vector(self, embedding: list[float], k: int = 4, fetch_k: int = 20,
                                                lambda_mult: float = 0.5, **kwargs: Any) -> list[LCDocument]:
        raise NotImplementedError("StrataVectorStore searches by text (the server embeds the query): use "
                                  "max_marginal_relevance_search(query, k=..., fetch_k=...) with the query's text")

    @classmethod
    def from_texts(cls, texts: list[str], embedding: Embeddings | None = None,
                   metadatas: list[dict[str, Any]] | None = None, *, ids: list[str] | None = None,
                   url: str | None = None, client: Client | None = None, **kwargs: Any) -> StrataVectorStore:
        """Upsert `texts` into the server at `url` (or through `client`) and return the store; `embedding` is
        ignored (the server embeds with its index's encoder). Other keyword arguments: `from_url`'s."""
        if client is None and url is None:
            raise ValueError("StrataVectorStore.from_texts needs url= (or client=)")
        store = cls(client, **kwargs) if client is not None else cls.from_url(url, **kwargs)  # type: ignore[arg-type]
        store.add_texts(texts, metadatas, ids=ids)
        return store


def _candidates(query: str, result: SearchResult) -> list[str]:
    """MMR's texts to embed: the query, then each hit's text cut to what `/encode` takes (`MAX_TEXT_CHARS`)."""
    return [query, *(h.text[:MAX_TEXT_CHARS] for h in result.hits)]
