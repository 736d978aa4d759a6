"""Metadata and filtered `/search` over real HTTP: uvicorn on 127.0.0.1, the real encoder (all-MiniLM-L6-v2), a
real corpus index of Quora questions with metadata built by `indexer build --data`, real FAISS and SQLite.

The FAISS-level equality with brute force at 50/10/1/0.1 % selectivity is in
tests/indexer/runtime/test_filtered_search.py; here the same holds end to end, through the store's SQL, the
engine's micro-batches and the JSON."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from indexer.quora import read_rows
from indexer.runtime.encoder import OnnxEncoder
from indexer.runtime.faiss.exact import stored_vectors
from indexer.runtime.faiss.filtered import filtered_nprobe
from indexer.runtime.filters import matches, parse_filter
from indexer.runtime.layout import IndexRoot
from indexer.runtime.version import IndexVersion
from tests.conftest import REPO, Server, start_server, stop_server

N_DOCS = 2000  # nlist 2000 // 39 = 51; with --nprobe 4 a 50 % filter takes the IVF path, a 1 % one goes exact
QUERIES = ["How can I be a good geologist?", "How do I learn Python?", "What is the best way to lose weight?",
           "Why is the sky blue?", "How do I invest in the share market?"]
FILTERS: list[dict[str, Any]] = [
    {"bucket": {"lt": 50}},  # 50 %
    {"bucket": {"lt": 10}},  # 10 %
    {"bucket": 7},  # 1 %
    {"bucket": {"in": [3, 4]}, "lang": "de"},
    {"year": {"gte": 2000, "lt": 2010}},
    {"or": [{"lang": "fr"}, {"and": [{"year": {"lte": 1995}}, {"bucket": {"gte": 90}}]}]},
]


def corpus_rows(quora: Path, n_docs: int = N_DOCS) -> list[dict[str, Any]]:
    """Unique Quora questions: integer ids for most, string ids for every fifth ("q-…", and "17" next to 17),
    metadata on all but every 50th."""
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for row in read_rows(quora):
        for text in (row.question1, row.question2):
            if text.strip() and text not in seen and len(rows) < n_docs:
                seen.add(text)
                i = len(rows)
                doc: dict[str, Any] = {"id": f"q-{i}" if i % 5 == 0 else i, "text": text}
                if i % 50 != 1:
                    doc |= {"bucket": (i * 37) % 100, "year": 1990 + i % 30, "lang": ("en", "de", "fr")[i % 3]}
                rows.append(doc)
        if len(rows) >= n_docs:
            break
    rows[3]["id"] = "17"  # a string id that looks like the integer id 17 (row 17)
    return rows


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, minilm_mean: Path, quora_file: Path
           ) -> tuple[Path, list[dict[str, Any]]]:
    tmp = tmp_path_factory.mktemp("filtered")
    rows = corpus_rows(quora_file)
    data = tmp / "docs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    root = tmp / "root"
    r = subprocess.run([sys.executable, "-m", "indexer.cli", "build", "--data", str(data), "--model", str(minilm_mean),
                        "--root", str(root), "--nprobe", "4", "--threads", "2", "--default-mode", "dense"],
                       cwd=REPO, capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    return root, rows


@pytest.fixture(scope="module")
def served(corpus: tuple[Path, list[dict[str, Any]]], tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("filtered-server"), {"STRATA_INDEX_ROOT": str(corpus[0])})
    yield srv
    stop_server(srv)


def test_filtered_hits_are_the_index_search_over_the_matching_documents(
        served: Server, corpus: tuple[Path, list[dict[str, Any]]], minilm_mean: Path) -> None:
    root, rows = corpus
    version = IndexVersion(IndexRoot(root).current_dir())
    schema = version.store.metadata_schema()
    assert schema == {"bucket": "int", "lang": "str", "year": "int"}
    vecs = OnnxEncoder(minilm_mean).encode(QUERIES)
    ids, stored = stored_vectors(version.index)
    docs = version.store.documents(ids.tolist())
    went = []
    try:
        with served.client() as c:
            for flt in FILTERS:
                body = c.post("/search", json={"queries": QUERIES, "top_k": 10, "filter": flt}).json()
                node = parse_filter(flt, schema)
                match = version.match(flt)
                want_n = sum(matches(node, r) for r in rows)
                assert len(match.ids) == want_n > 0
                _, local = version.search(vecs, 10, match)
                exact = len(match.prepared.lists) <= filtered_nprobe(version.nprobe, want_n, version.ntotal,
                                                                      version.nlist)
                went.append(exact)
                keep = np.isin(ids, match.ids)
                brute = ids[keep][np.argsort(-(vecs @ stored[keep].T), axis=1, kind="stable")[:, :10]]
                for q, res in enumerate(body["results"]):
                    hits = res["hits"]
                    assert len(hits) == 10
                    # every hit matches, by the pure-Python evaluator on the metadata the hit carries
                    assert all(matches(node, h["metadata"]) for h in hits), flt
                    # the same answer as this process's filtered search of the same version
                    assert [h["id"] for h in hits] == [docs[i].ext_id for i in local[q].tolist()]
                    if exact:  # brute force over the matching documents
                        assert [h["id"] for h in hits] == [docs[i].ext_id for i in brute[q].tolist()], flt
                    scores = [h["score"] for h in hits]
                    assert scores == sorted(scores, reverse=True)
    finally:
        version.close()
    assert went[0] is False and went[2] is True  # 50 %: IVF with the selector; 1 %: exact


def test_a_new_filters_first_request_answers_what_its_later_ones_do(served: Server) -> None:
    """A filter's first request (its SQL, selector and the lists' exact search) against the same filter's later
    ones (cached; a few matches' codes gathered on the version's own thread and scored instead): the same hits, in
    every mode, for filters no other request used (1 %, 2 % and a combination)."""
    fresh = [{"bucket": 61}, {"bucket": {"in": [62, 63]}}, {"bucket": {"gte": 64, "lt": 70}, "lang": "fr"}]
    with served.client() as c:
        for m, mode in enumerate(("dense", "lexical", "hybrid")):
            for flt in fresh:
                flt = {"and": [flt, {"year": {"gte": 1990 + m}}]}  # each mode's filters its own: all first uses
                answers = []
                for _ in range(5):
                    r = c.post("/search", json={"queries": QUERIES, "top_k": 10, "filter": flt, "mode": mode})
                    assert r.status_code == 200, r.text
                    answers.append([[(h["id"], round(h["score"], 4)) for h in q["hits"]] for q in r.json()["results"]])
                    time.sleep(0.05)  # the gathering thread's turn
                assert all(a == answers[0] for a in answers[1:]), (mode, flt)
                assert any(answers[0]), (mode, flt)


def test_a_served_version_locates_its_ids_before_its_first_filter(corpus: tuple[Path, list[dict[str, Any]]]
                                                                  ) -> None:
    """The backend that serves a version starts finding which list holds each id as it opens it (on a thread), so
    that no filter's first request pays for it (seconds at 10M)."""
    from service.engine.backends import LocalBackend
    from service.engine.settings import EngineSettings

    root = corpus[0]
    version = LocalBackend(EngineSettings(index_root=root)).open_index(IndexRoot(root).current_dir())
    try:
        for _ in range(500):
            if version.ann._locator is not None:
                break
            time.sleep(0.01)
        assert version.ann._locator is not None  # no filter was asked for
    finally:
        version.close()


