"""Zero-downtime index swaps: open the version `current` points to beside the served one, check it, swap.

Triggers: a poll of the `current` symlink (`watch_interval_s`), SIGHUP, and `POST /admin/reload` (the engine
wires the first two, the HTTP layer the third). A candidate is refused, and the served searcher kept, when it
does not load (corrupt or missing files, a manifest that does not match the index), when index and encoder
disagree (dimension, model hash), when it fails a probe query, or when it is newer than the served version,
measured on the same evaluation set, and its MRR@10 is lower by more than `max_mrr_drop` (a rollback to an
older version is the operator's call and is not gated). The gates are the same for every backend: only opening
the index differs (in this process, or as shard deployments on Ray Serve).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import math
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from indexer.runtime.encoder import EncoderLoadError
from indexer.runtime.layout import CURRENT, IndexRoot, LayoutError
from indexer.runtime.version import IndexLoadError
from indexer.runtime.writelog import WriteLogError
from service.engine.errors import Mismatch, SwapRefused
from service.engine.leases import Leases
from service.engine.searcher import Searcher, VectorIndex
from service.metrics import Metrics
from service.settings import Settings

if TYPE_CHECKING:
    from service.engine.writes import Writes

log = logging.getLogger(__name__)

PROBE_QUERY = "strata swap probe: is this index answering?"
Outcome = Literal["swapped", "unchanged", "refused"]


class Backend(Protocol):
    """Where a version's vectors are searched: opened per version, closed with the engine."""

    name: str

    def start(self) -> None: ...

    def open_index(self, folder: Path) -> VectorIndex: ...

    def close(self) -> None: ...


@dataclass
class SwapResult:
    outcome: Outcome
    version: str | None  # the version now served
    candidate: str | None
    reason: str | None = None


@dataclass
class Refusal:
    version: str | None
    kind: str
    reason: str
    at: datetime


