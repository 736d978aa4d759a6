"""`indexer build --target-recall`: nprobe chosen per encoder (on the corpus's own documents for
`calibrate_opened`, on query-like probes for a build: tests/indexer/test_calibrate_probes.py), checked against a
brute-force recall computed here, and carried through the manifest, evaluation, `--add` and the CLI's errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from indexer.calibrate import calibrate_opened
from indexer.probes import PROBES_FILE
from indexer.runtime.faiss.exact import sample_stored, stored_vectors
from indexer.runtime.faiss.training import build_ivf
from indexer.runtime.layout import IndexRoot
from indexer.runtime.manifest import Manifest
from indexer.runtime.version import IndexVersion
from tests.conftest import indexer_cli as cli
from tests.conftest import start_server, stop_server

DIM, N, NLIST = 32, 5000, 64


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def clustered(rng: np.random.Generator) -> np.ndarray:
    centers = unit(rng.standard_normal((NLIST, DIM)))
    return unit(centers[rng.integers(0, NLIST, N)] + 0.12 * rng.standard_normal((N, DIM)))


def spread(rng: np.random.Generator) -> np.ndarray:
    return unit(rng.standard_normal((N, DIM)))


def brute_force_recall(index: object, query_ids: np.ndarray, queries: np.ndarray, nprobe: int) -> float:
    """ANN recall@10 at `nprobe`, self excluded, computed here with numpy over the stored vectors: a returned id
    counts when its own score reaches the exact 10th score (ties are interchangeable)."""
    import faiss

    ids, vecs = stored_vectors(index)
    row_of = {int(i): r for r, i in enumerate(ids)}
    scores = queries @ vecs.T
    scores[ids[None, :] == query_ids[:, None]] = -np.inf
    kth = -np.sort(-scores, axis=1)[:, 9]
    faiss.extract_index_ivf(index).nprobe = nprobe
    _, got = index.search(queries, 11)  # type: ignore[attr-defined]
    shares = []
    for q, row, threshold, vec in zip(query_ids, got, kth, queries, strict=True):
        returned = [int(i) for i in row if i >= 0 and i != q][:10]
        shares.append(min(10, sum(float(vec @ vecs[row_of[i]]) >= threshold - 1e-5 for i in returned)) / 10)
    return float(np.mean(shares))


@pytest.mark.parametrize("target", [0.8, 0.95])
def test_the_fewest_lists_that_reach_the_target(target: float) -> None:
    rng = np.random.default_rng(3)
    docs = spread(rng)
    index, _, _ = build_ivf(docs, np.arange(10_000, 10_000 + N), NLIST, nprobe=20, codec="Flat")
    cal = calibrate_opened(index, target, sample=500, seed=5)
    import faiss

    assert faiss.extract_index_ivf(index).nprobe == cal.nprobe  # left set to the choice
    query_ids, queries = sample_stored(index, 500, seed=5)
    assert cal.reached and cal.sample_queries == 500 and cal.target_recall == target
    assert 1 < cal.nprobe < NLIST
    assert brute_force_recall(index, query_ids, queries, cal.nprobe) == pytest.approx(cal.recall_at_10, abs=1e-6)
    assert cal.recall_at_10 >= target
    assert brute_force_recall(index, query_ids, queries, cal.nprobe - 1) < target  # one list fewer misses it
    assert [m.nprobe for m in cal.measured] == sorted({m.nprobe for m in cal.measured})
    # galloping (1, 2, 4…) then bisection over 64 lists, not a sweep, never far past the answer
    assert len(cal.measured) <= 13 and max(m.nprobe for m in cal.measured) <= 2 * cal.nprobe


def test_an_encoder_that_spreads_neighbours_gets_more_lists() -> None:
    rng = np.random.default_rng(4)
    chosen = {}
    for name, docs in (("clustered", clustered(rng)), ("spread", spread(rng))):
        index, _, _ = build_ivf(docs, np.arange(N), NLIST, nprobe=20)
        chosen[name] = calibrate_opened(index, 0.9, sample=400, seed=0)
    assert chosen["clustered"].nprobe * 3 <= chosen["spread"].nprobe, chosen
    assert min(c.recall_at_10 for c in chosen.values()) >= 0.9


def test_every_list_when_the_target_is_everything() -> None:
    rng = np.random.default_rng(6)
    index, _, _ = build_ivf(spread(rng)[:1200], np.arange(1200), 16, nprobe=1, codec="Flat")
    cal = calibrate_opened(index, 1.0, sample=5000, seed=0)
    assert cal.sample_queries == 1200  # a sample larger than the index: every document once
    assert cal.recall_at_10 >= 0.999 and cal.nprobe <= 16


@pytest.mark.parametrize("bad", [0.0, -0.5, 1.01])
def test_a_target_outside_0_1_is_refused(bad: float) -> None:
    rng = np.random.default_rng(0)
    index, _, _ = build_ivf(spread(rng)[:800], np.arange(800), 8, nprobe=1)
    with pytest.raises(ValueError, match=r"must be in \(0, 1\]"):
        calibrate_opened(index, bad)


@pytest.fixture(scope="module")
def calibrated_root(tmp_path_factory: pytest.TempPathFactory, tiny_exported: Path, quora_file: Path) -> Path:
    root = tmp_path_factory.mktemp("calibrated") / "root"
    r = cli("build", "--root", str(root), "--model", str(tiny_exported), "--data", str(quora_file), "--rows", "6000",
            "--threads", "2", "--target-recall", "0.9", "--keep", "10", "--index", "ivf")
    assert r.returncode == 0, r.stderr
    assert "of the exact top 10 on 1000 held apart queries (paper protocol" in r.stdout, r.stdout
    assert "(target 0.9;" in r.stdout, r.stdout
    return root


def test_the_build_serves_and_evaluates_at_the_calibrated_nprobe(calibrated_root: Path) -> None:
    folder = IndexRoot(calibrated_root).current_dir()
    manifest = Manifest.load(folder)
    cal = manifest.index.nprobe_calibration
    assert cal is not None and cal.reached and cal.target_recall == 0.9 and cal.sample_queries == 1000
    assert manifest.index.nprobe == cal.nprobe and manifest.eval is not None and manifest.eval.nprobe == cal.nprobe
    assert manifest.build_seconds.calibrate_s == cal.seconds > 0
    version = IndexVersion(folder)  # what the API opens: the calibrated nprobe
    try:
        assert version.nprobe == cal.nprobe
        with np.load(folder / PROBES_FILE) as z:  # the probes it was calibrated on (paper protocol: no self)
            queries, query_ids = z["vectors"], z["self_ids"]
        assert len(queries) == cal.sample_queries and (query_ids == -1).all()
        assert brute_force_recall(version.index, query_ids, queries, cal.nprobe) >= 0.9
        if cal.nprobe > 1:
            assert brute_force_recall(version.index, query_ids, queries, cal.nprobe - 1) < 0.9
    finally:
        version.close()


def test_the_api_serves_the_calibrated_nprobe(calibrated_root: Path, tmp_path: Path) -> None:
    manifest = Manifest.load(IndexRoot(calibrated_root).current_dir())
    server = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(calibrated_root)})
    try:
        index = server.client().get("/stats").json()["index"]
        assert index["version"] == manifest.version and index["nprobe"] == manifest.index.nprobe
        assert index["nprobe_target_recall"] == 0.9 and index["eval_nprobe"] == manifest.index.nprobe
    finally:
        stop_server(server)


def test_add_calibrates_again_with_the_same_target(calibrated_root: Path, tmp_path: Path) -> None:
    root = IndexRoot(calibrated_root)
    base = Manifest.load(root.current_dir())
    new = tmp_path / "new.tsv"
    new.write_text("id\tquestion\n" + "".join(f"{900_000 + i}\tIs question number {i} about volcanoes on Mars?\n"
                                              for i in range(200)))
    r = cli("build", "--root", str(calibrated_root), "--add", str(new), "--threads", "2", "--keep", "10")
    assert r.returncode == 0, r.stderr
    manifest = Manifest.load(root.current_dir())
    assert manifest.parent_version == base.version and manifest.index.ntotal == base.index.ntotal + 200
    cal = manifest.index.nprobe_calibration
    assert cal is not None and cal.target_recall == 0.9 and cal.recall_at_10 >= 0.9 and cal.reached
    assert manifest.index.nprobe == cal.nprobe
    # measured anew on the grown index, with the probes the base version was calibrated on
    assert "calibrating nprobe" in r.stderr and cal.probes == base.index.nprobe_calibration.probes  # type: ignore[union-attr]
    version = IndexVersion(root.current_dir())
    try:
        with np.load(root.current_dir() / PROBES_FILE) as z:
            queries, query_ids = z["vectors"], z["self_ids"]
        assert brute_force_recall(version.index, query_ids, queries, cal.nprobe) >= 0.9
    finally:
        version.close()


def test_a_plain_build_keeps_the_given_nprobe(tiny_exported: Path, quora_file: Path, tmp_path: Path) -> None:
    r = cli("build", "--root", str(tmp_path / "root"), "--model", str(tiny_exported), "--data", str(quora_file),
            "--rows", "500", "--threads", "2", "--nprobe", "3", "--no-eval")
    assert r.returncode == 0, r.stderr
    manifest = Manifest.load(IndexRoot(tmp_path / "root").current_dir())
    assert manifest.index.nprobe == 3 and manifest.index.nprobe_calibration is None


@pytest.mark.parametrize(("args", "message"), [
    (("--nprobe", "4", "--target-recall", "0.9"), "not allowed with argument"),
    (("--target-recall", "1.5"), "must be in (0, 1], not 1.5"),
    (("--target-recall", "high"), "invalid recall_target value"),
    (("--nprobe", "0"), "must be >= 1, not 0"),
])
def test_bad_probe_options_are_clear_errors(tmp_path: Path, quora_file: Path, args: tuple[str, ...],
                                            message: str) -> None:
    r = cli("build", "--root", str(tmp_path / "root"), "--data", str(quora_file), *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr and message in r.stderr, r.stderr
    assert not (tmp_path / "root").exists()


def test_target_recall_with_add_is_refused(calibrated_root: Path, tmp_path: Path) -> None:
    new = tmp_path / "one.tsv"
    new.write_text("id\tquestion\n990001\tWhy?\n")
    before = IndexRoot(calibrated_root).current_version()
    r = cli("build", "--root", str(calibrated_root), "--add", str(new), "--target-recall", "0.9")
    assert r.returncode == 2 and "--add calibrates again by itself" in r.stderr, r.stderr
    assert IndexRoot(calibrated_root).current_version() == before
