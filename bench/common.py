"""What every benchmark shares: progress lines and the machine's load, a process's memory as Linux counts it,
percentiles and interleaved rounds, a Strata server on 127.0.0.1, and wrk runs with their parsing.

Every figure a benchmark prints is read beside the load it was measured under, so `load()` goes into every
report. RSS is split as the kernel splits it: `anon` (heap, the process's own copies: what must fit in RAM) and
`file` (pages of memory-mapped files such as a version's index opened with STRATA_MMAP: page cache the kernel can
drop and read again)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
T = TypeVar("T")


# -- progress and load ------------------------------------------------------------------------------------------------
def log(msg: str) -> None:
    """A timestamped progress line on stderr (stdout stays for the result table)."""
    print(f"[{datetime.now():%H:%M:%S}] {msg}", file=sys.stderr, flush=True)


def load() -> str:
    """The 1/5/15-minute load averages, e.g. "1.97/2.02/2.20"."""
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


# -- memory -----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rss:
    total: int  # VmRSS, bytes
    anon: int  # RssAnon
    file: int  # RssFile + RssShmem

    def mib(self) -> str:
        return f"{self.total / 2**20:.0f} MiB (anon {self.anon / 2**20:.0f}, file-backed {self.file / 2**20:.0f})"


def rss(pid: int) -> Rss:
    fields: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
                fields[key] = int(rest.split()[0]) * 1024
    return Rss(fields.get("VmRSS", 0), fields.get("RssAnon", 0), fields.get("RssFile", 0) + fields.get("RssShmem", 0))


class PeakSampler:
    """The peak of `rss(pid)` (total, anon and file each) every `interval_s` until stopped (a context manager)."""

    def __init__(self, pid: int, interval_s: float = 0.02) -> None:
        self.pid, self.interval = pid, interval_s
        self.peak_total = self.peak_anon = self.peak_file = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                r = rss(self.pid)
            except OSError:
                return
            self.peak_total, self.peak_anon = max(self.peak_total, r.total), max(self.peak_anon, r.anon)
            self.peak_file = max(self.peak_file, r.file)
            time.sleep(self.interval)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# -- statistics -------------------------------------------------------------------------------------------------------
def interleave(systems: Sequence[T], rounds: int) -> Iterator[tuple[int, T]]:
    """(round, system) in the order A B C A B C …: a change of load on the shared machine during the run falls on
    every system alike rather than on whichever ran last."""
    for r in range(rounds):
        for s in systems:
            yield r, s


def percentiles(values: Iterable[float], qs: Sequence[float] = (50, 95, 99)) -> dict[float, float]:
    """Linear-interpolated percentiles (numpy's default); NaN for an empty sample rather than an exception, so a
    system with no successful request still gets a row that says so."""
    arr = np.asarray(list(values), dtype=np.float64)
    if arr.size == 0:
        return {q: float("nan") for q in qs}
    return {q: float(v) for q, v in zip(qs, np.percentile(arr, qs), strict=True)}


def pct(values: Iterable[float], q: float) -> float:
    return percentiles(values, (q,))[q]


def median(values: Iterable[float]) -> float:
    return pct(values, 50)


def safe_ratio(a: float | None, b: float | None, digits: int = 2) -> float | None:
    """a / b, or None where either is missing, zero or NaN (a system that failed has no ratio, not 0 or inf)."""
    if a is None or b is None or not np.isfinite(a) or not np.isfinite(b) or b == 0:
        return None
    return round(a / b, digits)


# -- a Strata server --------------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(proc: subprocess.Popen[bytes], url: str, name: str, timeout_s: float, log_file: Path | None = None,
               ready: str = "/ready") -> float:
    """Poll `url` + `ready` until it answers 200 (seconds it took); kill the process and exit naming why otherwise."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        try:
            if httpx.get(f"{url}{ready}", timeout=2).status_code == 200:
                return time.perf_counter() - t0
        except httpx.TransportError:
            pass
        if proc.poll() is not None:
            tail = log_file.read_text()[-3000:] if log_file and log_file.exists() else ""
            raise SystemExit(f"{name} exited with status {proc.returncode}\n{tail}")
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"{name} not ready after {timeout_s:.0f} s")


