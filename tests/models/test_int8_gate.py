"""The int8 gate's screen and its fp32 reference cache, on a real tiny export, real ONNX Runtime, real Quora rows:
a clear case is decided on the screen, a close one by the full gate, and a refusal still writes nothing."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from models.int8_gate import GateReport, Items, compare, drop_bounds, quality_gate  # noqa: E402

ROWS, SCREEN = 1_200, 300


@pytest.fixture(scope="module")
def graphs(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The tiny model's fp32 export and its static int8 graph (batch-invariance checked, gate skipped)."""
    from models.export import export_encoder

    base = tmp_path_factory.mktemp("gate")
    export_encoder(tiny_checkpoint, base / "fp32", pooling="cls")
    export_encoder(tiny_checkpoint, base / "int8", pooling="cls", quantize="int8", skip_gate=True)
    return base / "fp32", base / "int8"


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRATA_HOME", str(tmp_path / "home"))


def test_the_bounds_bracket_the_drop_and_shrink_with_the_sample() -> None:
    rng = np.random.default_rng(0)
    gold = rng.uniform(0, 5, 2000)
    cos = gold / 5 + rng.normal(0, 0.2, 2000)
    rr = (rng.uniform(size=4000) < 0.7).astype(float)
    worse = np.where(rng.uniform(size=4000) < 0.05, 0.0, rr)  # int8 loses 5 % of the hits: -3.5 points
    ref, got = Items(cos, gold, rr), Items(cos + rng.normal(0, 0.05, 2000), gold, worse)
    (s_lo, s_hi), (m_lo, m_hi) = drop_bounds(ref, got)
    mrr = (rr.mean() - worse.mean()) * 100
    assert m_lo < mrr < m_hi and m_lo > 0 and s_lo < s_hi
    small = drop_bounds(Items(cos[:200], gold[:200], rr[:400]), Items(got.cosines[:200], gold[:200], worse[:400]))
    assert small[1][1] - small[1][0] > m_hi - m_lo  # fewer queries, a wider interval


def test_ranks_are_scipys_ties_included() -> None:
    """The gate ranks without scipy.stats (its import cost the export 1-1.7 CPU-seconds): the same figures."""
    from scipy.stats import rankdata as scipy_rankdata

    from models.int8_gate import rankdata

    rng = np.random.default_rng(0)
    for x in (rng.integers(0, 6, (200, 50)).astype(float), rng.normal(size=(3, 40)), rng.integers(0, 3, 9) / 2):
        assert np.array_equal(rankdata(x), scipy_rankdata(x, axis=-1))


def test_one_pass_over_the_sample_gives_what_three_did(graphs: tuple[Path, Path], quora_file: Path) -> None:
    """`measure` encodes the STS-B sentences, Quora documents and queries together, once each, in runs cut by token
    count: the same per-item figures as encoding each part on its own (the gate's former three passes)."""
    from indexer.evaluate import per_query_ranks
    from indexer.runtime.encoder import OnnxEncoder
    from indexer.runtime.faiss.search import brute_force_search
    from models.int8_gate import _quora_split, measure, stsb_sample

    enc = OnnxEncoder(graphs[1], threads=2)
    got = measure(enc, "int8", 500, SCREEN)
    sts, split = stsb_sample(500), _quora_split(SCREEN, None)
    unique = sorted({*sts.s1, *sts.s2})
    vecs = dict(zip(unique, enc.encode(unique), strict=True))
    cosines = np.array([float(vecs[a] @ vecs[b]) for a, b in zip(sts.s1, sts.s2, strict=True)])
    docs, queries = enc.encode(split.corpus.texts), enc.encode(split.evalset.query_texts)
    rr = per_query_ranks(split.corpus.ids[brute_force_search(docs, queries, 10)[1]], split.evalset.gold, 10)[0]
    enc.close()
    np.testing.assert_allclose(got.cosines, cosines, atol=1e-5)
    assert np.array_equal(got.gold, np.asarray(sts.gold)) and np.array_equal(got.rr, rr)


