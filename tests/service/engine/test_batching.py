"""Micro-batching: concurrent requests share ONNX runs and still get exactly their own answers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import numpy as np

from indexer.runtime.layout import IndexRoot
from service.engine.searcher import Searcher
from tests.conftest import start_server, stop_server

QUERIES = ["How can I be a good geologist?", "What is the step by step guide to invest in share market?",
           "How do I learn Python?", "Why is the sky blue?", "What is the best smartphone under 15000?",
           "How can I lose weight fast?", "What is love?", "How do I get a job at Google?"]


def test_run_batch_equals_separate_calls(quora_root: Path) -> None:
    engine = Searcher.open(IndexRoot(quora_root).current_dir())
    jobs: list[tuple[list[str], int | None]] = [(QUERIES[:2], 5), (QUERIES[2:3], None), (QUERIES[3:6], 10),
                                                 (QUERIES[6:], 1)]
    batched = engine.run_batch(jobs)
    assert [r.batch_texts for r in batched] == [len(QUERIES)] * 4
    for (texts, k), res in zip(jobs, batched, strict=True):
        alone = engine.run_batch([(texts, k)])[0]
        if k is None:
            assert res.hits == [] and res.vectors is not None
            assert np.allclose(res.vectors, alone.vectors, atol=1e-5)
        else:
            assert [[h.id for h in q] for q in res.hits] == [[h.id for h in q] for q in alone.hits]
            assert all(len(q) == k for q in res.hits)
    engine.close()


async def _burst(url: str, n: int) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        return await asyncio.gather(*(client.post("/search", json={"query": QUERIES[i % len(QUERIES)], "top_k": 5})
                                      for i in range(n)))


def _batches(metrics: str) -> tuple[float, float]:
    count = next(float(x.split()[1]) for x in metrics.splitlines() if x.startswith("strata_batch_texts_count"))
    total = next(float(x.split()[1]) for x in metrics.splitlines() if x.startswith("strata_batch_texts_sum"))
    return count, total


def test_concurrent_requests_are_batched_and_answered_correctly(quora_root: Path, tmp_path: Path) -> None:
    srv = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(quora_root), "STRATA_WORKERS": "1",
                                  "STRATA_BATCH_WINDOW_MS": "5"})
    try:
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


