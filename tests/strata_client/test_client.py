"""`strata_client.Client` and `AsyncClient` against real Strata servers (see conftest.py): the answers are the
HTTP API's, writes are durable and searchable, refusals raise the exception of their status with the server's
reason, 429/503 are retried honouring Retry-After within the policy's bounds."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import httpx
import pytest

from strata_client import (
    NO_RETRY,
    AsyncClient,
    AuthenticationError,
    Client,
    Document,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
    RetryPolicy,
    ServiceUnavailableError,
    TransportError,
    ValidationError,
)
from tests.conftest import Server, free_port
from tests.strata_client.conftest import ADMIN_KEY, READ_KEY, TOPICS
from tests.strata_client.scripted import scripted_server

QUERY = "How do I learn a programming language?"
SEARCHES: list[dict[str, Any]] = [{}, {"mode": "dense"}, {"mode": "lexical"}, {"mode": "hybrid", "alpha": 0.8},
                                  {"mode": "hybrid", "fusion": "rrf", "k": 20}, {"filter": {"topic": "tech"}},
                                  {"filter": {"and": [{"year": {"gte": 2010}}, {"topic": {"in": ["life", "money"]}}]},
                                   "mode": "dense"}]


@pytest.mark.parametrize("options", SEARCHES, ids=[str(s) for s in SEARCHES])
def test_search_is_the_http_apis_answer(corpus_server: Server, options: dict[str, Any]) -> None:
    with Client(corpus_server.url) as strata, corpus_server.client() as raw:
        result = strata.search(QUERY, top_k=7, **options)
        want = raw.post("/search", json={"query": QUERY, "top_k": 7, **options}).json()
    assert [(h.id, h.text, h.metadata) for h in result] == [(h["id"], h["text"], h["metadata"]) for h in want["hits"]]
    assert [h.score for h in result] == pytest.approx([h["score"] for h in want["hits"]], abs=1e-6)
    assert len(result) == 7 and result.mode == want["mode"] == options.get("mode", "hybrid")
    assert result.index_version == want["index_version"] and set(result.stages) == set(want["stages"])
    if options.get("filter") == {"topic": "tech"}:
        assert all(h.metadata["topic"] == "tech" for h in result)
    elif "filter" in options:
        assert all(h.metadata["year"] >= 2010 and h.metadata["topic"] in TOPICS[1:] for h in result)


def test_writes_on_a_version_of_passages_count_documents_and_their_passage_rows_apart(passages_server: Server
                                                                                    ) -> None:
    """The client's write results carry the server's passage counts (None on a version of documents); the document
    written is deleted again, so the package's server keeps its 30 documents."""
    long_text = " ".join(f"sentence {i} about rivers and mountains of the north." for i in range(40))
    with Client(passages_server.url) as strata:
        up = strata.upsert([{"id": 9001, "text": long_text}, {"id": 9002, "text": "one short question?"}])
        assert (up.upserted, up.created, up.replaced) == (2, 2, 0) and up.passages_written is not None
        assert up.passages_written > 2  # the long text is several passages, counted apart from documents
        gone = strata.delete([9001, 9002, 9003])
        assert (gone.deleted, gone.missing, gone.passages_deleted) == (2, 1, up.passages_written)
    assert httpx.get(f"{passages_server.url}/ready").json()["documents"] == 30


def test_hits_of_a_version_of_passages_carry_their_passage_and_snippet(passages_server: Server,
                                                                     corpus_server: Server) -> None:
    with Client(passages_server.url) as strata, passages_server.client() as raw:
        for passages in (None, True):
            result = strata.search(QUERY, top_k=5, mode="hybrid", passages=passages)
            want = raw.post("/search", json={"query": QUERY, "top_k": 5, "mode": "hybrid",
                                             **({"passages": True} if passages else {})}).json()["hits"]
            assert [(h.id, h.text) for h in result] == [(h["id"], h["text"]) for h in want]
            assert [(h.passage.index, h.passage.start, h.passage.end, h.passage.count, h.snippet) for h in result] == \
                [tuple(h["passage"][f] for f in ("index", "start", "end", "count", "snippet")) for h in want]
            assert all(h.snippet and h.passage.end > h.passage.start for h in result)
            ids = [h.id for h in result]
            assert len(set(ids)) == 5 if not passages else len(ids) == 5
            bare = strata.search(QUERY, top_k=5, mode="hybrid", passages=passages, snippets=False)
            assert [(h.id, h.passage.start, h.snippet) for h in bare] == [(h.id, h.passage.start, "") for h in result]
    with Client(corpus_server.url) as strata:  # whole documents: no passage, no snippet
        assert all(h.passage is None and h.snippet is None for h in strata.search(QUERY, top_k=3))
    # /ready and GET /collections count passages apart from documents
    ready = httpx.get(f"{passages_server.url}/ready").json()
    assert ready["documents"] == 30 and ready["passages"] == ready["index_size"] > 30
    [listed] = httpx.get(f"{passages_server.url}/collections").json()["collections"]
    assert (listed["documents"], listed["passages"]) == (30, ready["passages"])
    index = httpx.get(f"{passages_server.url}/stats").json()["index"]  # the search page's index card reads it
    assert (index["documents"], index["passages"]) == (30, ready["passages"])
    whole = httpx.get(f"{corpus_server.url}/ready").json()
    assert "passages" not in whole and whole["documents"] == whole["index_size"]