def test_a_micro_batch_mixes_filters_encode_only_jobs_and_a_refused_filter(
        corpus: tuple[Path, list[dict[str, Any]]]) -> None:
    from service.engine.errors import BadFilter
    from service.engine.searcher import Job, Searcher

    searcher = Searcher.open(IndexRoot(corpus[0]).current_dir(), threads=1)
    try:
        jobs = [Job(QUERIES[:2], 5, FILTERS[0]), Job(QUERIES[2:3], None), Job(QUERIES[3:], 10, {"year": "1"}),
                Job(QUERIES[:1], 3, FILTERS[2]), Job(QUERIES[1:2], 4), Job(QUERIES[4:], 2, FILTERS[0])]
        batched = searcher.run_batch(jobs)
        refused = batched[2]
        assert isinstance(refused.error, BadFilter) and "is a str but the field holds int" in str(refused.error)
        assert refused.hits == [] and refused.vectors is None
        encoded = sum(len(j.texts) for j in jobs) - len(jobs[2].texts)  # the refused job's texts are not encoded
        for job, res in zip(jobs, batched, strict=True):
            if job is jobs[2]:
                continue
            assert res.error is None and res.batch_texts == encoded
            alone = searcher.run_batch([job])[0]
            if job.top_k is None:
                assert res.vectors is not None and np.allclose(res.vectors, alone.vectors, atol=1e-5)
            else:
                assert [[h.ext_id for h in q] for q in res.hits] == [[h.ext_id for h in q] for q in alone.hits]
                assert all(len(q) == job.top_k for q in res.hits)
    finally:
        searcher.close()


