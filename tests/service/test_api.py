"""The API over real HTTP: uvicorn on 127.0.0.1, the real encoder and a real FAISS index."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from indexer.runtime.paths import DEFAULT_MODEL_NAME, DEFAULT_POOLING
from service.schemas.common import MAX_TEXT_CHARS, MAX_TEXTS
from tests.conftest import Server, start_server, stop_server


def test_health_and_ready(server: Server) -> None:
    with server.client() as c:
        assert c.get("/health").json() == {"status": "ok"}
        ready = c.get("/ready").json()
    assert ready["ready"] is True and ready["pooling"] == "mean" and ready["index_size"] > 2900
    assert ready["index_version"]


def test_search_finds_the_duplicate(server: Server) -> None:
    with server.client() as c:
        r = c.post("/search", json={"query": "How can I be a good geologist?", "top_k": 10})
    assert r.status_code == 200
    body = r.json()
    ids = [h["id"] for h in body["hits"]]
    assert 16 in ids and len(ids) == 10
    assert body["hits"][0]["text"] == "What should I do to be a great geologist?"
    scores = [h["score"] for h in body["hits"]]
    assert scores == sorted(scores, reverse=True)
    assert body["took_ms"] >= body["encode_ms"] > 0 and body["search_ms"] > 0
    assert body["truncated"] is False and body["index_version"]


def test_batch_search_keeps_order(server: Server) -> None:
    queries = ["How can I be a good geologist?", "What is the step by step guide to invest in share market?"]
    with server.client() as c:
        body = c.post("/search", json={"queries": queries, "top_k": 3}).json()
    assert [r["query"] for r in body["results"]] == queries
    assert body["results"][0]["hits"][0]["id"] == 16
    assert body["results"][1]["hits"][0]["id"] == 2  # qid 2 is that exact question
    assert "hits" not in body


def test_encode_returns_unit_vectors(server: Server) -> None:
    with server.client() as c:
        body = c.post("/encode", json={"texts": ["hello world", "How do I learn Python?"]}).json()
    assert body["dim"] == 384 and len(body["vectors"]) == 2 and body["truncated"] == [False, False]
    for v in body["vectors"]:
        assert len(v) == 384 and abs(sum(x * x for x in v) - 1.0) < 1e-4


def test_long_text_is_truncated_and_flagged_not_an_error(server: Server) -> None:
    long_text = ("word " * 399).strip()  # ~400 tokens, under the character limit, over max_length 256
    assert len(long_text) < MAX_TEXT_CHARS
    with server.client() as c:
        r = c.post("/search", json={"query": long_text, "top_k": 1})
        e = c.post("/encode", json={"texts": [long_text, "short"]})
    assert r.status_code == 200 and r.json()["truncated"] is True
    assert e.status_code == 200 and e.json()["truncated"] == [True, False]


@pytest.mark.parametrize(
    ("path", "body", "reason"),
    [
        ("/search", {"query": "", "top_k": 5}, "empty or whitespace"),
        ("/search", {"query": "   \n\t", "top_k": 5}, "empty or whitespace"),
        # control and format characters only: the tokenizer drops them, so this would be the empty text's vector
        ("/search", {"query": "\u200b\ufeff", "top_k": 5}, "empty or whitespace"),
        ("/search", {"queries": ["ok", "\u00ad \u0000\u2060"]}, "empty or whitespace"),
        ("/search", {"query": 42}, "valid string"),
        ("/search", {"queries": ["ok", None]}, "valid string"),
        ("/search", {"query": "ok", "top_k": 0}, "greater than or equal to 1"),
        ("/search", {"query": "ok", "top_k": 101}, "less than or equal to 100"),
        ("/search", {"queries": ["q"] * (MAX_TEXTS + 1)}, "at most 64 items"),
        ("/search", {"query": "x" * (MAX_TEXT_CHARS + 1)}, f"the limit is {MAX_TEXT_CHARS}"),
        ("/search", {"query": "a", "queries": ["b"]}, "exactly one of"),
        ("/search", {}, "exactly one of"),
        ("/encode", {"texts": []}, "at least 1 item"),
        ("/encode", {"texts": ["fine", " "]}, "empty or whitespace"),
        ("/encode", {"texts": ["\u200b"]}, "empty or whitespace"),
        ("/encode", {"texts": [1, 2]}, "valid string"),
        ("/encode", {"texts": ["t"] * (MAX_TEXTS + 1)}, "at most 64 items"),
        ("/encode", {"texts": ["y" * (MAX_TEXT_CHARS + 1)]}, "the limit is"),
        ("/encode", {"text": ["wrong field"]}, "Field required"),
    ],
)
def test_bad_input_is_a_422_with_reason(server: Server, path: str, body: dict, reason: str) -> None:
    with server.client() as c:
        r = c.post(path, json=body)
    assert r.status_code == 422, r.text
    assert reason in r.text


def test_malformed_json_is_a_422(server: Server) -> None:
    with server.client() as c:
        r = c.post("/search", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and "JSON" in r.text


def test_metrics_exposes_latency_errors_and_index_quality(server: Server) -> None:
    with server.client() as c:
        c.post("/search", json={"query": "How can I be a good geologist?"})
        c.post("/search", json={"query": ""})
        text = c.get("/metrics").text
        mrr = c.get("/ready").json()
    assert 'strata_request_latency_seconds_bucket{endpoint="/search",le="0.005",method="POST"}' in text
    assert 'strata_requests_total{endpoint="/search",method="POST",status="422"}' in text
    assert 'strata_errors_total{endpoint="/search",status="422"}' in text
    assert "strata_search_seconds_count" in text and 'strata_encode_seconds_count{endpoint="/search"}' in text
    assert "strata_index_size 29" in text  # ~2,98x vectors
    mrr_line = next(line for line in text.splitlines() if line.startswith("strata_index_mrr_at_10 "))
    assert 0.8 < float(mrr_line.split()[1]) <= 1.0
    assert f'version="{mrr["index_version"]}"' in text


def test_openapi_docs(server: Server) -> None:
    with server.client() as c:
        spec = c.get("/openapi.json").json()
        assert c.get("/docs").status_code == 200
    assert {"/encode", "/search", "/health", "/ready", "/metrics"} <= spec["paths"].keys()


def test_nprobe_setting_overrides_the_manifest(tmp_path: Path, quora_root: Path) -> None:
    """STRATA_NPROBE: the server probes that many lists, not the manifest's (and never more than nlist)."""
    import numpy as np

    from indexer.runtime.layout import IndexRoot
    from indexer.runtime.version import IndexVersion

    folder = IndexRoot(quora_root).current_dir()
    version = IndexVersion(folder)
    _, queries, _ = version.store.eval_set()
    version.close()
    queries = queries[:64]
    srv = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(quora_root), "STRATA_NPROBE": "1"})
    try:
        with srv.client() as c:
            vectors = np.asarray(c.post("/encode", json={"texts": queries}).json()["vectors"], dtype=np.float32)
            served = [[h["id"] for h in r["hits"]]
                      for r in c.post("/search", json={"queries": queries, "top_k": 10}).json()["results"]]
    finally:
        stop_server(srv)
    answers = {}
    for nprobe in (1, None, 10_000):  # the setting, the manifest's, more than there are lists (= all of them)
        v = IndexVersion(folder, nprobe=nprobe)
        answers[nprobe] = [[i for i in row if i >= 0] for row in v.search(vectors, 10)[1].tolist()]
        assert v.nprobe == (1 if nprobe == 1 else v.manifest.index.nprobe if nprobe is None else v.manifest.index.nlist)
        v.close()
    same = np.mean([a == b for a, b in zip(served, answers[1], strict=True)])
    assert same >= 0.95, same  # (float noise between two encoder runs may swap a near-tie)
    assert np.mean([a == b for a, b in zip(answers[1], answers[None], strict=True)]) < same  # nprobe 1 differs


