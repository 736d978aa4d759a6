"""Live latency and throughput over sliding windows, for `GET /stats` and the search page's chart.

Prometheus histograms (`service.engine.metrics`) answer "since the process started", in fixed buckets, and need a
Prometheus to turn into percentiles. This recorder answers "the last minute" and "the last five minutes" in one
JSON call: a ring of one-second buckets, each holding the number of searches answered in that second and a
bounded sample of their total, encode and FAISS search times. A window's percentiles merge the samples of its
buckets, each sample weighted by how many requests it stands for, so a busy second that overflowed its sample
still counts for all of its requests.

The ring is a few numpy arrays (about 0.9 MB): `record` writes one row, and a reader copies the arrays under the
lock and computes outside it, so a /stats call never holds up the searches being recorded. The clock is injected
(`time.monotonic` by default) so that the window arithmetic is tested with a fake one.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

WINDOWS_S = (60, 300)  # the windows /stats reports: last minute, last five minutes
SERIES_STEP_S = 10  # the chart's resolution: one point per 10 s over the longest window
SAMPLES_PER_SECOND = 128  # per bucket; beyond it a reservoir keeps a uniform sample of that second
PERCENTILES = (50.0, 95.0, 99.0)
PARTS = ("total", "encode", "search")
MODES = ("dense", "lexical", "hybrid")  # /search modes, counted per second


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
    modes: dict[str, int]  # requests by the mode that ran


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
    order = np.argsort(values)
    cumulative = np.cumsum(weights[order])
    # A relative tolerance keeps float sums such as 0.95 * 100 = 95.00000000000001 from skipping a rank.
    targets = np.asarray(qs, dtype=np.float64) / 100 * cumulative[-1] * (1 - 1e-9)
    ranks = np.minimum(np.searchsorted(cumulative, targets, side="left"), len(values) - 1)
    return [float(v) for v in values[order][ranks]]


@dataclass(frozen=True)
class _Snapshot:
    """A copy of the ring taken under the lock; every figure is computed from it, outside the lock."""

    now: int
    second: np.ndarray  # (span,) the clock second each slot holds, -1: never used
    requests: np.ndarray  # (span,)
    queries: np.ndarray  # (span,)
    filled: np.ndarray  # (span,) samples held per slot, at most the reservoir size
    samples: np.ndarray  # (span, reservoir, 3) total, encode, search ms
    modes: np.ndarray  # (span, len(MODES)) requests by mode

    def select(self, end: int, seconds: int) -> tuple[int, int, np.ndarray, np.ndarray]:
        """Requests, queries, the samples (n, 3) and their weights for the `seconds` seconds ending with `end`.
        A sample stands for requests / samples of its second: all of them when the reservoir did not overflow."""
        slots = (self.second > end - seconds) & (self.second <= end)
        filled, requests = self.filled[slots], self.requests[slots]
        held = np.arange(self.samples.shape[1])[None, :] < filled[:, None]
        samples = self.samples[slots][held]  # row-major: slot by slot, as np.repeat lays out the weights
        weights = np.repeat(requests / np.maximum(filled, 1), filled)
        return int(requests.sum()), int(self.queries[slots].sum()), samples, weights


class LiveStats:
    """Searches answered per second and their timings, over the last `max(windows)` seconds.

    `record` is called once per answered search (a lock guards the ring: any thread may call it); `windows` and
    `series` read it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, *, windows: Sequence[int] = WINDOWS_S,
                 samples_per_second: int = SAMPLES_PER_SECOND, seed: int = 0) -> None:
        self.clock = clock
        self.window_lengths = tuple(windows)
        self.span = max(self.window_lengths)
        self.reservoir = samples_per_second
        self.started = clock()
        self._second = np.full(self.span, -1, dtype=np.int64)
        self._requests = np.zeros(self.span, dtype=np.int64)
        self._queries = np.zeros(self.span, dtype=np.int64)
        self._filled = np.zeros(self.span, dtype=np.int64)
        self._samples = np.zeros((self.span, samples_per_second, len(PARTS)), dtype=np.float64)
        self._modes = np.zeros((self.span, len(MODES)), dtype=np.int64)
        self._rng = random.Random(seed)  # the reservoir's choices: seeded, so a test replays them
        self._lock = threading.Lock()

    @property
    def uptime_s(self) -> float:
        return self.clock() - self.started

    @property
    def samples_held(self) -> int:
        return int(self._filled.sum())

    def record(self, total_ms: float, encode_ms: float, search_ms: float, queries: int = 1,
               mode: str | None = None) -> None:
        now = int(self.clock())
        slot = now % self.span
        with self._lock:
            if self._second[slot] != now:  # a slot left from `span` seconds ago (or never used): start it over
                self._second[slot], self._requests[slot], self._queries[slot], self._filled[slot] = now, 0, 0, 0
                self._modes[slot] = 0
            self._requests[slot] += 1
            if mode in MODES:
                self._modes[slot, MODES.index(mode)] += 1
            self._queries[slot] += queries
            filled = int(self._filled[slot])
            if filled < self.reservoir:
                row = filled
                self._filled[slot] = filled + 1
            else:  # reservoir sampling (algorithm R): every request of this second is kept with equal chance
                row = self._rng.randrange(int(self._requests[slot]))
                if row >= self.reservoir:
                    return
            self._samples[slot, row] = (total_ms, encode_ms, search_ms)

    def _snapshot(self) -> _Snapshot:
        now = int(self.clock())
        with self._lock:
            return _Snapshot(now, self._second.copy(), self._requests.copy(), self._queries.copy(),
                             self._filled.copy(), self._samples.copy(), self._modes.copy())

    def _covered(self, seconds: int) -> float:
        # Right after a start a 5-minute rate divided by 300 s would read near zero: divide by the time running.
        return max(min(float(seconds), self.uptime_s), 1.0)

    def _window(self, snap: _Snapshot, seconds: int) -> Window:
        requests, queries, samples, weights = snap.select(snap.now, seconds)
        covered = self._covered(seconds)
        if len(samples):
            parts = [Percentiles(*(round(v, 3) for v in weighted_percentiles(samples[:, i], weights, PERCENTILES)))
                     for i in range(len(PARTS))]
        else:
            parts = [Percentiles(None, None, None)] * len(PARTS)
        slots = (snap.second > snap.now - seconds) & (snap.second <= snap.now)
        by_mode = dict(zip(MODES, snap.modes[slots].sum(axis=0).tolist(), strict=True))
        return Window(seconds, round(covered, 3), requests, queries, requests / covered, *parts, by_mode)

    def window(self, seconds: int) -> Window:
        """The `seconds` seconds ending with the current one (the current second included)."""
        return self._window(self._snapshot(), seconds)

    def windows(self) -> list[Window]:
        snap = self._snapshot()
        return [self._window(snap, s) for s in self.window_lengths]

    def series(self, step_s: int = SERIES_STEP_S) -> list[Point]:
        """Requests/s and total-time p50/p95 per `step_s` step over the longest window, oldest first. The
        newest step ends with the current (partial) second."""
        snap = self._snapshot()
        points = []
        for ago in range(self.span - step_s, -1, -step_s):
            requests, _, samples, weights = snap.select(snap.now - ago, step_s)
            p50: float | None = None
            p95: float | None = None
            if len(samples):
                p50, p95 = (round(v, 3) for v in weighted_percentiles(samples[:, 0], weights, (50.0, 95.0)))
            points.append(Point(ago, requests / step_s, p50, p95))
        return points