def test_ids_keep_their_type_and_hits_carry_metadata(served: Server,
                                                     corpus: tuple[Path, list[dict[str, Any]]]) -> None:
    _, rows = corpus
    by_text = {r["text"]: r for r in rows}
    string_17 = next(r for r in rows if r["id"] == "17")
    int_17 = next(r for r in rows if r["id"] == 17)
    bare = next(r for r in rows if "bucket" not in r)
    with served.client() as c:
        for doc in (string_17, int_17, bare):
            hit = c.post("/search", json={"query": doc["text"], "top_k": 1}).json()["hits"][0]
            assert hit["id"] == doc["id"] and type(hit["id"]) is type(doc["id"])  # "17" stays "17", 17 stays 17
            assert hit["text"] == doc["text"]
            assert hit["metadata"] == {k: v for k, v in doc.items() if k not in ("id", "text")}
        assert c.post("/search", json={"query": bare["text"], "top_k": 1}).json()["hits"][0]["metadata"] == {}
        # a filter the document does not match keeps it out, even when its own text is the query
        flt = {"bucket": {"in": sorted({r["bucket"] for r in rows if "bucket" in r} - {int_17["bucket"]})}}
        hits = c.post("/search", json={"query": int_17["text"], "top_k": 5, "filter": flt}).json()["hits"]
        assert int_17["id"] not in [h["id"] for h in hits] and len(hits) == 5
        assert all(by_text[h["text"]]["bucket"] != int_17["bucket"] for h in hits)


@pytest.mark.parametrize(
    ("flt", "reason"),
    [
        ({"year": "2001"}, "year: equality '2001' is a str but the field holds int"),
        ({"year": {"near": 2000}}, "year: unknown operator 'near'"),
        ({"lang": {"gt": 3}}, "lang: gt 3 is an int but the field holds str"),
        ({"and": {"bucket": 1}}, "'and' needs a non-empty list of filters"),
        ({"bucket": {"in": []}}, "bucket: 'in' needs a non-empty list"),
        ({}, "a filter is a non-empty object"),
    ],
)
def test_bad_filters_are_422_with_the_reason(served: Server, flt: dict[str, Any], reason: str) -> None:
    with served.client() as c:
        r = c.post("/search", json={"query": "How do I learn Python?", "filter": flt})
    assert r.status_code == 422, r.text
    (error,) = r.json()["detail"]
    assert error["loc"] == ["body", "filter"] and reason in error["msg"], error


def test_a_filter_that_is_not_an_object_is_a_validation_error(served: Server) -> None:
    with served.client() as c:
        r = c.post("/search", json={"query": "How do I learn Python?", "filter": [{"bucket": 1}]})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "filter"]


def test_quora_store_has_no_metadata_to_filter(server: Server) -> None:
    with server.client() as c:
        ok = c.post("/search", json={"query": "How can I be a good geologist?", "top_k": 3}).json()["hits"]
        r = c.post("/search", json={"query": "How can I be a good geologist?", "filter": {"bucket": 1}})
    assert ok[0]["id"] == 16 and all(type(h["id"]) is int and h["metadata"] == {} for h in ok)
    assert r.status_code == 200 and r.json()["hits"] == []  # a field no document holds matches nothing


async def _burst(url: str, bodies: list[dict[str, Any]]) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        return await asyncio.gather(*(client.post("/search", json=b) for b in bodies))


def _batch_metrics(text: str) -> tuple[float, float]:
    values = {ln.split()[0]: float(ln.split()[1]) for ln in text.splitlines() if ln.startswith("strata_batch_texts_")}
    return values["strata_batch_texts_count"], values["strata_batch_texts_sum"]


def test_concurrent_requests_with_different_filters_share_onnx_runs_and_get_their_own_hits(
        corpus: tuple[Path, list[dict[str, Any]]], tmp_path: Path) -> None:
    srv = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(corpus[0]), "STRATA_WORKERS": "1",
                                  "STRATA_BATCH_WINDOW_MS": "5"})
    kinds: list[dict[str, Any] | None] = [None, FILTERS[0], FILTERS[2], FILTERS[3], {"year": "red"}]
    bodies = [{"query": q, "top_k": 5} | ({} if f is None else {"filter": f})
              for q, f in itertools.islice(zip(itertools.cycle(QUERIES), itertools.cycle(kinds)), 30)]
    try:
        with srv.client() as c:
            alone = [c.post("/search", json=b) for b in bodies]
            before = _batch_metrics(c.get("/metrics").text)
            together = asyncio.run(_burst(srv.url, bodies))
            after = _batch_metrics(c.get("/metrics").text)
    finally:
        stop_server(srv)
    for body, a, t in zip(bodies, alone, together, strict=True):
        bad = body.get("filter") == {"year": "red"}  # a str for an int field
        assert a.status_code == t.status_code == (422 if bad else 200)
        if not bad:
            assert [h["id"] for h in t.json()["hits"]] == [h["id"] for h in a.json()["hits"]], body
    runs, texts = after[0] - before[0], after[1] - before[1]
    assert texts == 24  # the six refused requests encoded nothing
    assert runs < 24 / 2, f"24 concurrent requests took {runs} ONNX runs: not batched"
