"""The CLIs' shared plumbing (`indexer/console.py`): SIGTERM ends a command once its clean-up has unwound, without
waiting for work in flight on pool threads (what made a nice-19 build outlive `docker compose stop`'s 10 s)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO

# A command as the CLIs run theirs: a pool thread busy for a minute (a batch being encoded), the main thread waiting
# in a context manager whose exit is the clean-up, and an atexit function (what ray.init registers).
COMMAND = r"""
import atexit, sys, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from indexer.console import run_cli

out = Path(sys.argv[1])
atexit.register(lambda: (out / "atexit").write_text("ran"))

def busy() -> None:
    end = time.monotonic() + 60
    while time.monotonic() < end:
        pass

def go() -> int:
    pool = ThreadPoolExecutor(1)
    pool.submit(busy)
    try:
        (out / "staging").mkdir()
        print("started", flush=True)
        time.sleep(120)
    finally:
        (out / "staging").rmdir()
        pool.shutdown(wait=False)
    return 0

sys.exit(run_cli(go, (), "cmd"))
"""


def test_sigterm_exits_after_the_clean_up_without_waiting_for_pool_threads(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", COMMAND, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=50)  # a normal exit would join the busy thread: ~60 s
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "cmd: terminated (SIGTERM)" in err and "Traceback" not in err
    assert took < 30, f"{took:.1f} s: the exit waited for the pool thread"
    assert not (tmp_path / "staging").exists()  # the clean-up ran
    assert (tmp_path / "atexit").read_text() == "ran"  # and the atexit functions



def test_the_clis_log_at_strata_log_level(tmp_path: Path) -> None:
    """docs/operations.md: STRATA_LOG_LEVEL is the same for every CLI; the CLIs logged INFO whatever it said. At
    warning a CLI now logs no INFO line (`running below the API's priority`); a bad level is a warning, INFO used."""

    def snapshot_list(level: str) -> str:
        env = os.environ | {"STRATA_LOG_LEVEL": level, "STRATA_LOG_FORMAT": "json", "STRATA_BUILD_PRIORITY": "low"}
        r = subprocess.run([sys.executable, "-m", "indexer.cli", "snapshot", "list", "--root", str(tmp_path)],
                           cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return r.stderr

    assert "running below the API's priority" in snapshot_list("info")
    assert "running below the API's priority" not in snapshot_list("WARNING")
    loud = snapshot_list("loud")
    assert "STRATA_LOG_LEVEL must be one of critical, error, warning, info, debug (got 'loud'); using info" in loud
    assert "running below the API's priority" in loud