def start_server(root: Path | None, log_dir: Path, env: dict[str, str] | None = None, args: Sequence[str] = (),
                 checkout: Path = REPO, timeout_s: float = 300, ready: str = "/ready"
                 ) -> tuple[subprocess.Popen[bytes], str, float]:
    """`python -m service ARGS` on the index root (None: `env`'s STRATA_COLLECTIONS_DIR), from `checkout` (this tree,
    or another revision's worktree), its output in `log_dir`; (process, url, seconds until `ready` answered 200)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    e = os.environ | ({"STRATA_INDEX_ROOT": str(root)} if root else {}) | {
        "STRATA_PORT": str(port), "STRATA_HOST": "127.0.0.1", "STRATA_WATCH_INTERVAL_S": "0",
        "STRATA_LOG_LEVEL": "warning", "PYTHONPATH": str(checkout), "HF_HUB_OFFLINE": "1"} | (env or {})
    log_file = log_dir / f"server-{port}.log"
    proc = subprocess.Popen([sys.executable, "-m", "service", *args], cwd=checkout, env=e,
                            stdout=open(log_file, "wb"), stderr=subprocess.STDOUT)
    return proc, url, wait_ready(proc, url, "server", timeout_s, log_file, ready)


def stop(proc: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# -- wrk --------------------------------------------------------------------------------------------------------------
WRK_LUA = """local bodies = {%s}
local i, bad, threads = 0, 0, {}
codes = {}  -- answers by HTTP status, read back from the thread by done()
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
setup = function(thread) table.insert(threads, thread) end
request = function()
  i = i %% #bodies + 1
  return wrk.format(nil, "%s", nil, bodies[i])
end
response = function(status, headers, body)
  codes[status] = (codes[status] or 0) + 1
  if status ~= 200 and bad < 3 then  -- the first few refusals, to say what an error was
    bad = bad + 1
    io.write(string.format("WRK-BAD %%d %%s\\n", status, string.sub(body or "", 1, 200):gsub("\\n", " ")))
  end
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("WRK-RESULT %%d %%d %%d %%d %%d %%d %%d %%d %%d\\n", summary.requests, summary.duration,
    e.status, e.connect + e.read + e.write, e.timeout, latency:percentile(50), latency:percentile(95),
    latency:percentile(99), latency.max))
  for _, t in ipairs(threads) do
    for code, n in pairs(t:get("codes")) do io.write(string.format("WRK-STATUS %%d %%d\\n", code, n)) end
  end
end
"""


def lua_string(body: str) -> str:
    """A Lua long-bracket string of a level no body contains (Chroma's bodies hold "]]", a list of vectors)."""
    level = next(n for n in range(1, 10) if "]" + "=" * n + "]" not in body)
    return "[" + "=" * level + "[" + body + "]" + "=" * level + "]"


def wrk(url: str, bodies: Sequence[str | dict[str, Any]], conns: int, seconds: float, work: Path,
        path: str = "/search", timeout_s: float = 10) -> dict[str, Any]:
    """POST `path` cycling through `bodies` with `conns` keep-alive connections for `seconds` (wrk, one thread: a
    C client, where a Python one on the same cores adds milliseconds to what it measures). Latencies in ms;
    `errors` counts non-2xx answers, socket errors and timeouts, the first bad answers kept in `bad_answers`;
    `statuses`: the answers by HTTP status ({200: n, 429: m, …})."""
    texts = [b if isinstance(b, str) else json.dumps(b) for b in bodies]
    script = work / f"wrk-{os.getpid()}-{threading.get_ident()}.lua"
    script.write_text(WRK_LUA % (",\n".join(lua_string(t) for t in texts), path))
    r = subprocess.run(["wrk", "-t1", f"-c{conns}", f"-d{seconds:g}s", "--timeout", f"{timeout_s:g}s", "-s",
                        str(script), url], capture_output=True, text=True, timeout=seconds + 60)
    line = next((x for x in r.stdout.splitlines() if x.startswith("WRK-RESULT ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no result (status {r.returncode}): {r.stdout}{r.stderr}")
    n, dur_us, non2xx, sock, timeouts, p50, p95, p99, mx = (int(x) for x in line.split()[1:])
    out: dict[str, Any] = {"conns": conns, "requests": n, "rps": round(n / (dur_us / 1e6), 1),
                           "p50_ms": p50 / 1000, "p95_ms": p95 / 1000, "p99_ms": p99 / 1000, "max_ms": mx / 1000,
                           "errors": non2xx + sock + timeouts, "non2xx": non2xx, "timeouts": timeouts,
                           "statuses": {int(c): int(k) for c, k in (x.split()[1:] for x in r.stdout.splitlines()
                                                                    if x.startswith("WRK-STATUS "))}}
    if out["errors"]:
        out["bad_answers"] = [x.removeprefix("WRK-BAD ") for x in r.stdout.splitlines() if x.startswith("WRK-BAD ")]
    return out
