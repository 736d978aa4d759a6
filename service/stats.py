"""Live latency and throughput over sliding windows, for `GET /stats` and the search page's chart.

Prometheus histograms (`service.metrics`) answer "since the process started", in fixed buckets, and need a
Prometheus to turn into percentiles. This recorder answers "the last minute" and "the last five minutes" in one
JSON call: a ring of one-second buckets, each holding the number of searches answered in that second and a
bounded sample of their total, encode and FAISS search times. A window's percentiles merge the samples of its
buckets, each sample weighted by how many requests it stands for, so a busy second that overflowed its sample
still counts for all of its requests.

The clock is injected (`time.monotonic` by default) so that the window arithmetic is tested with a fake one.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

WINDOWS_S = (60, 300)  # the windows /stats reports: last minute, last five minutes
SERIES_STEP_S = 10  # the chart's resolution: one point per 10 s over the longest window
SAMPLES_PER_SECOND = 256  # per bucket; beyond it a reservoir keeps a uniform sample of that second
PERCENTILES = (50.0, 95.0, 99.0)
PARTS = ("total", "encode", "search")


@dataclass
class _Bucket:
    second: int = -1  # the clock second this bucket holds (-1: never used)
    requests: int = 0
    queries: int = 0
    samples: list[tuple[float, float, float]] = field(default_factory=list)  # (total, encode, search) ms


@dataclass(frozen=True)
class Percentiles:
    p50: float | None
    p95: float | None
    p99: float | None


@dataclass(frozen=True)
class Window:
    seconds: int  # the window's length
    covered_s: float  # how much of it the recorder has been running (rates divide by this)
    requests: int
    queries: int  # a batch request (`queries`) counts once in requests and once per text here
    requests_per_s: float
    total_ms: Percentiles
    encode_ms: Percentiles
    search_ms: Percentiles


@dataclass(frozen=True)
class Point:
    """One step of the chart: the `step_s` seconds ending `ago_s` seconds before now."""

    ago_s: int
    requests_per_s: float
    p50_ms: float | None
    p95_ms: float | None


def weighted_percentiles(values: np.ndarray, weights: np.ndarray, qs: Sequence[float]) -> list[float]:
    """Nearest-rank percentiles of weighted samples: the smallest value whose cumulative weight reaches q % of
    the total (with equal weights, the p-th of 1..100 is p)."""
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(weights[order])
    total = cumulative[-1]
    # A relative tolerance keeps float sums such as 0.95 * 100 = 95.00000000000001 from skipping a rank.
    ranks = [int(np.searchsorted(cumulative, q / 100 * total * (1 - 1e-9), side="left")) for q in qs]
    return [float(values[order][min(r, len(values) - 1)]) for r in ranks]


class LiveStats:
    """Searches answered per second and their timings, over the last `max(windows)` seconds.

    `record` is called once per answered search (from the event loop or a worker thread: a lock guards the
    ring); `windows` and `series` read it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, *, windows: Sequence[int] = WINDOWS_S,
                 samples_per_second: int = SAMPLES_PER_SECOND, seed: int = 0) -> None:
        self.clock = clock
        self.window_lengths = tuple(windows)
        self.span = max(self.window_lengths)
        self.samples_per_second = samples_per_second
        self.started = clock()
        self._ring = [_Bucket() for _ in range(self.span)]
        self._rng = random.Random(seed)  # the reservoir's choices: seeded, so a test replays them
        self._lock = threading.Lock()

    @property
    def uptime_s(self) -> float:
        return self.clock() - self.started

    def record(self, total_ms: float, encode_ms: float, search_ms: float, queries: int = 1) -> None:
        now = int(self.clock())
        with self._lock:
            bucket = self._ring[now % self.span]
            if bucket.second != now:  # a bucket left from `span` seconds ago (or never used): start it over
                bucket.second, bucket.requests, bucket.queries, bucket.samples = now, 0, 0, []
            bucket.requests += 1
            bucket.queries += queries
            sample = (total_ms, encode_ms, search_ms)
            if len(bucket.samples) < self.samples_per_second:
                bucket.samples.append(sample)
            else:  # reservoir sampling (algorithm R): every request of this second is kept with equal chance
                slot = self._rng.randrange(bucket.requests)
                if slot < self.samples_per_second:
                    bucket.samples[slot] = sample

    def _buckets(self, now: int, seconds: int) -> list[_Bucket]:
        """The buckets of the `seconds` seconds ending with the current one (the current second included)."""
        return [b for b in self._ring if now - seconds < b.second <= now]

    def _covered(self, seconds: int) -> float:
        # Right after a start a 5-minute rate divided by 300 s would read near zero: divide by the time running.
        return max(min(float(seconds), self.uptime_s), 1.0)

    def window(self, seconds: int) -> Window:
        now = int(self.clock())
        with self._lock:
            buckets = self._buckets(now, seconds)
            requests = sum(b.requests for b in buckets)
            queries = sum(b.queries for b in buckets)
            samples = [s for b in buckets for s in b.samples]
            weights = [b.requests / len(b.samples) for b in buckets for _ in b.samples]
        covered = self._covered(seconds)
        parts = _percentiles(samples, weights)
        return Window(seconds, round(covered, 3), requests, queries, requests / covered, *parts)

    def windows(self) -> list[Window]:
        return [self.window(s) for s in self.window_lengths]

    def series(self, step_s: int = SERIES_STEP_S) -> list[Point]:
        """Requests/s and total-time p50/p95 per `step_s` step over the longest window, oldest first. The
        newest step ends with the current (partial) second."""
        now = int(self.clock())
        points = []
        with self._lock:
            for ago in range(self.span - step_s, -1, -step_s):
                end = now - ago
                buckets = [b for b in self._ring if end - step_s < b.second <= end]
                requests = sum(b.requests for b in buckets)
                totals = [s[0] for b in buckets for s in b.samples]
                weights = [b.requests / len(b.samples) for b in buckets for _ in b.samples]
                p50: float | None
                p95: float | None
                if totals:
                    p50, p95 = weighted_percentiles(np.asarray(totals), np.asarray(weights), (50.0, 95.0))
                else:
                    p50 = p95 = None
                points.append(Point(ago, requests / step_s, p50, p95))
        return points


def _percentiles(samples: list[tuple[float, float, float]], weights: list[float]) -> tuple[Percentiles, ...]:
    if not samples:
        return tuple(Percentiles(None, None, None) for _ in PARTS)
    columns, w = np.asarray(samples, dtype=np.float64), np.asarray(weights)
    out = []
    for i in range(len(PARTS)):
        p = weighted_percentiles(columns[:, i], w, PERCENTILES)
        out.append(Percentiles(*(round(v, 3) if math.isfinite(v) else None for v in p)))
    return tuple(out)
