"""`encoder adapt`: base export → mining → training → export, on a tiny random BERT and a small Quora-format
file with real ONNX Runtime, FAISS and torch; every stage kept and skipped on a rerun, its status file, and
clear errors."""

from __future__ import annotations

import gzip
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from models.adapt import STAGES, AdaptConfig, adapt
from models.pipeline import eta_from_log
from tests.conftest import REPO
from tests.models.fixtures import WORDS

TRAIN_ROWS, DEV_ROWS, EVAL_ROWS = (10, 170), (170, 210), 10


def quora_file(path: Path) -> Path:
    """Rows 0-9 evaluation, 10-169 training, 170-209 dev: duplicates share most words, as Quora's do."""
    rng = random.Random(0)
    qid = 0
    with gzip.open(path, "wt") as f:
        f.write("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n")
        for rid in range(210):
            words = rng.sample(WORDS, 6)
            q1 = " ".join(words)
            dup = rid % 3 != 0
            q2 = " ".join(words[:5] + [rng.choice(WORDS)]) if dup else " ".join(rng.sample(WORDS, 6))
            f.write(f"{rid}\t{qid + 1}\t{qid + 2}\t{q1}?\t{q2}?\t{int(dup)}\n")
            qid += 2
    return path


def config(tmp_path: Path, tiny_bert: Path, data: Path, **over: object) -> AdaptConfig:
    settings: dict[str, object] = dict(
        out=tmp_path / "adapted", work=tmp_path / "work", checkpoint=tiny_bert, data=data, steps=6, batch_size=8,
        max_length=16, eval_every=3, quantize="none", threads=1, progress=False, dev_rows=DEV_ROWS,
        training_rows=TRAIN_ROWS, eval_rows=EVAL_ROWS)
    settings.update(over)
    return AdaptConfig(**settings)  # type: ignore[arg-type]


def test_adapt_runs_every_stage_then_reuses_them(tiny_bert: Path, tmp_path: Path) -> None:
    from indexer.runtime.encoder import OnnxEncoder
    from models.data import read_mined
    from models.sentence_model import SentenceModel

    data = quora_file(tmp_path / "quora.tsv.gz")
    cfg = config(tmp_path, tiny_bert, data)
    seen: list[str] = []
    out = adapt(cfg, on_status=lambda s: seen.append(s.stage))
    assert out == cfg.out and seen[0] == "base" and seen[-1] == "done" and set(STAGES) <= set(seen)

    status = json.loads((cfg.work / "status.json").read_text())
    assert status["stage"] == "done" and status["stages_done"] == list(STAGES) and status["step"] == 6
    meta = json.loads((cfg.out / "encoder.json").read_text())
    assert meta["pooling"] == "mean" and "encoder adapt" in meta["source"]
    # mined from the training rows only: no question of the evaluation or dev rows is an anchor
    mined = read_mined(cfg.work / "mined.tsv")
    assert mined and all(len(ex) == 3 for ex in mined)
    lines = gzip.open(data, "rt").read().splitlines()[1:]
    held = {t for line in lines if not TRAIN_ROWS[0] <= int(line.split("\t")[0]) < TRAIN_ROWS[1]
            for t in line.split("\t")[3:5]}
    assert not {ex[0] for ex in mined} & held
    # the exported vector is the trained checkpoint's token mean
    log_rows = [json.loads(x) for x in (cfg.work / "train" / "log.jsonl").read_text().splitlines()]
    assert log_rows[-1]["event"] == "end" and log_rows[-1]["best_step"] in (3, 6)
    model = SentenceModel.from_checkpoint(cfg.work / "train" / "best", pooler="avg_last", max_length=16)
    texts = ["how do i learn python quickly", "why is the sky blue"]
    want = model.encode(texts, mode="mean")
    got = OnnxEncoder(cfg.out).encode(texts)
    assert np.allclose(np.sum(want * got, axis=1), 1.0, atol=1e-4)

    # a second run keeps the base export, the mined file, the training and the export: nothing is recomputed
    mined_mtime = (cfg.work / "mined.tsv").stat().st_mtime_ns
    onnx_mtime = (cfg.out / "encoder.onnx").stat().st_mtime_ns
    n_log = len(log_rows)
    adapt(cfg)
    assert (cfg.work / "mined.tsv").stat().st_mtime_ns == mined_mtime
    assert len((cfg.work / "train" / "log.jsonl").read_text().splitlines()) == n_log
    # nothing retrained, and the status still says how good the training was (from the trainer's log)
    again = json.loads((cfg.work / "status.json").read_text())
    assert status["best_dev"] is not None and again["best_dev"] == pytest.approx(status["best_dev"], abs=1e-4)
    assert (cfg.out / "encoder.onnx").stat().st_mtime_ns == onnx_mtime
    # an export replaced by hand is written again
    (cfg.out / "encoder.json").write_text((cfg.out / "encoder.json").read_text().replace(meta["onnx_sha256"], "0" * 64))
    adapt(cfg)
    assert json.loads((cfg.out / "encoder.json").read_text())["onnx_sha256"] == meta["onnx_sha256"]

    # other training settings start the training again (the mined file is kept)
    adapt(config(tmp_path, tiny_bert, data, steps=3, eval_every=3))
    assert (cfg.work / "mined.tsv").stat().st_mtime_ns == mined_mtime
    rows = [json.loads(x) for x in (cfg.work / "train" / "log.jsonl").read_text().splitlines()]
    assert rows[0]["event"] == "start" and rows[0]["total_steps"] == 3 and rows[-1]["event"] == "end"


