"""`python -m service demo --train`'s background chain, end to end on real components: a running API on 127.0.0.1
serving a tiny random BERT's index, `encoder adapt` (tiny BERT, a small Quora-format file with the real row ranges)
and `indexer build --target-recall` as niced child processes, progress in /ready, then the API's own swap to the
adapted version through its gates. And a stop mid-training: the child ends, nothing half-made is served."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from indexer.runtime.layout import IndexRoot
from indexer.runtime.manifest import Manifest
from service.demo import BackgroundTraining, TrainingPlan
from service.training_status import STAGES
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
    # at normal priority: the demo's nice 19 (the default, checked below) all but stops the chain beside other work at
    # normal priority, as this suite's run beside two CPU burners showed (no step in 10 minutes)
    return TrainingPlan(root=root, out=out, work=tmp_path / "models" / "adapted.work", data=str(data), rows=60,
                        checkpoint=checkpoint, steps=steps, batch_size=8, threads=1, quantize="none", nice=0)


def test_the_demo_keeps_serving_trains_in_the_background_and_swaps_through_the_gate(
        tiny_checkpoint: Path, tiny_exported: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        capfd: pytest.CaptureFixture[str]) -> None:
    caplog.set_level(logging.INFO, logger="service.training_status")
    data = quora_like(tmp_path / "quora.tsv.gz")
    root = served_root(tmp_path, tiny_exported, data)
    before = IndexRoot(root).current_version()
    plan = plan_for(tmp_path, root, data, tiny_checkpoint, steps=8)
    server = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(root), "STRATA_TRAINING_STATUS": str(plan.chain_file),
                                     "STRATA_WATCH_INTERVAL_S": "0.5"})
    training = BackgroundTraining(plan)
    try:
        client = server.client()
        assert "training" not in client.get("/ready").json()  # no status file yet
        training.start()
        seen: list[dict] = []
        served_during = set()
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            r = client.get("/ready")
            assert r.status_code == 200  # serving never waits for the training
            body = r.json()
            if "training" in body:
                seen.append(body["training"])
                if body["training"]["stage"] in ("done", "failed"):
                    break
                if body["training"]["stage"] in STAGES[:4]:
                    served_during.add(body["index_version"])  # the old version serves until the build is done
            time.sleep(0.3)
        training.join(30)
        done = body["training"]
        assert training.returncode == 0 and done["stage"] == "done", body
        built = IndexRoot(root).current_version()
        assert built != before and served_during == {before}
        # /ready said when and to which version the API swapped
        assert done["swap"]["outcome"] == "swapped" and done["swap"]["version"] == built == body["index_version"]
        assert done["swap"]["at"] and "swapped to " + built in done["message"] and done["eta_s"] == 0
        # every stage ran, in order, and reported its progress: counted ones to their totals
        stages = {s["name"]: s for s in done["stages"]}
        assert [s["name"] for s in done["stages"]] == list(STAGES)
        assert all(s["finished_at"] for s in done["stages"][:-1])
        for name, unit in (("mine", "anchors"), ("train", "steps"), ("index", "texts")):
            assert stages[name]["unit"] == unit and stages[name]["done"] == stages[name]["total"] > 0, stages[name]
        assert stages["train"]["total"] == 8
        # while it ran: one ETA for the whole remaining chain, whatever the stage (a tiny chain's stages pass in
        # seconds: /ready saw some of them; the stage records above show them all)
        running = [t for t in seen if t["stage"] in STAGES]
        assert len({t["stage"] for t in running}) >= 2, running
        assert all(t["eta_s"] is not None and t["eta_at"] and t["stages_total"] == 6 for t in running), running
        # and the log: a line for every stage, with the chain's ETA
        logged = [r.getMessage() for r in caplog.records if r.name == "service.training_status"]
        for number, name in enumerate(STAGES, 1):
            assert any(m.startswith(f"background [{number}/6] {name}: ") and "for the whole chain" in m
                       for m in logged), logged
        # one numbering, one line per stage: the children the chain follows print neither their own stage numbers
        # ("adapt [k/4]") nor their progress lines (the chain's "background [k/6]" lines carry them)
        children = [json.loads(line) for line in capfd.readouterr().err.splitlines() if line.startswith("{")]
        assert any(rec["logger"].startswith("models.") for rec in children), children[:5]  # their log is here
        assert not [rec for rec in children if rec["msg"].startswith("adapt [")]
        assert not [rec for rec in children if rec["logger"] == "indexer.runtime.progress"]
        assert not [rec for rec in children if "best=-inf" in rec["msg"]]
        m = Manifest.load(IndexRoot(root).current_dir())
        assert m.model.pooling == "mean" and Path(m.model.dir) == plan.out.resolve()
        if m.index.kind == "ivf":  # the demo's 100k rows: ivf at the nprobe the adapted encoder needs
            assert m.index.nprobe_calibration is not None and m.index.nprobe_calibration.target_recall == 0.95
        else:  # this tiny corpus is below `--index auto`'s crossover: exact search, nothing to calibrate
            assert m.index.kind == "flat" and m.index.ntotal < 1_000, (m.index.kind, m.index.ntotal)
        # the API swapped to it by itself (watching `current`), through its gates
        ready = client.get("/ready").json()
        old_eval, new_eval = Manifest.load(IndexRoot(root).version_dir(before)).eval, m.eval
        assert old_eval is not None and new_eval is not None
        assert new_eval.mrr_at_10 >= old_eval.mrr_at_10 - 0.02  # the default gate (STRATA_MAX_MRR_DROP) passes
        assert ready["index_version"] == built and ready["pooling"] == "mean", ready
        hits = client.post("/search", json={"query": "how can i learn python quickly", "top_k": 3}).json()
        assert hits["index_version"] == built and len(hits["hits"]) == 3
        if m.index.kind == "ivf":
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
    assert training._proc is not None  # the plan's niceness reached the child
    own = os.getpriority(os.PRIO_PROCESS, 0)
    assert os.getpriority(os.PRIO_PROCESS, training._proc.pid) == min(19, own + plan.nice)
    assert TrainingPlan(root=root, out=plan.out, work=plan.work, data=plan.data).nice == 19  # the demo's default
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
        assert "training" not in httpx.get(f"{server.url}/ready", timeout=30).json()
        status.write_text('{"stage": "mine", "message": "hard negatives", "updated_at": 1.0}')
        body = httpx.get(f"{server.url}/ready", timeout=30).json()
        assert body["ready"] and body["training"]["stage"] == "mine" and body["training"]["step"] == 0
    finally:
        stop_server(server)


@pytest.mark.parametrize("flag", ["--train", "--no-train"])
def test_train_is_a_demo_option(flag: str) -> None:
    r = subprocess.run([sys.executable, "-m", "service", "serve", flag], cwd=REPO, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "--train/--no-train apply to demo" in r.stderr and "Traceback" not in r.stderr
