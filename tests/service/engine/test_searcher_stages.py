"""The stages of a searcher's batch (`Searcher.run_batch`: plan → encode → retrieve → fuse → look up → answers),
each on its own, on a real version (FAISS, BM25, SQLite) and a real ONNX encoder: what each reads and what it
fills in of the `Batch`. That the whole equals each request run alone: test_batch_isolation.py, test_batching.py."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from indexer.runtime.fusion import HYBRID_DEPTH, Fusion, fuse
from indexer.runtime.layout import IndexRoot
from indexer.runtime.query import Query
from service.engine.errors import BadFilter, BadSearchParams
from service.engine.searcher import Batch, Searcher

QUERIES = ["How can I be a good geologist?", "How do I learn Python?", "Why is the sky blue?"]
ENCODE, DENSE, LEXICAL, HYBRID, DEFAULT, BAD_FILTER, BAD_KNOB = range(7)


@pytest.fixture(scope="module")
def searcher(quora_root: Path) -> Iterator[Searcher]:
    s = Searcher.open(IndexRoot(quora_root).current_dir(), threads=1)
    yield s
    s.close()


def jobs(searcher: Searcher) -> list[Query]:
    wrong_knob = {"ef_search": 8} if searcher.manifest.index.kind != "hnsw" else {"nprobe": 2}
    return [Query(QUERIES[:2], None), Query([QUERIES[0]], 4, mode="dense"), Query(QUERIES[1:], 3, mode="lexical"),
            Query([QUERIES[2]], 5, mode="hybrid", fusion=Fusion("rrf")), Query([QUERIES[1]], 2),
            Query([QUERIES[0]], 3, filter={"no_such_field": {"near": 1}}),
            Query([QUERIES[0]], 3, search_params=wrong_knob)]


def staged(searcher: Searcher, until: str) -> Batch:
    batch = searcher.plan(jobs(searcher))
    for stage in ("encode", "retrieve", "fuse", "look_up"):
        if stage == "encode":
            searcher.encode_batch(batch, searcher.encoder)
        elif stage == "retrieve":
            searcher.retrieve(batch)
        elif stage == "fuse":
            searcher.fuse_batch(batch)
        else:
            searcher.look_up(batch)
        if stage == until:
            break
    return batch


def test_plan_gives_each_job_its_mode_and_refuses_before_any_work(searcher: Searcher) -> None:
    assert searcher.manifest.lexical is not None and searcher.default_mode() == "dense"
    batch = searcher.plan(jobs(searcher))
    assert batch.modes == [None, "dense", "lexical", "hybrid", "dense", "dense", "dense"]
    assert batch.errors[:BAD_FILTER] == [None] * BAD_FILTER
    assert isinstance(batch.errors[BAD_FILTER], BadFilter) and isinstance(batch.errors[BAD_KNOB], BadSearchParams)
    assert batch.searching == [DENSE, LEXICAL, HYBRID, DEFAULT]
    assert batch.lexical_jobs == [LEXICAL, HYBRID]
    assert batch.encoding == [ENCODE, DENSE, HYBRID, DEFAULT]  # the lexical job needs no vector
    assert batch.vecs.size == 0 and not batch.rows_of  # nothing ran yet


def test_encode_batch_runs_one_onnx_run_and_places_each_jobs_rows(searcher: Searcher) -> None:
    batch = staged(searcher, "encode")
    assert batch.n_texts == 2 + 1 + 1 + 1  # encode-only 2, dense 1, hybrid 1, default 1
    assert batch.rows_of == {ENCODE: range(0, 2), DENSE: range(2, 3), HYBRID: range(3, 4), DEFAULT: range(4, 5)}
    assert batch.vecs.shape == (5, searcher.encoder.dim)
    assert np.allclose(np.linalg.norm(batch.vecs, axis=1), 1, atol=1e-4)
    alone = searcher.encoder.encode([QUERIES[2]])
    assert np.abs(batch.vecs[3] - alone[0]).max() < 1e-5
    assert len(batch.tokens) == len(batch.truncated) == 5


def test_retrieve_searches_each_row_at_its_depth_and_runs_the_lexical_jobs(searcher: Searcher) -> None:
    batch = staged(searcher, "retrieve")
    assert set(batch.dense) == {2, 3, 4}  # the searching jobs' rows, not the encode-only job's
    # one search for the three (no filter, the served search parameters), at the depth the deepest needs: the hybrid
    # job's
    assert [len(batch.dense[r][1]) for r in (2, 3, 4)] == [HYBRID_DEPTH] * 3
    want_scores, want_ids = searcher.index.search(batch.vecs[2:3], HYBRID_DEPTH)
    assert np.array_equal(batch.dense[2][1], want_ids[0])
    assert np.allclose(batch.dense[2][0], want_scores[0], atol=1e-5)
    assert set(batch.lexical) == {LEXICAL, HYBRID}
    lexical, ms = batch.lexical[LEXICAL]
    assert not isinstance(lexical, Exception) and ms >= 0 and len(lexical) == 2  # one answer per query
    assert [ids.tolist() for _, ids in lexical] == [ids.tolist() for _, ids in
                                                    searcher.index.lexical_search(QUERIES[1:], 3)]
    assert batch.dense_ns > 0


def test_fuse_batch_gives_each_job_its_final_ranking(searcher: Searcher) -> None:
    batch = staged(searcher, "fuse")
    assert set(batch.finals) == {DENSE, LEXICAL, HYBRID, DEFAULT}
    assert np.array_equal(batch.finals[DENSE][0][1], batch.dense[2][1][:4])  # dense: its top_k of the search
    got = batch.lexical[LEXICAL][0]
    assert not isinstance(got, Exception)
    assert batch.finals[LEXICAL] == got  # lexical: BM25's answer as it is
    legs = batch.lexical[HYBRID][0]
    assert not isinstance(legs, Exception) and not legs[0].bounded  # bm25s: hybrid's lexical leg is exact
    want = fuse(Fusion("rrf"), batch.dense[3], (legs[0].scores, legs[0].ids), 5)  # the request's fusion of both
    assert np.array_equal(batch.finals[HYBRID][0][1], want[1]) and len(want[1]) == 5
    assert set(batch.fusion_ms) == {HYBRID} and set(batch.lexical_ms) == {LEXICAL, HYBRID}


def test_look_up_reads_the_hits_of_every_final_ranking(searcher: Searcher) -> None:
    batch = staged(searcher, "look_up")
    assert set(batch.hits) == {DENSE, LEXICAL, HYBRID, DEFAULT}
    for j, finals in batch.finals.items():
        assert [[h.faiss_id for h in q] for q in batch.hits[j]] == [ids.tolist() for _, ids in finals]
        assert all(h.text for q in batch.hits[j] for h in q)
    refused = searcher.plan([Query([QUERIES[0]], 3, filter={"no_such_field": {"near": 1}})])
    assert searcher.look_up(refused) is False and refused.hits == {}  # nothing to read


def test_answers_puts_each_jobs_result_in_job_order(searcher: Searcher) -> None:
    batch = staged(searcher, "look_up")
    out = Searcher.answers(batch, filter_ms=0.5, encode_ms=2.0, lookup_ms=0.25, timeline=None)
    assert len(out) == len(batch.jobs)
    assert out[ENCODE].vectors is not None and out[ENCODE].vectors.shape == (2, searcher.encoder.dim)
    assert out[ENCODE].hits == [] and out[ENCODE].mode is None
    assert [len(q) for q in out[DENSE].hits] == [4] and out[DENSE].vectors is None
    lexical = out[LEXICAL]
    assert lexical.encode_ms == 0 and lexical.tokens == [] and lexical.stages.dense_ms == 0
    assert lexical.truncated == [False, False]
    assert out[HYBRID].stages.fusion_ms > 0 and out[HYBRID].stages.encode_ms == 2.0
    assert out[DEFAULT].mode == "dense" and out[DEFAULT].stages.lookup_ms == 0.25
    for j in (BAD_FILTER, BAD_KNOB):
        assert out[j].error is batch.errors[j] and out[j].hits == [] and out[j].search_ms == 0.5


# -- hybrid's bounded lexical leg (indexer/runtime/bounded_leg.py), on a copy of the version with a tantivy or a
# pisa index (the engines with the bounded leg) --

@pytest.fixture(scope="module", params=["tantivy", "pisa"])
def tantivy_searcher(quora_root: Path, tmp_path_factory: pytest.TempPathFactory,
                     request: pytest.FixtureRequest) -> Iterator[Searcher]:
    """The quora version copied, its lexical index rebuilt with the engine."""
    from indexer.runtime.lexical import LEXICAL_DIR, build_lexical, lexical_info
    from indexer.runtime.manifest import Manifest
    from indexer.runtime.store import STORE, Store

    folder = tmp_path_factory.mktemp(request.param) / "v"
    shutil.copytree(IndexRoot(quora_root).current_dir(), folder)
    shutil.rmtree(folder / LEXICAL_DIR)
    store = Store(folder / STORE)
    docs = list(store.iter_texts())
    store.close()
    manifest = Manifest.load(folder)
    manifest.lexical = build_lexical(folder, docs, lexical_info(engine=request.param))
    manifest.save(folder)
    s = Searcher.open(folder, threads=1)
    yield s
    s.close()


def test_hybrid_takes_the_bounded_leg_where_it_applies_and_says_so(tantivy_searcher: Searcher,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from indexer.runtime import bounded_leg

    s, query = tantivy_searcher, "How do I learn Python programming?"
    monkeypatch.setattr(bounded_leg, "SELECTIVE_DF", 0.01)
    lex = s.index.lexical  # type: ignore[attr-defined]
    assert s.bounded_from == bounded_leg.BOUNDED_FROM  # on by default; this small version never reaches it, but
    # PISA's own threshold bounds an unfiltered leg at every size (a filtered one keeps the searcher's:
    # tests/indexer/runtime/test_bounded_leg.py)
    assert s.search([query], 5, mode="hybrid").stages.lexical_bounded == int(lex.BOUNDED_FROM == 0)
    s.bounded_from = 0  # forced: every hybrid query bounded
    try:
        hybrid = s.search([query], 5, mode="hybrid")
        assert hybrid.stages.lexical_bounded == 1 and hybrid.stages.lexical_ms > 0
        vec = s.encoder.encode([query])
        dense = s.index.search(vec, HYBRID_DEPTH)
        leg = bounded_leg.begin(lex, query, HYBRID_DEPTH, bounded_from=0)
        assert leg.bounded and leg.selective
        want = fuse(Fusion(), (dense[0][0], dense[1][0]), bounded_leg.complete(lex, leg, dense[1][0]), 5)
        assert [h.faiss_id for h in hybrid.hits[0]] == want[1].tolist()
        # the lexical mode is exact whatever the setting
        lexical = s.search([query], 5, mode="lexical")
        assert lexical.stages.lexical_bounded == 0
        assert [h.faiss_id for h in lexical.hits[0]] == lex.search(query, 5)[1].tolist()
    finally:
        s.bounded_from = bounded_leg.BOUNDED_FROM


def test_the_hybrid_lexical_setting_is_validated_and_turns_the_bound_off(tantivy_searcher: Searcher,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import ValidationError

    from service.engine.settings import EngineSettings

    assert EngineSettings().hybrid_lexical == "bounded"
    monkeypatch.setenv("STRATA_HYBRID_LEXICAL", "exact")
    assert EngineSettings().hybrid_lexical == "exact"
    monkeypatch.setenv("STRATA_HYBRID_LEXICAL", "sometimes")
    with pytest.raises(ValidationError, match="hybrid_lexical"):
        EngineSettings()
    exact = Searcher(tantivy_searcher.encoder, tantivy_searcher.index, hybrid_lexical="exact")
    assert exact.bounded_from is None
    with pytest.raises(ValueError, match="hybrid_lexical must be one of bounded, exact, not 'sometimes'"):
        Searcher(tantivy_searcher.encoder, tantivy_searcher.index, hybrid_lexical="sometimes")  # type: ignore[arg-type]


def test_concurrent_batches_run_their_lexical_legs_at_once(tantivy_searcher: Searcher,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Two batches in flight (two inference workers) run their lexical searches beside each other: each batch's
    lexical part waits here until the other's has started, which a single lexical thread never lets happen (the
    second waits for the first to finish). Both answers are then what each batch gets alone."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from service.engine import retrieval

    s = Searcher(tantivy_searcher.encoder, tantivy_searcher.index, lexical_workers=2)
    alone = [s.search([q], 5, mode="hybrid").hits[0] for q in QUERIES[:2]]
    both_started = threading.Barrier(2, timeout=20)
    answers = retrieval.lexical_answers

    def meeting(*args: object, **kwargs: object) -> object:
        both_started.wait()
        return answers(*args, **kwargs)

    monkeypatch.setattr(retrieval, "lexical_answers", meeting)
    try:
        with ThreadPoolExecutor(2) as pool:
            got = list(pool.map(lambda q: s.search([q], 5, mode="hybrid").hits[0], QUERIES[:2]))
    finally:
        s._lexical_pool.shutdown()
    assert [[h.faiss_id for h in hits] for hits in got] == [[h.faiss_id for h in hits] for hits in alone]
    with pytest.raises(ValueError, match="at least one thread"):
        Searcher(tantivy_searcher.encoder, tantivy_searcher.index, lexical_workers=-1)