def test_a_failed_stage_is_in_the_status_and_writes_no_model(tiny_bert: Path, tmp_path: Path) -> None:
    from models.data import DataError

    data = quora_file(tmp_path / "quora.tsv.gz")
    cfg = config(tmp_path, tiny_bert, data, training_rows=(10, 11))  # one training row: nothing to train on
    with pytest.raises((DataError, ValueError)):
        adapt(cfg)
    status = json.loads((cfg.work / "status.json").read_text())
    assert status["stage"] == "failed" and status["message"].startswith(("mine:", "train:"))
    assert not cfg.out.exists()


def test_eta_follows_the_training_log(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    assert eta_from_log(log, 500) == (0, None)
    log.write_text("\n".join(json.dumps(r) for r in [
        {"event": "start", "time": 0.0, "total_steps": 500},
        {"time": 100.0, "step": 10, "loss": 1.0}, {"time": 130.0, "step": 20, "loss": 0.9}]) + "\n")
    step, eta = eta_from_log(log, 500)
    assert step == 20 and eta == pytest.approx(480 * 3.0)


def test_cli_names_a_missing_data_file(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "models.cli", "adapt", "--out", str(tmp_path / "m"), "--data",
                        str(tmp_path / "nope.tsv"), "--no-progress", "--threads", "1"], cwd=REPO,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("encoder adapt: error:") and "nope.tsv" in r.stderr
    assert not (tmp_path / "m").exists() and not (tmp_path / "m.work").exists()  # refused before any work


@pytest.mark.parametrize("flag, value, message", [
    ("--lr", "0", "must be a finite number above 0"),  # was taken as "unset": the default rate, silently
    ("--lr", "nan", "must be a finite number above 0"),
    ("--lr", "inf", "must be a finite number above 0"),
    ("--lr", "-1", "must be a finite number above 0"),
    ("--seed", "-1", "must be >= 0"),
    ("--skip", "-1", "must be >= 0"),
])
def test_adapt_refuses_a_bad_rate_seed_or_skip_while_parsing(flag, value, message, capsys):
    """`encoder adapt --lr nan` (or -1, a negative seed or skip) ran the base export and the mining first and failed
    at the training stage, minutes to an hour in; `--lr 0` silently trained at the default rate."""
    from models.cli import build_parser

    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["adapt", "--out", "x", flag, value])
    assert exit_info.value.code == 2 and f"argument {flag}: {message}" in capsys.readouterr().err
