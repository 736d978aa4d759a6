"""Micro-batching: concurrent requests share ONNX runs and still get exactly their own answers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import numpy as np

from indexer.runtime.layout import IndexRoot
from service.engine.searcher import Job, Searcher, SearchResult
from tests.conftest import Server, start_server, stop_server

QUERIES = ["How can I be a good geologist?", "What is the step by step guide to invest in share market?",
           "How do I learn Python?", "Why is the sky blue?", "What is the best smartphone under 15000?",
           "How can I lose weight fast?", "What is love?", "How do I get a job at Google?"]


def test_run_batch_equals_separate_calls(quora_root: Path) -> None:
    searcher = Searcher.open(IndexRoot(quora_root).current_dir())
    jobs = [Job(QUERIES[:2], 5), Job(QUERIES[2:3], None), Job(QUERIES[3:6], 10), Job(QUERIES[6:], 1)]
    batched = searcher.run_batch(jobs)
    assert [r.batch_texts for r in batched] == [len(QUERIES)] * 4
    for job, res in zip(jobs, batched, strict=True):
        k = job.top_k
        alone = searcher.run_batch([job])[0]
        if k is None:
            assert res.hits == [] and res.vectors is not None
            assert np.allclose(res.vectors, alone.vectors, atol=1e-5)
        else:
            assert [[h.faiss_id for h in q] for q in res.hits] == [[h.faiss_id for h in q] for q in alone.hits]
            assert all(len(q) == k for q in res.hits)
    searcher.close()


async def _burst(url: str, n: int) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        return await asyncio.gather(*(client.post("/search", json={"query": QUERIES[i % len(QUERIES)], "top_k": 5})
                                      for i in range(n)))


def _batches(metrics: str) -> tuple[float, float]:
    count = next(float(x.split()[1]) for x in metrics.splitlines() if x.startswith("strata_batch_texts_count"))
    total = next(float(x.split()[1]) for x in metrics.splitlines() if x.startswith("strata_batch_texts_sum"))
    return count, total


def _burst_runs(srv: Server) -> float:
    """30 concurrent /search requests: each answer must equal the same query's answer alone; returns the ONNX
    runs they took."""
    with srv.client() as c:
        expected = {q: [h["id"] for h in c.post("/search", json={"query": q, "top_k": 5}).json()["hits"]]
                    for q in QUERIES}
        before = _batches(c.get("/metrics").text)
        responses = asyncio.run(_burst(srv.url, 30))
        after = _batches(c.get("/metrics").text)
    assert all(r.status_code == 200 for r in responses)
    for i, r in enumerate(responses):
        assert [h["id"] for h in r.json()["hits"]] == expected[QUERIES[i % len(QUERIES)]]
    runs, texts = after[0] - before[0], after[1] - before[1]
    assert texts == 30
    return runs


def test_concurrent_requests_are_batched_and_answered_correctly(quora_root: Path, tmp_path: Path) -> None:
    srv = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(quora_root), "STRATA_WORKERS": "1",
                                  "STRATA_BATCH_WINDOW_MS": "5"})
    try:
        runs = _burst_runs(srv)
        assert runs < 30 / 2, f"30 concurrent requests took {runs} ONNX runs: not batched"
    finally:
        stop_server(srv)


def test_batching_can_be_switched_off(quora_root: Path, tmp_path: Path) -> None:
    srv = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(quora_root), "STRATA_MICRO_BATCHING": "false"})
    try:
        responses = asyncio.run(_burst(srv.url, 8))
        assert all(r.status_code == 200 for r in responses)
        with srv.client() as c:
            assert _batches(c.get("/metrics").text) == (0.0, 0.0)
    finally:
        stop_server(srv)
    assert IndexRoot(quora_root).current_version()




def _record_batches(max_texts: int, max_tokens: int, requests: list[list[str]], workers: int = 1) -> list[list[int]]:
    """Queue `requests` while one worker is held busy, release it, and return the batches in the order they
    started (as request indices). A text costs its word count, so the test sets costs exactly; a batch of a
    request with more than 100 words takes 0.1 s, the others no time."""
    from service.engine.batching import MicroBatcher

    ran: list[list[int]] = []

    async def scenario() -> None:
        release = asyncio.Event()
        index = {id(texts): i for i, texts in enumerate(requests)}
        blocker: list[str] = ["busy"]
        held = asyncio.Event()

        async def run(jobs: list[Job], routes: list[object]) -> list[tuple[object, SearchResult]]:
            if jobs[0].texts is blocker:
                held.set()
                await release.wait()
            else:
                ran.append([index[id(job.texts)] for job in jobs])
                if any(len(" ".join(job.texts).split()) > 100 for job in jobs):
                    await asyncio.sleep(0.1)
            return [(None, SearchResult([], [], 0.0, 0.0)) for _ in jobs]

        batcher = MicroBatcher(run, workers=workers, window_ms=0, max_texts=max_texts,  # type: ignore[arg-type]
                               max_tokens=max_tokens, count_tokens=lambda texts: sum(len(t.split()) for t in texts))
        batcher.start()
        first = batcher.submit(Job(blocker, 1))
        await held.wait()  # a worker is now held by the blocker
        futures = [batcher.submit(Job(texts, 1)) for texts in requests]
        release.set()
        await asyncio.gather(first, *futures)
        await batcher.stop()

    asyncio.run(scenario())
    return ran


def test_token_budget_keeps_long_requests_away_from_short_ones() -> None:
    def short() -> list[str]:
        return ["why is the sky blue"]  # 5 tokens; a new list each time: requests are told apart by identity

    long = ["word " * 300]  # 300 tokens
    requests = [short(), short(), long, short(), short()]
    # texts alone bound a batch: the long request rides with the short ones, which wait for its run
    assert _record_batches(64, 0, requests) == [[0, 1, 2, 3, 4]]
    # a 100-token budget: the short ones batch together (overtaking the long one), which then runs alone
    assert _record_batches(64, 100, requests) == [[0, 1, 3, 4], [2]]
    # light requests keep their order and stop at the first that does not fit
    assert _record_batches(64, 12, [short(), short(), short()]) == [[0, 1], [2]]
    # a budget that fits everything changes nothing; the text bound still applies
    assert _record_batches(64, 10_000, requests) == [[0, 1, 2, 3, 4]]
    assert _record_batches(2, 10_000, requests) == [[0, 1], [2, 3], [4]]


def test_heavy_requests_leave_a_worker_to_light_ones() -> None:
    """Two workers: one heavy batch at a time, so a short query queued behind two long requests runs before the
    second of them instead of waiting for both."""
    long1, long2, short = ["word " * 300], ["text " * 300], ["why is the sky blue"]
    assert _record_batches(64, 100, [long1, long2, short], workers=2) == [[0], [2], [1]]
    # without the bound, all three share one batch
    assert _record_batches(64, 0, [long1, long2, short], workers=2) == [[0, 1, 2]]


def test_token_budget_over_http_answers_every_request_correctly(quora_root: Path, tmp_path: Path) -> None:
    """A tight budget splits concurrent traffic into more runs; every answer is still exactly its own."""
    srv = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(quora_root), "STRATA_WORKERS": "1",
                                  "STRATA_BATCH_MAX_TOKENS": "40"})
    try:
        runs = _burst_runs(srv)
        # queries are 6-16 tokens: at most 40 tokens means at most ~5 texts per run, so more than 30 / 6 runs
        assert runs >= 30 / 6, f"{runs} runs for 30 requests under a 40-token budget"
    finally:
        stop_server(srv)
