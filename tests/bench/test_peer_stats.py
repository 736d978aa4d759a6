"""The side-by-side bench's pure helpers (bench/peers/stats.py, report.py): no peers' venv, no server."""

from __future__ import annotations

import math

from bench.peers.report import targets
from bench.peers.stats import interleave, median, percentiles, safe_ratio


def test_interleave_visits_every_system_once_per_round_in_order() -> None:
    assert list(interleave("ABC", 2)) == [(0, "A"), (0, "B"), (0, "C"), (1, "A"), (1, "B"), (1, "C")]
    assert list(interleave("AB", 0)) == []


def test_percentiles_interpolate_and_an_empty_sample_is_nan() -> None:
    p = percentiles(range(1, 101), (50, 95, 99))  # 1..100
    assert p[50] == 50.5 and math.isclose(p[95], 95.05) and math.isclose(p[99], 99.01)
    assert math.isnan(percentiles([], (50,))[50])
    assert median([3.0, 1.0, 2.0]) == 2.0


def test_safe_ratio_refuses_missing_zero_and_nan() -> None:
    assert safe_ratio(3.0, 2.0) == 1.5
    assert safe_ratio(1.0, 0.0) is None
    assert safe_ratio(None, 1.0) is None
    assert safe_ratio(float("nan"), 1.0) is None


def _http(server: str, kind: str, clients: int, rps: float, p50: float) -> dict:
    return {"server": server, "kind": kind, "clients": clients, "rps": rps, "p50_ms": p50}


def test_targets_judge_each_ratio_and_explain_a_missed_latency() -> None:
    res = {
        "http": [_http("Strata", "search", 1, 250, 4.0), _http("Strata", "search", 32, 550, 50),
                 _http("Strata", "encode", 8, 500, 15), _http("Strata", "search", 8, 450, 17),
                 _http("infinity-emb (mean pooling)", "encode", 8, 100, 80),
                 _http("txtai API (faiss)", "encode", 8, 300, 25), _http("txtai API (faiss)", "search", 8, 200, 40)],
        "strata_breakdown": {"server_took_ms_p50": 2.1, "encode_ms_p50": 1.9, "search_ms_p50": 0.1,
                             "client_ms_p50": 3.9},
        "encoding": {"rows": [
            {"encoder": "Strata fp32", "sentences_per_s_b64": 300.0},
            {"encoder": "Strata int8", "sentences_per_s_b64": 640.0, "repeat_bitwise_equal": True,
             "batch1_vs_batch64_max_abs_diff": 1e-7},
            {"encoder": "fastembed on Strata's fp32 encoder.onnx", "sentences_per_s_b64": 150.0}]},
        "models": {"int8": {"quality_gate": {"max_drop": 0.5, "mrr_drop": -0.04, "stsb_drop": 0.6}}},
    }
    got = {t: (measured, met, note) for t, measured, met, note in targets(res)}
    latency = got["`/search` p50 ≤ 3 ms at 1 client"]
    assert latency[1] is False and "encode 1.9" in latency[2]
    assert got["`/search` req/s at 32 clients ≥ 90 % of the encoder's batch-64 rate"][1] is False  # 550 / 640 = 86 %
    assert got["≥ 2× infinity-emb's req/s at 8 clients, `/encode`-equivalent"][1] is True  # 5×
    assert got["≥ 2× txtai's req/s at 8 clients, `/encode`-equivalent"][1] is False  # 1.67×
    assert got["≥ 2× txtai's req/s at 8 clients, `/search`-equivalent"][1] is True  # 2.25×
    assert got["encoder ≥ 1.5× fastembed on the same fp32 encoder.onnx (batch 64)"][1] is True
    assert got["encoder ≥ 1.5× fastembed on the same int8 encoder.onnx (batch 64)"][1] is None  # not measured
    assert got["int8 within the export's quality gate"][1] is False  # STS-B drop 0.6 > 0.5
    assert got["int8 ≥ 1.8× fp32 sentences/s (batch 64)"][1] is True  # 2.13×
