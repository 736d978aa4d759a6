"""Serve first, evaluate after (`indexer.report`): a build publishes its version once the gates pass, a live API
serves it with the gate's MRR@10, and the report's figures (exact reference, every mode) appear in /ready, /stats
and the manifest once the report is done. Tiny encoder and corpus: the ordering is what is tested."""

from __future__ import annotations

import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx

from indexer.build import BuildConfig, build
from indexer.report import run_report
from indexer.runtime.layout import CURRENT, IndexRoot
from indexer.runtime.manifest import Manifest
from tests.conftest import indexer_cli, start_server, stop_server, write_quora_like

WAIT_S = 120  # a deadline for each condition below, not a pause: a loaded machine answers late, never wrongly


def _ready_until(url: str, what: str, check) -> dict[str, Any]:  # noqa: ANN001 (a predicate on /ready's body)
    deadline = time.monotonic() + WAIT_S
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        body = httpx.get(f"{url}/ready", timeout=30).json()
        if check(body):
            return body
        time.sleep(0.1)  # polling a condition: the interval only sets how soon it is seen
    raise AssertionError(f"/ready never showed {what} within {WAIT_S} s: {body}")


def test_a_build_is_served_before_its_report_and_the_figures_follow(tiny_exported: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    data = write_quora_like(tmp_path / "q.tsv.gz")
    srv = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(root), "STRATA_WATCH_INTERVAL_S": "0.2"})
    try:
        manifest = build(BuildConfig(model_dir=tiny_exported, data=str(data), root=root, rows=60, threads=1,
                              report_after=True))
        # published with the gate's figure only: current points at it, the report has not run
        assert IndexRoot(root).current_version() == manifest.version
        assert manifest.report is not None and manifest.report.state == "pending" and manifest.report.modes == ["dense",
                                                                                                                "lexical",
                                                                                           "hybrid"]
        assert (manifest.gate is not None and manifest.gate.n_queries == manifest.data.n_queries
                and manifest.eval is None and not manifest.eval_modes)
        body = _ready_until(srv.url, f"{manifest.version} served", lambda b: b.get("index_version") == manifest.version)
        assert body["evaluation"] == {"state": "pending", "mrr_at_10": manifest.gate.mrr_at_10, "modes": {}}
        assert body["model_name"] == tiny_exported.name and body["model"] == str(tiny_exported)
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            assert c.post("/search", json={"query": "how can i learn python", "top_k": 3}).status_code == 200
            index = c.get("/stats").json()["index"]
        assert index["report_state"] == "pending" and index["mrr_at_10"] == manifest.gate.mrr_at_10
        assert index["exact_mrr_at_10"] is None  # the report's figure: not measured yet

        done = run_report(root, manifest.version, threads=1)
        assert done.report is not None and done.report.state == "done" and done.eval is not None
        assert done.eval.mrr_at_10 == manifest.gate.mrr_at_10  # the gate scored the ranking the full evaluation scores
        body = _ready_until(srv.url, "the report's figures", lambda b: b["evaluation"]["state"] == "done")
        modes = body["evaluation"]["modes"]
        assert sorted(modes) == ["dense", "hybrid", "lexical"]
        assert modes["dense"]["exact_mrr_at_10"] == done.eval.exact_mrr_at_10
        assert modes["hybrid"]["mrr_at_10"] == done.eval_modes["hybrid"].mrr_at_10
        assert body["evaluation"]["seconds"] == done.report.seconds
        index = httpx.get(f"{srv.url}/stats", timeout=30).json()["index"]
        assert index["report_state"] == "done" and index["exact_mrr_at_10"] == done.eval.exact_mrr_at_10
    finally:
        stop_server(srv)
    assert "the report of " + manifest.version + " is done" in srv.log.read_text()


def test_indexer_build_publishes_then_reports(tiny_exported: Path, tmp_path: Path) -> None:
    """The CLI's order, as the files record it: `current` was switched before the report started, and the
    report's figures are in the manifest when the command returns."""
    root = tmp_path / "root"
    data = write_quora_like(tmp_path / "q.tsv.gz")
    r = indexer_cli("build", "--root", str(root), "--model", str(tiny_exported), "--data", str(data), "--rows", "60",
                    "--threads", "1")
    assert r.returncode == 0, r.stderr
    version = IndexRoot(root).current_version()
    assert version is not None
    manifest = Manifest.load(IndexRoot(root).version_dir(version))
    assert manifest.report is not None and manifest.report.state == "done" and manifest.report.started_at is not None
    published = datetime.fromtimestamp(os.lstat(root / CURRENT).st_mtime, timezone.utc)
    assert published <= manifest.report.started_at <= manifest.report.finished_at  # type: ignore[operator]
    assert manifest.eval is not None and sorted(manifest.eval_modes) == ["dense", "hybrid", "lexical"]
    out = r.stdout
    assert out.index(f"published version {version}") < out.index("by /search mode:"), out
    assert f"gate: MRR@10 {manifest.gate.mrr_at_10:.4f}" in out and "+ report " in out  # type: ignore[union-attr]


def test_indexer_eval_measures_a_report_that_was_cut_short(tiny_exported: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    manifest = build(BuildConfig(model_dir=tiny_exported, data=str(write_quora_like(tmp_path / "q.tsv.gz")), root=root,
                          rows=60, threads=1, report_after=True))
    assert manifest.report is not None and manifest.report.state == "pending"
    r = indexer_cli("eval", "--root", str(root), "--threads", "1")
    assert r.returncode == 0, r.stderr
    after = Manifest.load(IndexRoot(root).version_dir(manifest.version))
    assert after.report is not None and after.report.state == "done" and after.report.finished_at is not None
    assert sorted(after.eval_modes) == ["dense", "hybrid", "lexical"] and after.eval is not None