def test_search_many_and_encode_split_at_the_servers_limits(corpus_server: Server) -> None:
    queries = [f"question number {i} about money" for i in range(70)]  # over 64: two requests
    with Client(corpus_server.url) as strata, corpus_server.client() as raw:
        results = strata.search_many(queries, top_k=3, mode="dense")
        assert [r.query for r in results] == queries
        for i in (0, 69):
            assert results[i].ids == [h["id"] for h in raw.post("/search", json={
                "query": queries[i], "top_k": 3, "mode": "dense"}).json()["hits"]]
        embedded = strata.encode(queries)
        assert len(embedded.vectors) == 70 and embedded.dim == 384 and embedded.truncated == [False] * 70
        want = raw.post("/encode", json={"texts": queries[64:]}).json()["vectors"]
        assert embedded.vectors[64:] == want
        # a collection's encoder is reached through /v1/embeddings: the same vectors
        via_v1 = strata.with_collection("default").encode(queries[:2]).vectors
        assert via_v1[0] == pytest.approx(embedded.vectors[0], abs=1e-6)


def test_writes_are_durable_searchable_and_batched(corpus_server: Server) -> None:
    docs = [Document(f"w-{i}", f"Strata client write number {i} about gardening tomatoes", {"topic": "life",
                     "year": 2024}) for i in range(130)]  # over 128: two PUTs
    with Client(corpus_server.url) as strata:
        before = strata.ready().index_size
        up = strata.upsert(docs)
        assert (up.upserted, up.created, up.replaced, up.index_size) == (130, 130, 0, before + 130)
        hit = strata.search("write number 77 about gardening tomatoes", top_k=1, mode="dense").hits[0]
        assert (hit.id, hit.metadata) == ("w-77", {"topic": "life", "year": 2024})
        # dicts and tuples too; the same id replaces
        again = strata.upsert([{"id": "w-1", "text": "replaced text about a violin"}, ("w-2", "a cello", {"year": 1})])
        assert (again.created, again.replaced) == (0, 2)
        violin = strata.search("violin", top_k=1, mode="lexical").hits[0]
        assert (violin.id, violin.text, violin.metadata) == ("w-1", "replaced text about a violin", {})
        gone = strata.delete([d.id for d in docs] + ["never-written"])
        assert (gone.deleted, gone.missing, gone.index_size) == (130, 1, before)
        assert "w-77" not in strata.search("write number 77 gardening", top_k=10).ids


def test_refusals_raise_their_exception_with_the_servers_reason(corpus_server: Server) -> None:
    with Client(corpus_server.url) as strata:
        with pytest.raises(ValidationError, match="colour: unknown operator 'near'") as bad:
            strata.search(QUERY, filter={"colour": {"near": "red"}})
        assert bad.value.status == 422 and bad.value.request_id and bad.value.attempts == 1
        with pytest.raises(ValidationError, match=r"top_k: .*less than or equal to 100"):
            strata.search(QUERY, top_k=101)
        with pytest.raises(ValidationError, match="the limit is 200000"):
            strata.upsert([Document("long", "x" * 200_001)])
        with pytest.raises(NotFoundError, match="default"):  # the reason names the collections served
            strata.with_collection("nope").search(QUERY)
        with pytest.raises(TypeError, match="a single id goes in a list"):
            strata.delete("w-1")  # type: ignore[arg-type]


def test_ready_stats_and_collections(corpus_server: Server) -> None:
    with Client(corpus_server.url) as strata:
        assert strata.health() and strata.wait_ready(5).ready
        assert {type(h.id) for h in strata.search(QUERY, top_k=30, mode="dense")} == {int, str}  # as the corpus
        [info] = strata.collections()
        assert (info.name, info.default, info.dim, info.default_mode) == ("default", True, 384, "hybrid")
        assert strata.collection_info("default").documents == info.documents == strata.ready().index_size
        strata.search(QUERY)
        stats = strata.stats()
        assert stats.ready and stats.index is not None and stats.windows[0]["requests"] >= 1


