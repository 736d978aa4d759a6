"""Log lines for people and machines: the logging set-up run in a real subprocess whose stderr is a terminal (a pty)
or a pipe, `STRATA_LOG_FORMAT` overriding either; progress as log lines off a terminal; and the banner's curl line
printed by a real `python -m service`, pasted into a shell against it."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import shlex
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO, start_server, stop_server
from tests.conftest import write_quora_like as quora_like

SCRIPT = """
import logging, time
from service.logs import configure
from service.settings import Settings
from indexer.runtime.progress import Progress
fmt = configure(Settings().log_format, "info")
logging.getLogger("uvicorn.error").info("Application startup complete.")
logging.getLogger("indexer.build").info("hello %s", "world")
with Progress(1000, "mine: encoding", unit="texts", interval=0) as bar:
    for _ in range(10):
        time.sleep(0.02)
        bar.update(100)
import os
print("CHILD_FORMAT=" + os.environ["STRATA_LOG_FORMAT"], flush=True)
"""


def run(*, terminal: bool, fmt: str | None) -> tuple[str, str]:
    """(stderr, stdout) of SCRIPT, its stderr a pty or a pipe."""
    env = {k: v for k, v in os.environ.items() if k not in ("STRATA_LOG_FORMAT", "TQDM_DISABLE")}
    env |= {"PYTHONPATH": str(REPO), "STRATA_PROGRESS_INTERVAL_S": "0"} | ({"STRATA_LOG_FORMAT": fmt} if fmt else {})
    if not terminal:
        r = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        return r.stderr, r.stdout
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a terminal of 120 columns
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], cwd=REPO, env=env, stderr=slave,
                            stdout=subprocess.PIPE, text=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    out = proc.stdout.read() if proc.stdout else ""
    assert proc.wait(60) == 0
    os.close(master)
    return b"".join(chunks).decode().replace("\r\n", "\n"), out


TEXT_LINE = re.compile(r"^\d\d:\d\d:\d\d (INFO|WARNING|ERROR) [\w.]+: ")


@pytest.mark.parametrize(("terminal", "fmt", "want"), [
    (True, None, "text"), (False, None, "json"), (True, "json", "json"), (False, "text", "text"),
    (False, "auto", "json"),
])
def test_text_on_a_terminal_json_elsewhere_and_the_override(terminal: bool, fmt: str | None, want: str) -> None:
    err, out = run(terminal=terminal, fmt=fmt)
    assert f"CHILD_FORMAT={want}" in out  # what the processes this one starts will log in
    lines = [line for line in err.splitlines() if line.strip()]
    if want == "json":
        records = [json.loads(line) for line in lines]  # every line is one JSON object
        assert {"logger": "indexer.build", "msg": "hello world"}.items() <= records[1].items()
        names = [r["logger"] for r in records]
        progress = [r["msg"] for r in records if r["msg"].startswith("mine: encoding")]
    else:
        # the log lines are text; on a terminal the progress is a tqdm bar, redrawn on the same line
        logged = [line for line in lines if TEXT_LINE.match(line)]
        assert any(line.endswith("indexer.build: hello world") for line in logged), err
        names = [line.split()[2].rstrip(":") for line in logged]
        progress = [line.split(": ", 1)[1] for line in logged if "mine: encoding" in line]
        assert not any(line.startswith("{") for line in lines)
    assert "uvicorn.error" not in names and "uvicorn" in names  # start-up is not an error
    if terminal and want == "text":
        assert "1000/1000" in err and "\r" in err  # the bar
    else:  # log lines with rate and ETA, the last one with the total time
        assert progress and re.search(r"\d+/1,000 texts \(\d+\.\d%\), [\d,.]+ texts/s, ETA \d+s", progress[0])
        assert re.search(r"1,000/1,000 texts \(100\.0%\), [\d,.]+ texts/s, took \d+s", progress[-1])
        assert "\r" not in err and max(map(len, lines)) < 400


def test_the_banner_is_plain_text_and_its_curl_line_pastes_as_it_is(tiny_exported: Path, tmp_path: Path) -> None:
    data = quora_like(tmp_path / "quora.tsv.gz")
    root = tmp_path / "root"
    r = subprocess.run([sys.executable, "-m", "indexer.cli", "build", "--root", str(root), "--model",
                        str(tiny_exported), "--data", str(data), "--rows", "60", "--threads", "1"],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert all(json.loads(line) for line in r.stderr.splitlines() if line.strip())  # a pipe: JSON lines
    msgs = [json.loads(line)["msg"] for line in r.stderr.splitlines() if line.strip()]
    # every step says when it is done, and "built … in" accounts for every stage, the evaluation included
    building = next(m for m in msgs if m.startswith("building a flat index"))
    assert any(m.startswith(building + ": done in ") for m in msgs)
    assert any(m.startswith("the gate's evaluation (dense MRR@10)") and ": done in " in m for m in msgs)
    built = next(m for m in msgs if m.startswith("built "))
    total = float(re.search(r" in ([\d.]+)s \(", built).group(1))
    parts = [float(x) for x in re.findall(r"(?:load|encode|queries|index|BM25|calibrate|evaluate|other) ([\d.]+)s",
                                          built)]
    # the stages shown (each >= 0.05 s; the gate's evaluation of 60 documents is shorter) add up to the total
    assert parts and abs(sum(parts) - total) <= 0.1 * len(parts), built
    server = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(root)})
    try:
        deadline = time.monotonic() + 120
        while "curl" not in server.log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        lines = server.log.read_text().splitlines()
        curl = next(line.strip() for line in lines if line.strip().startswith("curl "))
        assert "Strata is serving on " + server.url in "\n".join(lines)
        argv = shlex.split(curl)  # valid shell
        body = json.loads(argv[argv.index("-d") + 1])  # whose body is JSON
        assert body == {"query": "How do I learn Python quickly?", "top_k": 5}
        pasted = subprocess.run(["bash", "-c", curl], capture_output=True, text=True, timeout=30)
        answer = json.loads(pasted.stdout)
        assert len(answer["hits"]) == 5, pasted.stdout
        # everything else in the log is JSON lines (stderr is a file here), none from `uvicorn.error`
        others = [json.loads(line) for line in lines if line.startswith("{")]
        assert others and not any(rec["logger"] == "uvicorn.error" for rec in others)
        assert httpx.get(f"{server.url}/ready", timeout=30).status_code == 200
        # a second server on the taken port: the bind error alone, no banner claiming it serves
        port = server.url.rsplit(":", 1)[1]
        env = os.environ | {"STRATA_PORT": port, "STRATA_HOST": "127.0.0.1", "STRATA_THREADS": "1",
                            "STRATA_INDEX_ROOT": str(root)}
        taken = subprocess.run([sys.executable, "-m", "service"], cwd=REPO, env=env, capture_output=True, text=True,
                               timeout=180)
        out = taken.stdout + taken.stderr
        assert taken.returncode != 0 and "address already in use" in out.lower(), out
        assert "serving on" not in out and "curl" not in out, out
    finally:
        stop_server(server)
