"""Closed-loop HTTP load against a server on 127.0.0.1 and the server's process-tree memory.

`clients` keep-alive connections each send the next request as soon as the previous answer is read. aiohttp,
not httpx: the client shares the server's two cores, and httpx cost 1-2.5 ms more per request at 1 client,
time that would be charged to whichever server was measured.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import psutil

from bench.common import percentiles


@dataclass(frozen=True)
class Call:
    """How one server spells a request for one text: method, path, and JSON body or query parameters."""

    method: str
    path: str
    make: Callable[[str], dict[str, Any]]  # text -> {"json": …} or {"params": …}


async def closed_loop(session: aiohttp.ClientSession, clients: int,
                      step: Callable[[aiohttp.ClientSession], Awaitable[bool]]) -> float:
    """`clients` tasks on `session`, each calling `step` again as soon as it returns, until it returns False; the
    wall seconds they took."""
    async def worker() -> None:
        while await step(session):
            pass

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    return time.perf_counter() - t0


async def _load(url: str, call: Call, texts: list[str], clients: int, seconds: float) -> dict[str, Any]:
    latencies: list[float] = []
    failures: list[str] = []
    counter = iter(range(10**9))
    deadline = 0.0

    async def one(session: aiohttp.ClientSession, text: str) -> bool:
        async with session.request(call.method, call.path, **call.make(text)) as r:
            body = await r.read()
            if r.status != 200 and len(failures) < 5:
                failures.append(f"{r.status} {body[:200]!r}")
            return r.status == 200

    async def step(session: aiohttp.ClientSession) -> bool:
        t0 = time.perf_counter()
        if await one(session, texts[next(counter) % len(texts)]):
            latencies.append(time.perf_counter() - t0)
        return time.perf_counter() < deadline

    connector = aiohttp.TCPConnector(limit=clients)
    failed_before = 0
    async with aiohttp.ClientSession(url, connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:
        for t in texts[:10]:  # warm-up, untimed
            await one(session, t)
        failed_before = len(failures)
        deadline = time.perf_counter() + seconds
        wall = await closed_loop(session, clients, step)
    p = percentiles([x * 1000 for x in latencies])
    return {"clients": clients, "requests": len(latencies), "rps": round(len(latencies) / wall, 1),
            "p50_ms": round(p[50], 2), "p95_ms": round(p[95], 2), "p99_ms": round(p[99], 2),
            "failed_examples": failures[failed_before:] or failures}


def run_load(url: str, call: Call, texts: list[str], clients: int, seconds: float) -> dict[str, Any]:
    return asyncio.run(_load(url, call, texts, clients, seconds))


class TreeRss:
    """Peak resident memory of a process and all its descendants, summed, sampled every `every_s` seconds in a
    background thread (a sum of per-process peaks would count peaks that never coincided)."""

    def __init__(self, pid: int, every_s: float = 0.25) -> None:
        self.root = psutil.Process(pid)
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._every = every_s
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def sample(self) -> int:
        total = 0
        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return 0
        for p in procs:
            try:
                total += p.memory_info().rss
            except psutil.NoSuchProcess:
                pass
        self.peak_bytes = max(self.peak_bytes, total)
        return total

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self.sample()

    def stop(self) -> float:
        """Stop sampling; the peak in GB."""
        self._stop.set()
        self._thread.join(timeout=2)
        return round(self.peak_bytes / 1024**3, 3)