def test_not_ready_without_an_index(tmp_path: Path) -> None:
    srv = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(tmp_path / "empty-root")})
    try:
        with srv.client() as c:
            assert c.get("/health").status_code == 200
            ready = c.get("/ready")
            search = c.post("/search", json={"query": "anything"})
        assert ready.status_code == 503 and "no current index" in ready.json()["reason"]
        assert search.status_code == 503 and "not ready" in search.json()["detail"]
    finally:
        stop_server(srv)


def test_mismatched_encoder_is_refused(tmp_path: Path, quora_root: Path, tiny_exported: Path) -> None:
    srv = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(quora_root), "STRATA_MODEL_DIR": str(tiny_exported)})
    try:
        with srv.client() as c:
            ready = c.get("/ready")
        assert ready.status_code == 503 and "dim 32 but index" in ready.json()["reason"]
    finally:
        stop_server(srv)


def test_demo_exports_builds_and_serves(tmp_path: Path, quora_file: Path) -> None:
    """The README's first command, on 300 rows: export the default encoder (all-MiniLM-L6-v2 with BERT-LC's
    layers 0,6; static int8, with its batch-invariance check and quality gate) in a child process, build, serve,
    answer."""
    home = tmp_path / "home"
    env = {"STRATA_HOME": str(home), "STRATA_DATA_DIR": str(quora_file.parent)}
    srv = start_server(tmp_path, env, args=("demo", "--rows", "300"), timeout=1200)
    try:
        with srv.client() as c:
            ready = c.get("/ready").json()
            hits = c.post("/search", json={"query": "How can I be a good geologist?", "top_k": 3}).json()["hits"]
            # it serves at once and adapts the encoder in the background (stopped with the server, resumable)
            deadline = time.monotonic() + 120
            while "training" not in ready and time.monotonic() < deadline:
                time.sleep(0.5)
                ready = c.get("/ready").json()
        assert ready["training"]["stage"] in ("base", "mine"), ready
        assert ready["ready"] and ready["pooling"] == DEFAULT_POOLING == "layers:0,6"  # BERT-LC, the default
        assert hits[0]["id"] == 16
        meta = json.loads((home / "models" / DEFAULT_MODEL_NAME / "encoder.json").read_text())
        assert meta["quantization"] == "int8-static-qdq" and meta["quality_gate"]["stsb_drop"] <= 0.5  # serves int8
        # a fresh STRATA_HOME: the ranges came from the package (models/gate_refs/), so the demo's fp32 graph still
        # has the key its shipped calibration and gate reference were made under
        assert meta["quantization_details"]["calibration_ranges"] == "cached"
        log = srv.log.read_text()
        assert "Strata is serving on http://127.0.0.1:" in log and "curl -s" in log
    finally:
        stop_server(srv)
