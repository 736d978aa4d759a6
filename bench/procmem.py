"""A process's memory as Linux counts it (/proc/PID/status), sampled while something else runs.

RSS is split as the kernel splits it: `anon` (heap, the process's own copies: what must fit in RAM) and `file`
(pages of memory-mapped files, such as a version's index opened with STRATA_MMAP: page cache the kernel can drop
and read again, shared with every process mapping the same file)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass


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
    """The peak of `rss(pid)` (total and anon each) every `interval_s` until stopped (a context manager)."""

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
