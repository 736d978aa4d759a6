"""bench/calibration_probes.py: one real run on a real BEIR-layout root (a tiny random BERT, Quora rows with
unjudged queries beside the judged ones), read-only, every nprobe setting evaluated on the version's queries."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.calibration_probes import main
from indexer.runtime.layout import IndexRoot
from indexer.runtime.manifest import Manifest
from tests.conftest import REPO
from tests.indexer.test_calibrate_probes import beir_with_held_apart


def test_a_run_on_a_default_build(tiny_exported: Path, quora_file: Path, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    beir = tmp_path / "beir"
    beir_with_held_apart(quora_file, beir)
    root = tmp_path / "root"
    r = subprocess.run([sys.executable, "-m", "indexer.cli", "build", "--root", str(root), "--model",
                        str(tiny_exported), "--data", str(beir), "--threads", "2",
                        "--index", "ivf"], cwd=REPO, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    before = Manifest.load(IndexRoot(root).current_dir()).model_dump_json()
    out = tmp_path / "results"
    assert main(["--root", str(root), "--label", "tiny", "--rounds", "2", "--out", str(out)]) == 0
    res = json.loads(next(out.glob("calibration-probes-tiny-*.json")).read_text())
    md = next(out.glob("calibration-probes-tiny-*.md")).read_text()
    manifest = Manifest.load(IndexRoot(root).current_dir())
    assert manifest.model_dump_json() == before  # read-only
    rows = res["rows"]
    new = next(v for k, v in rows.items() if "new default" in k)
    every = next(v for k, v in rows.items() if "every list" in k)
    assert new["nprobe"] == manifest.index.nprobe and new["probe_recall_at_10"] == pytest.approx(
        manifest.index.nprobe_calibration.recall_at_10, abs=1e-6)  # type: ignore[union-attr]
    assert new["ndcg_at_10_vs_exact"] == pytest.approx(manifest.eval.ndcg_at_10_vs_exact, abs=1e-6)  # type: ignore[union-attr]
    assert every["nprobe"] == manifest.index.nlist and every["probe_recall_at_10"] == 1.0
    lo, hi = new["ndcg_delta_ci95"]
    assert lo <= new["ndcg_at_10_vs_exact"] <= hi
    assert all(len(v["ms_rounds"]) == 2 for v in rows.values()) and len(rows) == 4
    assert "| query-like probes, target 0.97 (new default) |" in md and md in capsys.readouterr().out