def test_keys_and_scopes(capped_server: Server) -> None:
    with Client(capped_server.url) as anonymous:
        with pytest.raises(AuthenticationError, match="missing API key"):
            anonymous.search(QUERY)
    with Client(capped_server.url, api_key=READ_KEY) as reader:
        assert len(reader.search(QUERY, top_k=2)) == 2
        with pytest.raises(PermissionDeniedError, match="lacks the 'admin' scope"):
            reader.upsert([Document("k-1", "a keyed write")])
    with Client(capped_server.url, api_key=ADMIN_KEY) as admin:
        assert admin.upsert([Document("k-1", "a keyed write")]).created == 1
        assert admin.reload().outcome == "unchanged"


HEAVY = [("many different words in a long sentence " * 45)[:1990]] * 8  # 8 × 256 tokens: a fraction of a second


def test_429s_of_a_full_server_are_retried_after_retry_after(capped_server: Server) -> None:
    """In-flight cap 1: concurrent encodes get real 429s (Retry-After: 1); with retries every call ends in 200."""
    seen: list[int] = []

    def run(policy: RetryPolicy, errors: list[Exception], start: threading.Barrier) -> None:
        start.wait()
        http = httpx.Client(base_url=capped_server.url, timeout=60,
                            event_hooks={"response": [lambda r: seen.append(r.status_code)]})
        try:
            Client(capped_server.url, READ_KEY, retry=policy, http=http).encode(HEAVY)
        except Exception as exc:  # noqa: BLE001 - collected, asserted below
            errors.append(exc)
        finally:
            http.close()

    def burst(policy: RetryPolicy) -> list[Exception]:
        errors: list[Exception] = []
        start = threading.Barrier(3)
        threads = [threading.Thread(target=run, args=(policy, errors, start)) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return errors

    refused = burst(NO_RETRY)
    assert refused and all(isinstance(e, RateLimitError) and e.retry_after_s == 1 and "busy" in e.reason
                           for e in refused)
    seen.clear()
    assert burst(RetryPolicy(max_attempts=10, max_total_s=60)) == []
    assert 429 in seen and seen.count(200) == 3


def test_503_retry_after_is_honoured_and_bounded() -> None:
    ok = {"hits": [], "truncated": False, "took_ms": 1, "encode_ms": 0, "search_ms": 0, "index_version": "v",
          "mode": "dense", "stages": {}}
    unavailable = (503, {"Retry-After": "1"}, {"detail": "no index loaded yet"})
    with scripted_server([unavailable, unavailable, (200, {}, ok)]) as (url, script):
        with Client(url) as strata:
            assert strata.search(QUERY).hits == []
        gaps = [b - a for a, b in zip(script.arrivals, script.arrivals[1:], strict=False)]
        assert len(script.arrivals) == 3 and all(g >= 1.0 for g in gaps), gaps
    # never earlier than asked, never past the budget: the wait that would pass max_total_s is not started
    with scripted_server([unavailable]) as (url, script):
        with Client(url, retry=RetryPolicy(max_attempts=10, max_total_s=2.5)) as strata:
            with pytest.raises(ServiceUnavailableError, match="no index loaded yet") as err:
                strata.search(QUERY)
        assert err.value.attempts == len(script.arrivals) == 3
    # no Retry-After: exponential backoff, bounded by max_attempts
    with scripted_server([(503, {}, {"detail": "write log unwritable"})]) as (url, script):
        with Client(url, retry=RetryPolicy(max_attempts=3, backoff_s=0.05)) as strata:
            with pytest.raises(ServiceUnavailableError) as err:
                strata.upsert([Document("a", "b")])
        assert err.value.attempts == len(script.arrivals) == 3 and script.paths[0] == "/documents"


def test_the_default_timeout_outlasts_the_servers_deadline_so_its_504_reason_arrives() -> None:
    """A write of long documents past the server's deadline (30 s by default) answers a 504 naming it; a client
    timing out at the same 30 s raised a bare ReadTimeout a moment before that answer came."""
    from service.engine.settings import EngineSettings
    from strata_client import AsyncClient
    from strata_client.langchain import StrataVectorStore as LangChainStore
    from strata_client.llamaindex import StrataVectorStore as LlamaIndexStore

    deadline = EngineSettings.model_fields["request_timeout_s"].default
    assert Client("http://127.0.0.1:1").timeout >= deadline + 5
    assert AsyncClient("http://127.0.0.1:1").timeout >= deadline + 5
    assert LangChainStore.from_url("http://127.0.0.1:1").client.timeout >= deadline + 5
    assert LlamaIndexStore.from_url("http://127.0.0.1:1").client.timeout >= deadline + 5


def test_a_server_not_listening_is_a_transport_error_after_the_retries() -> None:
    with Client(f"http://127.0.0.1:{free_port()}", retry=RetryPolicy(max_attempts=2, backoff_s=0.01)) as strata:
        with pytest.raises(TransportError, match="after 2 attempts"):
            strata.search(QUERY)


def test_async_client_has_the_same_answers(corpus_server: Server) -> None:
    async def main() -> None:
        async with AsyncClient(corpus_server.url) as strata:
            queries = ["Why is the sky blue?", QUERY, "How can I make money online?"]
            results = await asyncio.gather(*(strata.search(q, top_k=5, mode="dense") for q in queries))
            with Client(corpus_server.url) as sync:
                assert [r.ids for r in results] == [sync.search(q, top_k=5, mode="dense").ids for q in queries]
            up = await strata.upsert([Document("async-1", "an asynchronously written note on saxophones")])
            assert up.created == 1
            assert (await strata.search("saxophones", top_k=1, mode="lexical")).ids == ["async-1"]
            assert (await strata.delete(["async-1"])).deleted == 1
            assert (await strata.ready()).ready and (await strata.collections())[0].name == "default"
            assert len((await strata.encode("one text")).vectors) == 1
            with pytest.raises(ValidationError, match="unknown operator"):
                await strata.search(QUERY, filter={"colour": {"near": "red"}})

        unavailable = (503, {"Retry-After": "0.2"}, {"detail": "not yet"})
        with scripted_server([unavailable, (200, {}, {"status": "ok"})]) as (url, script):
            async with AsyncClient(url) as strata:
                t0 = time.monotonic()
                assert await strata.health()
                assert time.monotonic() - t0 >= 0.2 and len(script.arrivals) == 2

    asyncio.run(main())


def test_documents_read_back_by_id_counted_and_scrolled(corpus_server: Server,
                                                        corpus_rows_: list[dict[str, Any]]) -> None:
    """get/get_many/count/scroll on the built version and right after writes, sync and async (each test writes
    under a topic of its own: the server is shared by the package's tests)."""
    row = corpus_rows_[2]  # an integer id
    docs = [Document(f"rb-{i}", f"a note read back, number {i}", {"topic": "readback", "year": 1990 + i})
            for i in range(5)]
    mine = {"topic": "readback"}
    with Client(corpus_server.url) as strata:
        built = strata.get(row["id"])
        assert built is not None and (built.id, built.text) == (row["id"], row["text"])
        assert built.metadata == {k: row[k] for k in ("topic", "year", "ref_doc_id")} and built.vector is None
        assert strata.count(mine) == 0 and strata.get("rb-0") is None
        strata.upsert(docs)
        got = strata.get("rb-3", with_vector=True)
        assert got is not None and (got.text, got.metadata) == (docs[3].text, docs[3].metadata)
        assert got.vector == pytest.approx(strata.encode(docs[3].text).vectors[0], abs=1e-5)
        found = strata.get_many(["rb-4", "missing", "rb-0", row["id"]])
        assert [d.id for d in found] == ["rb-4", "rb-0", row["id"]] and found.not_found == ["missing"]
        assert strata.count(mine) == 5 and strata.count({"topic": "readback", "year": {"gte": 1993}}) == 2
        page = strata.scroll(limit=2, filter=mine)
        assert [d.id for d in page] == ["rb-0", "rb-1"] and page.next_cursor
        assert [d.id for d in strata.scroll(limit=3, cursor=page.next_cursor, filter=mine)] == ["rb-2", "rb-3", "rb-4"]
        assert [d.id for d in strata.iter_documents(filter=mine, batch_size=2)] == [d.id for d in docs]
        strata.delete(["rb-1"])
        assert strata.get("rb-1") is None and strata.count(mine) == 4
        with pytest.raises(ValidationError, match="not one this API made"):
            strata.scroll(cursor="nonsense")
        with pytest.raises(ValueError, match="limit must be 1..1000"):
            strata.scroll(limit=0)
        with pytest.raises(TypeError, match="get_many takes several"):
            strata.get(["rb-0"])  # type: ignore[arg-type]

    async def main() -> None:
        async with AsyncClient(corpus_server.url) as strata:
            assert (await strata.get("rb-0")).text == docs[0].text  # type: ignore[union-attr]
            assert [d.id for d in await strata.get_many(["rb-2", "rb-1"])] == ["rb-2"]
            assert await strata.count(mine) == 4
            assert [d.id for d in await strata.scroll(limit=10, filter=mine)] == ["rb-0", "rb-2", "rb-3", "rb-4"]
            assert [d.id async for d in strata.iter_documents(filter=mine, batch_size=3)] == [
                "rb-0", "rb-2", "rb-3", "rb-4"]
            await strata.delete(["rb-0", "rb-2", "rb-3", "rb-4"])
            assert await strata.count(mine) == 0

    asyncio.run(main())