class Swapper:
    def __init__(self, settings: Settings, backend: Backend, leases: Leases, metrics: Metrics, *,
                 writes: Writes | None = None) -> None:
        self.settings, self.backend, self.leases, self.metrics = settings, backend, leases, metrics
        self.writes = writes  # the write log replayed onto each candidate, and the switch made under its lock
        self.root = IndexRoot(settings.index_root)
        self.refused: Refusal | None = None  # the latest attempt's refusal; cleared by a successful swap
        self.served_since: datetime | None = None  # when the served version was swapped in
        self._lock = asyncio.Lock()

    def target(self) -> str | None:
        try:
            return os.readlink(self.root.root / CURRENT).rsplit("/", 1)[-1]
        except OSError:
            return None

    def _check_quality(self, new: Searcher, served: Searcher | None) -> None:
        if served is None or new.version <= served.version:
            return
        a, b = served.manifest, new.manifest
        if a.eval is None or b.eval is None or math.isnan(a.eval.mrr_at_10):
            return
        if (a.data.protocol, a.data.n_queries) != (b.data.protocol, b.data.n_queries):
            log.info("MRR@10 of %s and %s are not comparable (different evaluation sets): not gated",
                     served.version, new.version)
            return
        if b.eval.mrr_at_10 < a.eval.mrr_at_10 - self.settings.max_mrr_drop:
            raise SwapRefused("quality", f"version {new.version} has MRR@10 {b.eval.mrr_at_10:.4f}, more than "
                              f"{self.settings.max_mrr_drop} below the served {served.version} "
                              f"({a.eval.mrr_at_10:.4f})")

    def _prepare(self, version: str) -> Searcher:
        """Runs in a worker thread: open and check the candidate while the served searcher keeps answering."""
        s, served = self.settings, self.leases.current
        folder = self.root.version_dir(version)
        if not folder.is_dir():
            raise SwapRefused("missing", f"{self.root.root}/current points to {version}, which does not exist")
        try:
            searcher = Searcher.pair(self.backend.open_index(folder), s.model_dir, threads=s.threads,
                                     reuse=served.encoder if served else None)
        except (IndexLoadError, EncoderLoadError, OSError) as exc:
            raise SwapRefused("corrupt", str(exc)) from exc
        except Mismatch as exc:
            raise SwapRefused("mismatch", str(exc)) from exc
        try:
            if self.writes is not None:
                try:  # the writes the candidate does not hold yet, so the swap never undoes one
                    self.writes.attach(searcher)
                except (WriteLogError, OSError) as exc:
                    raise SwapRefused("writes", f"cannot replay the write log onto {version}: {exc}") from exc
            self._check_quality(searcher, served)
            try:
                searcher.search([PROBE_QUERY], 1)
            except Exception as exc:  # noqa: BLE001 (anything a probe raises disqualifies the version)
                raise SwapRefused("probe", f"version {version} failed a probe query: {exc}") from exc
        except BaseException:
            searcher.close()
            raise
        return searcher

    async def reload(self, trigger: str, *, force: bool = False) -> SwapResult:
        """Swap to what `current` points at; raises SwapRefused (the served version keeps answering) when the
        candidate is refused. Without `force` (the watcher), a refused version is not retried until `current`
        changes."""
        result = await self.attempt(trigger, force=force)
        if result.outcome == "refused":
            kind = self.refused.kind if self.refused else "missing"
            raise SwapRefused(kind, result.reason or "refused", candidate=result.candidate, served=result.version)
        return result

    async def attempt(self, trigger: str, *, force: bool = False) -> SwapResult:
        """`reload` that reports a refusal in its result instead of raising it (startup, watcher, SIGHUP)."""
        async with self._lock:
            served = self.leases.current
            served_version = served.version if served else None
            target = self.target()
            if target is None:
                reason = f"{self.root.root} has no current index (build one with `indexer build --root " \
                         f"{self.root.root}`)"
                if served is None:
                    self._refuse(SwapRefused("missing", reason), None, trigger)
                    return SwapResult("refused", None, None, reason)
                return SwapResult("unchanged", served_version, None, reason)
            if target == served_version or (not force and self.refused and self.refused.version == target):
                return SwapResult("unchanged", served_version, target,
                                  self.refused.reason if self.refused and self.refused.version == target else None)
            try:
                new = await asyncio.to_thread(self._prepare, target)
            except SwapRefused as exc:
                self._refuse(exc, target, trigger)
                return SwapResult("refused", served_version, target, str(exc))
            except (LayoutError, Exception) as exc:  # noqa: BLE001 (whatever breaks a load must not break serving)
                refusal = SwapRefused("missing" if isinstance(exc, LayoutError) else "error", str(exc))
                self._refuse(refusal, target, trigger)
                return SwapResult("refused", served_version, target, str(exc))
            if self.writes is not None:  # under the write lock: writes logged meanwhile are applied first
                await asyncio.to_thread(self.writes.switch, new, self.leases.swap)
            else:
                self.leases.swap(new)
            del served  # drop our reference so the old searcher can be freed once its requests finish
            gc.collect()
            self.refused = None
            self._publish(new, trigger, served_version)
            return SwapResult("swapped", new.version, target)

    def _refuse(self, exc: SwapRefused, version: str | None, trigger: str) -> None:
        self.refused = Refusal(version, exc.kind, str(exc), datetime.now(timezone.utc))
        self.metrics.swaps.labels("refused").inc()
        self.metrics.swap_refused.labels(exc.kind).inc()
        self.metrics.swap_refused_now.set(1)
        served = self.leases.current
        log.error("refused index swap to %s (%s, trigger %s): %s; still serving %s", version, exc.kind, trigger,
                  exc, served.version if served else "nothing")

    def _publish(self, searcher: Searcher, trigger: str, previous: str | None) -> None:
        m, manifest = self.metrics, searcher.manifest
        if previous is not None:
            m.swaps.labels("swapped").inc()
        m.swap_refused_now.set(0)
        self.served_since = datetime.now(timezone.utc)
        m.ready.set(1)
        m.index_size.set(searcher.index.ntotal)
        m.index_mrr.set(manifest.eval.mrr_at_10 if manifest.eval else float("nan"))
        m.index_info.clear()
        m.index_info.labels(searcher.version, searcher.encoder.meta.pooling).set(1)
        log.info("serving index %s (trigger %s, previous %s)", searcher.version, trigger, previous)

    async def watch(self) -> None:
        """Poll the `current` symlink (a readlink: cheap, and works on any volume, unlike inotify)."""
        interval = self.settings.watch_interval_s
        while True:
            await asyncio.sleep(interval)
            served = self.leases.current
            target = self.target()
            if target != (served.version if served else None) and not (self.refused and
                                                                       self.refused.version == target):
                try:
                    await self.attempt("watch", force=False)
                except Exception:  # noqa: BLE001 (the watcher must outlive any one failed attempt)
                    log.exception("index watcher: reload failed")
