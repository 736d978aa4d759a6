"""`python -m service demo --train`'s background chain, end to end on real components: a running API on 127.0.0.1
serving a tiny random BERT's index, `encoder adapt` (tiny BERT, a small Quora-format file with the real row ranges)
and `indexer build --target-recall` as niced child processes, progress in /ready, then the API's own swap to the
adapted version through its gates. And a stop mid-training: the child ends, nothing half-made is served."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from indexer.runtime.layout import IndexRoot
from indexer.runtime.manifest import Manifest
from service.demo import BackgroundTraining, TrainingPlan
from tests.conftest import REPO, start_server, stop_server
from tests.conftest import write_quora_like as quora_like


def served_root(tmp_path: Path, tiny_exported: Path, data: Path) -> Path:
    root = tmp_path / "root"
    r = subprocess.run([sys.executable, "-m", "indexer.cli", "build", "--root", str(root), "--model",
                        str(tiny_exported), "--data", str(data), "--rows", "60", "--threads", "1", "--keep", "10"],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return root


def plan_for(tmp_path: Path, root: Path, data: Path, checkpoint: Path, steps: int) -> TrainingPlan:
    out = tmp_path / "models" / "adapted"
    return TrainingPlan(root=root, out=out, work=tmp_path / "models" / "adapted.work", data=str(data), rows=60,
                        checkpoint=checkpoint, steps=steps, batch_size=8, threads=1, quantize="none")


def test_the_demo_keeps_serving_trains_in_the_background_and_swaps_through_the_gate(
        tiny_checkpoint: Path, tiny_exported: Path, tmp_path: Path) -> None:
    data = quora_like(tmp_path / "quora.tsv.gz")
    root = served_root(tmp_path, tiny_exported, data)
    before = IndexRoot(root).current_version()
    plan = plan_for(tmp_path, root, data, tiny_checkpoint, steps=8)
    server = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(root), "STRATA_TRAINING_STATUS": str(plan.status_file),
                                     "STRATA_WATCH_INTERVAL_S": "0.5"})
    training = BackgroundTraining(plan)
    try:
        client = server.client()
        assert "training" not in client.get("/ready").json()  # no status file yet
        training.start()
        stages, served_during = set(), set()
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            r = client.get("/ready")
            assert r.status_code == 200  # serving never waits for the training
            body = r.json()
            served_during.add(body["index_version"])
            if "training" in body:
                stages.add(body["training"]["stage"])
                if body["training"]["stage"] in ("done", "failed"):
                    break
            time.sleep(0.3)
        training.join(30)
        assert training.returncode == 0 and body["training"]["stage"] == "done", body
        assert "train" in stages or "mine" in stages or "base" in stages  # progress was visible on the way
        assert served_during == {before}  # the old index served until the build finished
        built = IndexRoot(root).current_version()
        assert built != before
        m = Manifest.load(IndexRoot(root).current_dir())
        assert m.model.pooling == "mean" and Path(m.model.dir) == plan.out.resolve()
        assert m.index.nprobe_calibration is not None and m.index.nprobe_calibration.target_recall == 0.95
        # the API swaps to it by itself (watching `current`), through its gates
        deadline = time.monotonic() + 60
        while client.get("/ready").json().get("index_version") != built and time.monotonic() < deadline:
            time.sleep(0.3)
        ready = client.get("/ready").json()
        old_eval, new_eval = Manifest.load(IndexRoot(root).version_dir(before)).eval, m.eval
        assert old_eval is not None and new_eval is not None
        assert new_eval.mrr_at_10 >= old_eval.mrr_at_10 - 0.02  # the default gate (STRATA_MAX_MRR_DROP) passes
        assert ready["index_version"] == built and ready["pooling"] == "mean", ready
        hits = client.post("/search", json={"query": "how can i learn python quickly", "top_k": 3}).json()
        assert hits["index_version"] == built and len(hits["hits"]) == 3
        assert client.get("/stats").json()["index"]["nprobe_target_recall"] == 0.95
    finally:
        training.stop()
        stop_server(server)


def test_stopping_the_demo_ends_the_training_and_serves_nothing_half_made(
        tiny_checkpoint: Path, tiny_exported: Path, tmp_path: Path) -> None:
    data = quora_like(tmp_path / "quora.tsv.gz")
    root = served_root(tmp_path, tiny_exported, data)
    before = IndexRoot(root).current_version()
    plan = plan_for(tmp_path, root, data, tiny_checkpoint, steps=100_000)  # would run for hours
    training = BackgroundTraining(plan)
    training.start()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # wait until it trains
        if plan.status_file.is_file() and '"stage": "train"' in plan.status_file.read_text():
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"training never started: {plan.status_file.read_text() if plan.status_file.exists() else ''}")
    t0 = time.monotonic()
    training.stop(timeout=60)
    assert time.monotonic() - t0 < 60 and training.returncode is None
    assert '"stage": "failed"' in plan.status_file.read_text()  # the status does not claim it still runs
    assert "Terminated" in plan.status_file.read_text()
    assert not plan.out.exists() and IndexRoot(root).current_version() == before
    assert (plan.work / "mined.tsv").is_file()  # finished stages are kept for the next run


def test_ready_ignores_an_unreadable_status_file(tmp_path: Path, quora_root: Path) -> None:
    status = tmp_path / "status.json"
    status.write_text("{not json")
    server = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(quora_root), "STRATA_TRAINING_STATUS": str(status)})
    try:
        assert "training" not in httpx.get(f"{server.url}/ready").json()
        status.write_text('{"stage": "mine", "message": "hard negatives", "updated_at": 1.0}')
        body = httpx.get(f"{server.url}/ready").json()
        assert body["ready"] and body["training"]["stage"] == "mine" and body["training"]["step"] == 0
    finally:
        stop_server(server)


@pytest.mark.parametrize("flag", ["--train", "--no-train"])
def test_train_is_a_demo_option(flag: str) -> None:
    r = subprocess.run([sys.executable, "-m", "service", "serve", flag], cwd=REPO, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "--train/--no-train apply to demo" in r.stderr and "Traceback" not in r.stderr
