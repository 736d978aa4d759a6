"""A request that fails inside a micro-batch fails alone: `Searcher.run_batch` on a real version and encoder, with
jobs that break each shared step (the filter lookup, the ONNX run, the index search) in ways the HTTP layer now
refuses earlier — the defence in depth that keeps one bad request from turning good ones in its batch into 500s."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from indexer.runtime.layout import IndexRoot
from service.engine.errors import BadFilter
from service.engine.searcher import Job, Searcher

QUERIES = ["How can I be a good geologist?", "How do I learn Python?", "Why is the sky blue?",
           "How can I lose weight fast?"]

BREAKERS = {
    "filter": Job(["How do I learn Python?"], 5, {"bucket": {1, 2}}),  # not JSON: the filter cache key raises
    "encode": Job(["a lone surrogate \ud800"], 5),  # the tokenizer raises, for the whole shared run
    "search": Job(["How do I learn Python?"], 10**12),  # FAISS's result arrays cannot be allocated
}


@pytest.fixture(scope="module")
def searcher(quora_root: Path) -> Iterator[Searcher]:
    s = Searcher.open(IndexRoot(quora_root).current_dir(), threads=1)
    yield s
    s.close()


@pytest.mark.parametrize("step", sorted(BREAKERS))
def test_a_request_that_breaks_a_shared_step_fails_alone(searcher: Searcher, step: str) -> None:
    """1 breaking job among 16 good ones (search and encode-only, unfiltered): it gets its exception as `error`,
    each good one exactly the answer it gets alone."""
    good = [Job([QUERIES[i % 4]], 5) if i % 4 else Job([QUERIES[i % 4]], None) for i in range(16)]
    jobs = good[:7] + [BREAKERS[step]] + good[7:]
    results = searcher.run_batch(jobs)
    bad = results.pop(7)
    assert bad.error is not None and not isinstance(bad.error, BadFilter), bad.error
    assert bad.hits == []
    for job, res in zip(good, results, strict=True):
        alone = searcher.run_batch([job])[0]
        assert res.error is None
        if job.top_k is None:
            assert res.vectors is not None and alone.vectors is not None
            assert abs(res.vectors - alone.vectors).max() < 1e-5
        else:
            assert [[h.faiss_id for h in q] for q in res.hits] == [[h.faiss_id for h in q] for q in alone.hits]
            assert all(len(q) == 5 for q in res.hits)
    with pytest.raises(type(bad.error)):  # on its own, `search` raises it (the swap's probe relies on that)
        searcher.search(BREAKERS[step].texts, BREAKERS[step].top_k or 1, BREAKERS[step].filter)


def test_a_batch_of_mixed_modes_answers_each_request_as_alone(searcher: Searcher) -> None:
    """Dense, lexical (not encoded: no rows of the ONNX run), hybrid and encode-only requests, with search
    parameters or not, in one batch (filters across modes: tests/service/test_search_modes.py) — and a hybrid
    request whose encoding breaks it: it fails alone, the lexical search that ran for it on the searcher's thread
    is dropped, and every other request gets its answer alone."""
    assert searcher.manifest.lexical is not None
    nprobe = {"nprobe": 2} if searcher.index.kind == "ivf" else None
    good = [Job([QUERIES[0]], 5, None, None, "lexical"), Job(QUERIES[:2], 5, None, None, "hybrid"),
            Job([QUERIES[1]], None), Job([QUERIES[2]], 7, None, None, "lexical"), Job([QUERIES[3]], 5),
            Job(QUERIES[2:], 4, None, None, "hybrid"), Job([QUERIES[0]], 6, None, nprobe, "hybrid"),
            Job([QUERIES[1]], 3, None, nprobe, "dense"), Job(QUERIES[1:3], 5, None, None, "lexical")]
    breaker = Job(["a lone surrogate \ud800"], 5, None, None, "hybrid")
    jobs = good[:4] + [breaker] + good[4:]
    results = searcher.run_batch(jobs)
    bad = results.pop(4)
    assert bad.error is not None and bad.hits == []
    for job, res in zip(good, results, strict=True):
        alone = searcher.run_batch([job])[0]
        assert res.error is None and alone.error is None
        assert res.mode == (None if job.top_k is None else job.mode or "dense")
        if job.top_k is None:
            assert res.vectors is not None and alone.vectors is not None
            assert abs(res.vectors - alone.vectors).max() < 1e-5
            continue
        assert [[h.faiss_id for h in q] for q in res.hits] == [[h.faiss_id for h in q] for q in alone.hits]
        assert all(0 < len(q) <= job.top_k for q in res.hits) and len(res.hits) == len(job.texts)
        if job.mode == "lexical":
            assert res.encode_ms == 0 and res.tokens == [] and res.stages.dense_ms == 0
        else:
            assert len(res.tokens) == len(job.texts) and res.stages.encode_ms > 0
        assert (res.stages.fusion_ms > 0) == (job.mode == "hybrid")


def test_a_hybrid_request_batched_with_a_deeper_one_is_answered_as_alone(searcher: Searcher) -> None:
    """The batch's vector search goes as deep as its deepest request (here a dense top_k 300); a hybrid request in
    it fuses its own dense leg (its best 100: `fusion.HYBRID_DEPTH`), not the batch's 300 rows, whose min-max
    normalisation and extra candidates moved its scores and order with whatever it was batched with."""
    hybrid = Job([QUERIES[0], QUERIES[3]], 10, None, None, "hybrid")
    deep = Job([QUERIES[0]], 300)
    for batched in (searcher.run_batch([hybrid, deep])[0], searcher.run_batch([deep, hybrid])[1]):
        alone = searcher.run_batch([hybrid])[0]
        assert batched.error is None and alone.error is None
        assert [[(h.faiss_id, h.score) for h in q] for q in batched.hits] == \
            [[(h.faiss_id, h.score) for h in q] for q in alone.hits]
