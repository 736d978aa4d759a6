"""What a person reads while a long job runs: a step without counts is never silent and says when it is
done; a job followed by a parent (the demo's chain, through STRATA_PROGRESS_FILE) leaves the progress line to the
parent instead of printing the same stage twice; `encoder export` names each of its steps and labels the gate's
fp32 and int8 bars."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from indexer.runtime.progress import Progress, Working, read_jobs

REPO = Path(__file__).resolve().parents[3]


def test_a_step_without_counts_beats_until_it_ends(caplog: pytest.LogCaptureFixture) -> None:
    beats = threading.Event()

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "so far" in record.getMessage():
                beats.set()

    logger = logging.getLogger("test.working")
    logger.addHandler(seen := Seen())
    try:
        with caplog.at_level(logging.INFO, logger="test.working"), Working("training", logger=logger,
                                                                           interval=0.05) as step:
            assert beats.wait(30)  # the step is still running: its heartbeat said so
    finally:
        logger.removeHandler(seen)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "training" and lines[-1].startswith("training: done in ") and step.elapsed > 0
    assert all(line.startswith("training… ") and line.endswith(" so far") for line in lines[1:-1])
    after = len(caplog.records)
    assert not step._thread.is_alive() and len(caplog.records) == after  # no beat after its end


def test_a_job_a_parent_follows_writes_its_file_and_prints_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    with caplog.at_level(logging.INFO, logger="indexer.runtime.progress"):
        with Progress(10, "alone", unit="texts", bar=False, interval=0) as bar:
            bar.update(10)
        monkeypatch.setenv("STRATA_PROGRESS_FILE", str(tmp_path / "progress.json"))
        with Progress(10, "followed", unit="texts", bar=False, interval=0) as bar:
            bar.update(10)
    printed = [r.getMessage() for r in caplog.records]
    assert any(line.startswith("alone: 10/10 texts") for line in printed)
    assert not any("followed" in line for line in printed)  # the parent prints it, once
    (job,) = read_jobs(tmp_path / "progress.json")
    assert (job["desc"], job["n"], job["total"]) == ("followed", 10, 10)


@pytest.mark.usefixtures("quora_file")
def test_export_names_every_step_and_labels_the_gates_bars(tiny_checkpoint: Path, tmp_path: Path) -> None:
    env = {**os.environ, "STRATA_LOG_FORMAT": "json", "STRATA_PROGRESS_INTERVAL_S": "0.2",
           "STRATA_HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO)}
    env.pop("STRATA_PROGRESS_FILE", None)
    r = subprocess.run([sys.executable, "-m", "models.cli", "export", "--checkpoint", str(tiny_checkpoint),
                        "--pooling", "cls", "--out", str(tmp_path / "m"), "--gate-rows", "300", "--max-drop", "100"],
                       capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    msgs = [json.loads(line)["msg"] for line in r.stderr.splitlines() if line.startswith("{")]
    for step in ("exporting to ONNX", "checking parity", "quantizing to int8", "checking that int8 vectors"):
        started = [m for m in msgs if m.startswith(step) and ": done in " not in m and "so far" not in m]
        assert len(started) == 1, (step, msgs)
        assert any(m.startswith(started[0] + ": done in ") for m in msgs), (step, msgs)
    for label in ("fp32 reference", "int8"):  # each graph's one bar (its whole sample) says which graph it is
        assert any(re.match(rf"int8 gate, {label}: \d+ STS-B dev pairs \+ 300 Quora rows: ", m) for m in msgs), msgs
    assert not any(m.startswith("gate: ") for m in msgs)
    finals = [m for m in msgs if ", took " in m]
    assert len(finals) == len(set(finals))  # no line twice
    assert "int8 quality gate passed (its screen)" in r.stdout  # 300 rows: the screen takes all, and 500 STS pairs
