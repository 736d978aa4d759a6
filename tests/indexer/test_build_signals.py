"""Stopping a build: SIGTERM (what `docker compose stop` sends) leaves nothing half-made, and an unreachable
data URL is an error that names the URL."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from indexer.runtime.layout import BUILDING_PREFIX, LOCK, IndexRoot
from tests.conftest import REPO, free_port


def indexer(*args: str) -> list[str]:
    return [sys.executable, "-m", "indexer.cli", *args]


def lock_is_free(root: Path) -> bool:
    with open(root / LOCK, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(fh, fcntl.LOCK_UN)
        return True


def test_sigterm_mid_build_removes_the_staging_folder_and_releases_the_lock(
        tiny_exported: Path, quora_file: Path, tmp_path: Path) -> None:
    root = tmp_path / "indexes" / "quora"
    env = os.environ | {"STRATA_HOME": str(tmp_path), "PYTHONPATH": str(REPO)}
    # enough rows that the build is still encoding when the signal comes, even on a fast machine
    proc = subprocess.Popen(indexer("build", "--model", str(tiny_exported), "--data", str(quora_file), "--root",
                                    str(root), "--rows", "60000", "--threads", "1"),
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not list(root.glob(f"{BUILDING_PREFIX}*")):
            assert proc.poll() is None, f"build ended before it was signalled: {proc.communicate()}"
            assert time.monotonic() < deadline, "no staging folder within 120 s"
            time.sleep(0.02)
        assert not lock_is_free(root)  # the build holds its lock while staging
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        stopped_in = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert "indexer build: terminated (SIGTERM)" in err and "Traceback" not in err
    assert stopped_in < 20, f"took {stopped_in:.1f} s to stop"  # promptly: the 60,000 rows would take minutes more
    assert sorted(p.name for p in root.iterdir()) == [LOCK]  # no .building-*, no versions/, no current
    assert lock_is_free(root)

    # the next build neither trips over the interrupted one nor needs to clean up after it
    r = subprocess.run(indexer("build", "--model", str(tiny_exported), "--data", str(quora_file), "--root",
                               str(root), "--rows", "300", "--threads", "1", "--no-eval"),
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "partial build" not in r.stderr
    index = IndexRoot(root)
    assert index.versions() == [index.current_version()]


def test_unreachable_data_url_names_the_url(tmp_path: Path) -> None:
    from indexer.quora import DownloadError, resolve_source

    url = f"http://127.0.0.1:{free_port()}/quora_duplicate_questions.tsv"  # nothing listens there
    with pytest.raises(DownloadError, match=f"cannot download Quora data from {url}: .*Connection refused"):
        resolve_source(url, tmp_path / "downloads")
    assert list((tmp_path / "downloads").iterdir()) == []  # no .part left behind


def test_build_cli_with_unreachable_url_is_one_line(tiny_exported: Path, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/quora_duplicate_questions.tsv"
    root = tmp_path / "root"
    r = subprocess.run(indexer("build", "--model", str(tiny_exported), "--data", url, "--root", str(root)),
                       cwd=REPO, env=os.environ | {"STRATA_HOME": str(tmp_path), "PYTHONPATH": str(REPO)},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"indexer build: error: cannot download Quora data from {url}: [Errno 111] Connection refused" in r.stderr
    assert IndexRoot(root).versions() == [] and not list(root.glob(f"{BUILDING_PREFIX}*"))
