"""bench/nprobe_calibration.py: one real run on two real index roots (a tiny random BERT, 3,000 Quora rows, Flat
and SQfp16 lists), read-only, with the calibrated nprobe evaluated on the versions' own queries."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.nprobe_calibration import main, parse_root
from indexer.runtime.layout import IndexRoot
from indexer.runtime.manifest import Manifest
from tests.conftest import REPO


def test_parse_root_wants_a_label() -> None:
    assert parse_root("a=b=/x/y") == ("a=b", Path("/x/y"))
    with pytest.raises(Exception, match="LABEL=DIR"):
        parse_root("/x/y")


def test_a_run_over_two_roots(tiny_exported: Path, quora_file: Path, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    roots = {}
    for codec in ("Flat", "SQfp16"):
        roots[codec] = tmp_path / codec
        r = subprocess.run([sys.executable, "-m", "indexer.cli", "build", "--root", str(roots[codec]), "--model",
                            str(tiny_exported), "--data", str(quora_file), "--rows", "3000", "--codec", codec,
                            "--threads", "2"], cwd=REPO, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
    before = {c: Manifest.load(IndexRoot(p).current_dir()).model_dump_json() for c, p in roots.items()}
    out = tmp_path / "results"
    assert main(["--root", f"flat lists={roots['Flat']}", "--root", f"fp16 lists={roots['SQfp16']}",
                 "--target", "0.8", "0.95", "--rounds", "2", "--sample", "500", "--out", str(out)]) == 0
    res = json.loads(next(out.glob("nprobe-calibration-*.json")).read_text())
    md = next(out.glob("nprobe-calibration-*.md")).read_text()
    assert set(res["roots"]) == {"flat lists", "fp16 lists"} and "--target 0.8 0.95" in res["command"]
    for label, r in res["roots"].items():
        cals = {c["target_recall"]: c for c in r["calibrations"]}
        assert cals[0.8]["nprobe"] <= cals[0.95]["nprobe"] <= r["nlist"]  # a higher target needs no fewer lists
        assert all(c["sample_queries"] == 500 and c["recall_at_10"] >= c["target_recall"] for c in cals.values())
        assert set(r["rows"]) == {"default", "target 0.8", "target 0.95"}
        for name, row in r["rows"].items():
            want = 20 if name == "default" else cals[float(name.split()[1])]["nprobe"]
            assert row["nprobe"] == min(want, r["nlist"]) and len(row["ms_rounds"]) == 2
            assert row["exact_n_queries"] is None  # the figures' round searched every query exactly
            assert 0 <= row["mrr_at_10"] <= 1 and row["ms_per_query"] > 0
        assert f"| {label} | target 0.95 | {cals[0.95]['nprobe']} |" in md
    # the eval queries' ANN recall grows with the calibrated nprobe, as the documents' did
    for r in res["roots"].values():
        assert r["rows"]["target 0.8"]["ann_recall_at_10"] <= r["rows"]["target 0.95"]["ann_recall_at_10"] + 1e-9
    after = {c: Manifest.load(IndexRoot(p).current_dir()).model_dump_json() for c, p in roots.items()}
    assert after == before  # read-only: the versions' manifests are untouched
    assert "target 0.95" in capsys.readouterr().out


def test_a_root_without_a_version_is_named(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="--root empty="):
        main(["--root", f"empty={tmp_path}", "--out", str(tmp_path / "out")])
