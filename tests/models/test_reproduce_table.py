"""The reproduction's aggregation: mean ± std over seeds and paired per-seed deltas."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("reproduce", Path(__file__).resolve().parents[2] / "bench" /
                                              "reproduce.py")
reproduce = importlib.util.module_from_spec(spec)
sys.modules["reproduce"] = reproduce  # dataclasses look their module up
spec.loader.exec_module(reproduce)


def rows():
    out = []
    for seed, (base, layer) in enumerate([(80.0, 81.0), (82.0, 82.5), (81.0, 83.0)], start=1):
        out.append({"method": "CLS_last / unsup", "seed": seed, "stsb": base, "sts_avg": 70.0, "mrr10": 90.0})
        out.append({"method": "LayerAtt→CLS / unsup", "seed": seed, "stsb": layer, "sts_avg": 70.0 + seed,
                    "mrr10": 90.0})
    return out


def test_summary_mean_and_sample_std():
    order, stats = reproduce.summarise(rows())
    assert order == ["CLS_last / unsup", "LayerAtt→CLS / unsup"]
    mean, sd, n = stats["CLS_last / unsup"]["stsb"]
    assert (mean, n) == (81.0, 3) and sd == pytest.approx(1.0)


def test_paired_deltas_are_per_seed():
    lines = reproduce.paired_deltas(rows())
    stsb = next(line for line in lines if "| stsb |" in line and "LayerAtt→CLS / unsup" in line)
    assert "+1.17 ± 0.76" in stsb and "+1.00, +0.50, +2.00" in stsb
    table = reproduce.render(rows(), reproduce.QUICK, argparse.Namespace(quick=True, tag=None, model=None, device="cpu",
                                                                         threads=2), 60.0)
    assert "| LayerAtt→CLS / unsup | 82.17 ± 1.04 |" in table
