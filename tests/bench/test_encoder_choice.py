"""bench/encoder_choice.py: its paired statistics on known samples, and one real run on 300 Quora rows with two
real encoders (all-MiniLM-L6-v2 and a tiny random BERT that must come out far worse)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from bench.encoder_choice import compare, main, paired_bootstrap, parse_model, sign_flip_p
from indexer.calibrate import calibrate_nprobe
from indexer.runtime.layout import IndexRoot
from indexer.runtime.version import IndexVersion


def test_bootstrap_interval_brackets_the_mean_and_excludes_zero_only_for_a_real_shift() -> None:
    rng = np.random.default_rng(7)
    assert paired_bootstrap(np.full(500, 0.25), 1000, 0) == pytest.approx((0.25, 0.25))
    shifted = rng.normal(0.3, 1.0, 4000)
    lo, hi = paired_bootstrap(shifted, 2000, 0)
    assert 0 < lo < shifted.mean() < hi and hi - lo < 0.1  # ~ ±1.96 σ/√n = ±0.031
    lo, hi = paired_bootstrap(rng.normal(0.0, 1.0, 4000) - 0.0, 2000, 0)
    assert lo < 0 < hi


def test_sign_flip_p_separates_a_consistent_difference_from_noise() -> None:
    rng = np.random.default_rng(3)
    assert sign_flip_p(np.zeros(100), 1000, 0) == 1.0  # only ties: no evidence either way
    consistent = np.r_[np.full(60, 0.5), np.full(10, -0.5), np.zeros(900)]  # most queries tie, as in MRR
    assert sign_flip_p(consistent, 5000, 0) < 0.001
    assert sign_flip_p(rng.choice([-0.5, 0.5], 200), 5000, 0) > 0.05


def test_compare_reports_deltas_in_points_and_both_shares() -> None:
    base = np.array([1.0, 0.5, 0.0, 1.0])
    other = np.array([1.0, 1.0, 0.0, 0.5])
    out = compare(base, other, 200, 0)
    assert out["delta"] == pytest.approx(0.0)
    assert out["better_share"] == 0.25 and out["worse_share"] == 0.25
    assert out["ci_low"] <= 0 <= out["ci_high"]


def test_model_spec_needs_a_label_and_an_exported_folder(tmp_path: Path, tiny_exported: Path) -> None:
    assert parse_model(f"tiny={tiny_exported}").meta.dim == 32
    with pytest.raises(argparse.ArgumentTypeError, match="LABEL=DIR"):
        parse_model(str(tiny_exported))
    with pytest.raises(argparse.ArgumentTypeError, match="encoder.json"):
        parse_model(f"x={tmp_path}")


def test_a_real_run_finds_the_worse_encoder_and_reuses_its_indexes(
        minilm_mean: Path, tiny_exported: Path, quora_file: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("STRATA_DATA_DIR", str(quora_file.parent))
    args = ["--model", f"minilm={minilm_mean}", "--model", f"tiny random={tiny_exported}", "--rows", "300",
            "--protocols", "paper", "--work", str(tmp_path / "work"), "--results", str(tmp_path / "res"),
            "--bootstrap", "500", "--threads", "2"]
    assert main(args) == 0
    res = json.loads(next((tmp_path / "res").glob("encoder-choice-*.json")).read_text())
    paper = res["protocols"]["paper"]
    assert paper["minilm"]["mrr_exact"] > 80  # all-MiniLM-L6-v2 on the first 300 rows
    worse = paper["tiny random"]["vs_baseline"]["exact"]
    assert worse["ci_high"] < 0 and worse["worse_share"] > worse["better_share"] and worse["p_sign_flip"] < 0.01
    assert worse["delta"] == pytest.approx(paper["tiny random"]["mrr_exact"] - paper["minilm"]["mrr_exact"])
    md = next((tmp_path / "res").glob("encoder-choice-*.md")).read_text()
    assert "| tiny random | cls |" in md and "## paper (" in md
    capsys.readouterr()
    assert main(args) == 0  # a second run reuses both indexes
    assert capsys.readouterr().err.count("reusing") == 2
    for f in (tmp_path / "res").iterdir():
        f.unlink()
    # at equal ANN recall: each model's IVF column at the nprobe calibrated for it, the exact column unchanged
    assert main([*args, "--target-recall", "0.9"]) == 0
    calibrated = json.loads(next((tmp_path / "res").glob("encoder-choice-*.json")).read_text())
    assert calibrated["target_recall"] == 0.9
    for label, row in calibrated["protocols"]["paper"].items():
        assert row["calibration_recall"] >= 0.9 and row["mrr_exact"] == pytest.approx(paper[label]["mrr_exact"])
        root = tmp_path / "work" / f"{'minilm' if label == 'minilm' else 'tiny-random'}-paper-rows300"
        version = IndexVersion(IndexRoot(root).current_dir())
        try:
            assert row["nprobe"] == calibrate_nprobe(version.index, 0.9).nprobe
        finally:
            version.close()
    assert "ANN recall@10 >= 0.9" in next((tmp_path / "res").glob("encoder-choice-*.md")).read_text()
