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


def thread_priorities(pid: int) -> list[tuple[int, int]]:
    """(nice, scheduling policy) of every thread of `pid`, from /proc (policy 0: SCHED_OTHER, 5: SCHED_IDLE)."""
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # a thread that just ended
            continue
        out.append((int(fields[16]), int(fields[38])))  # stat fields 19 and 41 (fields[0] is field 3)
    return out


def io_priority(tid: int) -> int | None:
    import ctypes
    import platform

    number = {"x86_64": 252, "aarch64": 31}.get(platform.machine())  # ioprio_get
    if number is None:
        return None
    return ctypes.CDLL(None).syscall(number, 1, tid)  # IOPRIO_WHO_PROCESS


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread priorities are read from /proc")
@pytest.mark.parametrize(("mode", "nice", "policy", "ioprio"),
                         [(None, 19, 0, (2 << 13) | 7), ("normal", 0, 0, None)])
def test_builds_run_below_the_apis_priority_unless_opted_out(
        tiny_exported: Path, quora_file: Path, tmp_path: Path, mode: str | None, nice: int, policy: int,
        ioprio: int | None) -> None:
    """A real `indexer build`, looked at from outside while it encodes: every thread at nice 19 and the lowest
    best-effort IO priority by default, and unchanged (this test's own priority) with STRATA_BUILD_PRIORITY=normal
    (`idle` is checked below without a build: under load a SCHED_IDLE build takes minutes to reach its staging)."""
    if os.getpriority(os.PRIO_PROCESS, 0) != 0:
        pytest.skip("this test runs niced already: `normal` could not be told apart")
    root = tmp_path / "root"
    env = os.environ | {"PYTHONPATH": str(REPO)}
    env.pop("STRATA_BUILD_PRIORITY", None)  # the suite sets `normal` for its own builds (tests/conftest.py)
    if mode is not None:
        env["STRATA_BUILD_PRIORITY"] = mode
    proc = subprocess.Popen(indexer("build", "--model", str(tiny_exported), "--data", str(quora_file), "--root",
                                    str(root), "--rows", "60000", "--threads", "2"),
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # a nice-19 build weighs 15 against a normal process's 1,024: beside CPU-bound work at normal priority it
        # gets ~1 % of a core and took over 120 s to reach its staging (a full suite beside two burners); quiet, ~2 s
        wait_s = 120 if nice == 0 else 900
        deadline = time.monotonic() + wait_s
        while not list(root.glob(f"{BUILDING_PREFIX}*")):  # the build is under way, its threads started
            assert proc.poll() is None, f"build ended early: {proc.communicate()}"
            assert time.monotonic() < deadline, f"no staging folder within {wait_s} s"
            time.sleep(0.02)
        seen = thread_priorities(proc.pid)
        assert len(seen) > 1 and set(seen) == {(nice, policy)}, seen
        if ioprio is not None and io_priority(proc.pid) is not None:
            assert io_priority(proc.pid) == ioprio
    finally:
        proc.kill()
        proc.communicate()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread priorities are read from /proc")
def test_idle_priority_puts_every_thread_under_sched_idle() -> None:
    code = ("import threading, time; from indexer.runtime.priority import lower_priority\n"
            "t = threading.Thread(target=time.sleep, args=(30,), daemon=True); t.start()\n"  # one before
            "print(lower_priority('idle').describe(), flush=True)\n"
            "threading.Thread(target=time.sleep, args=(30,), daemon=True).start(); input()")  # one after
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=os.environ | {"PYTHONPATH": str(REPO)},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and "scheduling idle" in proc.stdout.readline()
        deadline = time.monotonic() + 30
        while len(thread_priorities(proc.pid)) < 3:
            assert time.monotonic() < deadline, "the second thread never started"
            time.sleep(0.02)
        assert set(thread_priorities(proc.pid)) == {(19, 5)}
        if io_priority(proc.pid) is not None:
            assert io_priority(proc.pid) == 3 << 13
    finally:
        proc.kill()
        proc.communicate()
