"""What `GET /stats` costs: reading a full ring (every second of the last 5 minutes at a given rate) and
recording one search, on the real `service.stats.LiveStats` with a fake clock.

    python bench/stats_cost.py [--rate 1000] [--repeat 20]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.stats import LiveStats  # noqa: E402


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=1000, help="searches per second recorded for 300 s")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    clock, rng = Clock(), random.Random(0)
    stats = LiveStats(clock)
    t0 = time.perf_counter()
    for second in range(300):
        clock.now = second + 0.5
        for _ in range(args.rate):
            stats.record(rng.random() * 20, rng.random() * 15, rng.random())
    record_us = (time.perf_counter() - t0) / (300 * args.rate) * 1e6
    t0 = time.perf_counter()
    for _ in range(args.repeat):
        stats.windows()
    windows_ms = (time.perf_counter() - t0) / args.repeat * 1000
    t0 = time.perf_counter()
    for _ in range(args.repeat):
        stats.series()
    series_ms = (time.perf_counter() - t0) / args.repeat * 1000
    print(f"rate {args.rate}/s for 300 s: {stats.samples_held} samples held ({stats.reservoir} per second)")
    print(f"record: {record_us:.2f} us per search")
    print(f"windows (1 and 5 min): {windows_ms:.1f} ms; series (30 steps): {series_ms:.1f} ms; "
          f"one /stats: {windows_ms + series_ms:.1f} ms")


if __name__ == "__main__":
    main()
