"""GET /stats: the sliding-window recorder with a fake clock, then the endpoint over real HTTP."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from indexer.runtime.layout import IndexRoot
from indexer.runtime.manifest import Manifest
from service.stats import LiveStats, weighted_percentiles
from tests.conftest import Server, start_server, stop_server


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_percentiles_are_nearest_rank() -> None:
    values = np.arange(1, 101, dtype=float)[::-1].copy()  # 100..1, unsorted on purpose
    assert weighted_percentiles(values, np.ones(100), (50, 95, 99, 100)) == [50.0, 95.0, 99.0, 100.0]
    # weights: one sample standing for 9 requests outweighs nine single ones
    assert weighted_percentiles(np.array([1.0, 2.0]), np.array([9.0, 1.0]), (50, 95)) == [1.0, 2.0]


def test_windows_count_and_percentiles_with_a_fake_clock() -> None:
    clock = FakeClock()
    stats = LiveStats(clock)
    for ms in range(1, 101):  # 100 searches in one second: total = ms, encode = ms / 2, search = 0.1
        stats.record(float(ms), ms / 2, 0.1)
    clock.now += 30
    minute, five = stats.windows()
    assert (minute.seconds, five.seconds) == (60, 300)
    assert minute.requests == five.requests == 100 and minute.queries == 100
    assert (minute.total_ms.p50, minute.total_ms.p95, minute.total_ms.p99) == (50.0, 95.0, 99.0)
    assert (minute.encode_ms.p50, minute.encode_ms.p99) == (25.0, 49.5)
    assert minute.search_ms.p50 == minute.search_ms.p99 == 0.1
    # 30 s after the start a rate divides by the 30 s the recorder has run, not by the window's 60 or 300
    assert minute.covered_s == five.covered_s == 30
    assert minute.requests_per_s == pytest.approx(100 / 30)

    clock.now += 31  # the searches are 61 s old: out of the minute, still in the five minutes
    stats.record(7.0, 3.0, 1.0, queries=4)  # one batch request of 4 queries
    minute, five = stats.windows()
    assert (minute.requests, minute.queries, minute.total_ms.p50, minute.total_ms.p99) == (1, 4, 7.0, 7.0)
    assert minute.requests_per_s == pytest.approx(1 / 60)
    assert (five.requests, five.queries) == (101, 104)
    assert five.requests_per_s == pytest.approx(101 / 61)

    clock.now += 300  # everything has left the ring
    minute, five = stats.windows()
    assert minute.requests == five.requests == 0
    assert minute.total_ms.p50 is None and five.search_ms.p99 is None and five.requests_per_s == 0


def test_a_ring_slot_reused_after_the_span_starts_over() -> None:
    clock = FakeClock(0.0)
    stats = LiveStats(clock, windows=(5,))
    stats.record(100.0, 1.0, 1.0)
    clock.now = 5.2  # the same slot (5 % 5 == 0 % 5), five seconds later
    stats.record(1.0, 1.0, 1.0)
    (window,) = stats.windows()
    assert window.requests == 1 and window.total_ms.p99 == 1.0


def test_a_busy_second_keeps_a_bounded_sample_that_still_counts_every_request() -> None:
    clock = FakeClock()
    stats = LiveStats(clock, samples_per_second=50)
    for _ in range(1000):  # one busy second of slow requests ...
        stats.record(100.0, 90.0, 10.0)
    clock.now += 1
    for _ in range(10):  # ... and a quiet one of fast requests
        stats.record(1.0, 0.5, 0.5)
    minute, _ = stats.windows()
    assert minute.requests == 1010
    assert stats.samples_held == 60  # bounded: 50 + 10 samples kept
    # weighted by requests, the 10 fast ones are under 1 %: even p1 of the minute would be slow
    assert minute.total_ms.p50 == 100.0 and minute.total_ms.p95 == 100.0


def test_series_steps_oldest_first() -> None:
    clock = FakeClock(10_000.0)
    stats = LiveStats(clock)
    for ms in (2.0, 4.0, 6.0, 8.0, 10.0):
        stats.record(ms, ms / 2, 0.1)
    clock.now += 25  # the five requests are 25 s old: in the step that ends 20 s ago
    stats.record(50.0, 40.0, 10.0)
    points = stats.series(10)
    assert len(points) == 30 and [p.ago_s for p in points[-3:]] == [20, 10, 0]
    assert points[-1].requests_per_s == 0.1 and points[-1].p50_ms == points[-1].p95_ms == 50.0
    assert points[-2].requests_per_s == 0 and points[-2].p50_ms is None
    assert points[-3].requests_per_s == 0.5 and (points[-3].p50_ms, points[-3].p95_ms) == (6.0, 10.0)
    assert all(p.requests_per_s == 0 for p in points[:-3])


# -- over HTTP ----------------------------------------------------------------------------------------------------
def test_stats_counts_searches_and_reports_the_index(server: Server, quora_root: Path) -> None:
    n = 12
    with server.client() as c:
        before = c.get("/stats")
        assert before.status_code == 200, before.text
        took = []
        for i in range(n):
            r = c.post("/search", json={"query": f"How can I be a good geologist? {i}", "top_k": 5})
            took.append(r.json()["took_ms"])
        took.append(c.post("/search", json={"queries": ["one", "two", "three"], "top_k": 2}).json()["took_ms"])
        c.post("/search", json={"query": "  "})  # a 422: not an answered search
        after = c.get("/stats").json()
        ready = c.get("/ready").json()
    minute, five = after["windows"]
    assert (minute["seconds"], five["seconds"]) == (60, 300)
    assert minute["requests"] - before.json()["windows"][0]["requests"] == n + 1
    assert minute["queries"] - before.json()["windows"][0]["queries"] == n + 3
    total, encode, search = minute["total_ms"], minute["encode_ms"], minute["search_ms"]
    for part in (total, encode, search):
        assert 0 < part["p50"] <= part["p95"] <= part["p99"]
    assert encode["p50"] + search["p50"] <= total["p99"]
    if before.json()["windows"][1]["requests"] == 0:  # only these searches in the window: the exact figures
        assert total["p99"] == pytest.approx(max(took), abs=1e-3)
        assert total["p50"] == pytest.approx(sorted(took)[math.ceil(len(took) / 2) - 1], abs=1e-3)
    assert minute["requests_per_s"] > 0 and after["uptime_s"] > 0
    assert after["series_step_s"] == 10 and len(after["series"]) == 30
    assert sum(p["requests_per_s"] for p in after["series"][-7:]) * 10 >= n + 1

    index = after["index"]
    assert after["ready"] is True and after["auth_required"] is False
    assert index["version"] == ready["index_version"] and index["documents"] == ready["index_size"]
    assert index["pooling"] == "mean" and index["dim"] == 384 and index["protocol"] == "paper"
    assert 0.8 < index["mrr_at_10"] <= 1 and 0.8 < index["recall_at_10"] <= 1
    assert 0.8 < index["exact_mrr_at_10"] <= 1 and 0 < index["ann_recall_at_10"] <= 1
    manifest = Manifest.load(IndexRoot(quora_root).current_dir())
    assert manifest.eval is not None
    assert index["mrr_at_10"] == manifest.eval.mrr_at_10 and index["recall_at_10"] == manifest.eval.recall_at_10
    assert index["exact_mrr_at_10"] == manifest.eval.exact_mrr_at_10
    assert (index["factory"], index["nlist"]) == (manifest.index.factory, manifest.index.nlist)
    assert index["nprobe"] == min(manifest.index.nprobe, manifest.index.nlist)
    # every ivf build calibrates by default (0.97 of exact's top 10 on query-like probes)
    assert manifest.index.nprobe_calibration is not None
    assert index["nprobe_target_recall"] == manifest.index.nprobe_calibration.target_recall == 0.97
    assert index["eval_queries"] == manifest.eval.n_queries > 100


def test_stats_and_the_page_answer_without_a_key_when_search_needs_one(tmp_path: Path) -> None:
    """With keys configured, /stats is public like /metrics (it says a key is needed), and so are the page and
    its files; /search still asks for the key. No index here: /stats says why it is not ready."""
    srv = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(tmp_path / "empty"), "STRATA_API_KEYS": "sesame-key-1"})
    try:
        with srv.client() as c:
            stats = c.get("/stats")
            page, script = c.get("/"), c.get("/static/app.js")
            refused = c.post("/search", json={"query": "hello"})
            not_ready = c.post("/search", json={"query": "hello"}, headers={"Authorization": "Bearer sesame-key-1"})
            metrics = c.get("/metrics").text
    finally:
        stop_server(srv)
    assert stats.status_code == 200
    body = stats.json()
    assert body["auth_required"] is True and body["ready"] is False and body["index"] is None
    assert body["reason"] and body["windows"][0]["requests"] == 0
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert script.status_code == 200 and "/search" in script.text
    assert refused.status_code == 401
    assert not_ready.status_code == 503
    # the page's files count under one label, not as unmatched paths
    assert 'strata_requests_total{endpoint="/static",method="GET",status="200"} 1.0' in metrics