def test_a_clear_pass_and_a_clear_refusal_are_decided_on_the_screen(graphs: tuple[Path, Path], quora_file: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    fp32, int8 = graphs
    with caplog.at_level(logging.INFO, logger="models.int8_gate"):
        passed = quality_gate(fp32, int8, rows=ROWS, max_drop=100, screen_rows=SCREEN)
        refused = quality_gate(fp32, int8, rows=ROWS, max_drop=-100, screen_rows=SCREEN)
    for report in (passed, refused):
        assert report.stage == "screen" and report.quora_rows == SCREEN and report.stsb_pairs == 500
        assert report.clear and report.mrr_drop_bounds[0] <= report.mrr_drop <= report.mrr_drop_bounds[1]
    assert passed.passed and not refused.passed
    assert "measuring the full gate" not in caplog.text  # neither paid for the full sample
    # the second screen read the fp32 side from the cache the first one wrote, and measured the same figures
    assert caplog.text.count("fp32 reference of") == 1
    assert (passed.stsb_dev_fp32, passed.quora_mrr_fp32) == (refused.stsb_dev_fp32, refused.quora_mrr_fp32)


def test_a_close_case_goes_to_the_full_gate(graphs: tuple[Path, Path], quora_file: Path,
                                           caplog: pytest.LogCaptureFixture) -> None:
    fp32, int8 = graphs
    # 20 STS pairs: a wide STS interval, so that one max drop can sit inside both intervals
    screen = compare(fp32, int8, pairs=20, rows=SCREEN, max_drop=0.0, stage="screen")
    lo = max(screen.mrr_drop_bounds[0], screen.stsb_drop_bounds[0])
    hi = min(screen.mrr_drop_bounds[1], screen.stsb_drop_bounds[1])
    assert lo < hi  # a random tiny BERT's int8 moves some ranks: the intervals are not points
    with caplog.at_level(logging.INFO, logger="models.int8_gate"):
        report = quality_gate(fp32, int8, rows=ROWS, max_drop=(lo + hi) / 2, screen_rows=SCREEN, screen_pairs=20)
    assert "the screen cannot decide" in caplog.text
    assert report.stage == "full" and report.quora_rows == ROWS and report.stsb_pairs == 1500
    assert report.mrr_drop_bounds is None and report.passed == (report.stsb_drop <= report.max_drop
                                                                 and report.mrr_drop <= report.max_drop)


def test_a_refusal_on_the_screen_writes_nothing(tiny_checkpoint: Path, tmp_path: Path, quora_file: Path) -> None:
    from models.export import export_encoder
    from models.quantize import QualityGateError

    out = tmp_path / "int8"
    with pytest.raises(QualityGateError, match=r"screen: 500 pairs / 300 rows.*--quantize none"):
        export_encoder(tiny_checkpoint, out, pooling="cls", quantize="int8", gate_rows=ROWS, gate_screen_rows=SCREEN,
                       max_drop=-100)
    assert not out.exists()


def test_a_screen_report_passes_only_within_its_bounds() -> None:
    r = GateReport(80.0, 79.9, 0.8, 0.799, 2000, 0.5, "screen", 500, (-0.2, 0.4), (-0.1, 0.6))
    assert not r.passed and not r.clear  # the MRR drop's upper bound is past 0.5: the full gate decides
    r.mrr_drop_bounds = (0.55, 0.9)
    assert not r.passed and r.clear  # clearly past: refused on the screen
    r.mrr_drop_bounds = (-0.1, 0.3)
    assert r.passed and r.clear


def test_the_fp32_reference_is_keyed_by_content_and_a_shipped_one_is_read(
        graphs: tuple[Path, Path], quora_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """The key is the sample's content, not where the data lies or when it was written (a fresh clone's data has
    new times and paths); a reference found under the package's `gate_refs/` is read instead of measured."""
    import shutil

    from indexer.runtime.paths import strata_home
    from models import int8_gate

    fp32, int8 = graphs
    moved = tmp_path / "elsewhere" / quora_file.name
    moved.parent.mkdir()
    shutil.copyfile(quora_file, moved)  # another path, another mtime, the same rows
    key = int8_gate.cache_key(fp32, 500, SCREEN, str(quora_file))
    assert int8_gate.cache_key(fp32, 500, SCREEN, str(moved)) == key
    assert key not in {int8_gate.cache_key(fp32, 500, SCREEN + 1), int8_gate.cache_key(fp32, 499, SCREEN),
                       int8_gate.cache_key(int8, 500, SCREEN)}
    measured = int8_gate.fp32_reference(fp32, 500, SCREEN)
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    shutil.move(strata_home() / "cache" / "int8-gate" / f"{key}.npz", shipped / f"{key}.npz")
    monkeypatch.setattr(int8_gate, "PACKAGED", shipped)
    with caplog.at_level(logging.INFO, logger="models.int8_gate"):
        again = int8_gate.fp32_reference(fp32, 500, SCREEN, str(moved))
    assert f"read from {shipped / f'{key}.npz'}" in caplog.text
    assert np.array_equal(again.rr, measured.rr) and np.array_equal(again.cosines, measured.cosines)


def test_the_shipped_reference_is_this_machines_export(minilm_mean: Path) -> None:
    """`models/gate_refs/` holds the screen's fp32 reference of `encoder export`'s default (mean) graph: the
    session's export of the same checkpoint has the same key, so a first export here reads it (a torch or
    exporter change that alters the graph fails this; rerun bench/gate_reference.py)."""
    from models.int8_gate import PACKAGED, SCREEN_PAIRS, SCREEN_ROWS, cache_key

    assert (PACKAGED / f"{cache_key(minilm_mean, SCREEN_PAIRS, SCREEN_ROWS)}.npz").is_file()


def test_a_gate_on_fewer_rows_than_the_screen_screens_sts_only(graphs: tuple[Path, Path], quora_file: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    """A small demo's gate (`--gate-rows` 300 ≤ the screen's rows): the screen takes those 300 rows, samples 500
    STS-B pairs, and decides the MRR drop on its figure, which is the full gate's own (no bounds)."""
    fp32, int8 = graphs
    with caplog.at_level(logging.INFO, logger="models.int8_gate"):
        report = quality_gate(fp32, int8, rows=SCREEN, max_drop=100, screen_rows=2_000)
    assert report.stage == "screen" and report.quora_rows == SCREEN and report.stsb_pairs == 500
    assert report.mrr_drop_bounds is None and report.stsb_drop_bounds is not None and report.passed
    assert "measuring the full gate" not in caplog.text
    r = GateReport(80.0, 79.9, 0.8, 0.797, 300, 0.5, "screen", 500, (-0.2, 0.4), None)  # MRR drop 0.3
    assert r.passed and r.clear
    r.quora_mrr_int8 = 0.79  # MRR drop 1.0: the full gate's figure is past the limit, refused on the screen
    assert not r.passed and r.clear
