"""Zero-downtime index swaps: open the version `current` points to beside the served one, check it, swap.

Triggers: a poll of the `current` symlink (`watch_interval_s`), SIGHUP, and `POST /admin/reload` (the engine
wires the first two, the HTTP layer the third). A candidate is refused, and the served searcher kept, when:
- a file does not match the checksum its manifest records (`indexer.runtime.integrity`, checked before anything is
  opened, at startup too; a manifest older than checksums is served with a log line): kind `corrupt`, file named;
- it does not load (missing files, a manifest that does not match the index): `corrupt` / `missing`;
- index and encoder disagree (dimension, model hash): `mismatch`; it fails a probe query: `probe`;
- it is newer than the served version, measured on the same evaluation set, and its MRR@10 is lower by more
  than `max_mrr_drop`: `quality`;
- it is newer than the served version and holds fewer than (1 - `max_shrink`) of the served documents, both
  counted after the write log is replayed onto them, up to the same entry (a rebuild from source after a compaction
  gets the written documents back from the log, so it is not mistaken for a truncated input; the count is taken at
  the switch, under the write lock, so writes that land while the candidate is replayed do not count against it):
  `shrink`. Only an operator's `POST /admin/reload?force=true` swaps to such a version; the watcher, SIGHUP and a
  reload without force do not.
A rollback to an older version is the operator's call and is gated by neither MRR@10 nor size. The gates are the
same for every backend: only opening the index differs (in this process, or as shard deployments on Ray Serve).

A refusal is shown (`/ready`, `strata_index_last_swap_refused`) only while `current` still points at the refused
version: once it points elsewhere (`indexer rollback` back to the served one) the refusal is no longer current.

Restarts hold the same gates (`indexer.runtime.serving`): every swap records the version served, every verdict on a
version (`VERDICTS`) records the refusal, in the serving record. At startup the API first opens the version it last
served, then tries `current` as any swap: a version refused before stays refused without being opened again (shown
in `/ready` and the metrics, logged), one it never saw goes through every gate. Only a forced reload (or a newer
version that passes) lifts a remembered refusal; SIGHUP and a reload without force judge the version again.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from indexer.runtime.encoder import EncoderLoadError
from indexer.runtime.integrity import IntegrityError, damage, verify_folder
from indexer.runtime.layout import CURRENT, IndexRoot, LayoutError
from indexer.runtime.manifest import MANIFEST, Manifest, ManifestError
from indexer.runtime.priority import lower_thread
from indexer.runtime.serving import RECORD, VERDICTS, ServingRecord
from indexer.runtime.shrink_guard import MAX_SHRINK_ENV, shrinks_too_much
from indexer.runtime.version import IndexLoadError
from indexer.runtime.writelog import WriteLogError
from service.engine.backends import Backend
from service.engine.encoders import EncoderCache
from service.engine.errors import Mismatch, SwapRefused
from service.engine.leases import Leases
from service.engine.metrics import CollectionMetrics, Metrics
from service.engine.searcher import Searcher
from service.engine.settings import EngineSettings

if TYPE_CHECKING:
    from indexer.runtime.writes import Writes

log = logging.getLogger(__name__)

PROBE_QUERY = "strata swap probe: is this index answering?"
Outcome = Literal["swapped", "unchanged", "refused"]


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
    def __init__(self, settings: EngineSettings, backend: Backend, leases: Leases, metrics: Metrics, *,
                 writes: Writes | None = None, encoders: EncoderCache | None = None,
                 collection: CollectionMetrics | None = None) -> None:
        self.settings, self.backend, self.leases, self.metrics = settings, backend, leases, metrics
        self.encoders = encoders or EncoderCache(settings.threads)  # shared by the collections of a process
        self.collection = collection or metrics.collection("default")
        self.writes = writes  # the write log replayed onto each candidate, and the switch made under its lock
        self.root = IndexRoot(settings.index_root)
        self.record = ServingRecord.load(settings.state_dir / f"{self.collection.name}.{RECORD}"
                                         if settings.state_dir else self.root.root / RECORD)
        self.refused: Refusal | None = None  # the latest attempt's refusal; cleared by a successful swap
        self.served_since: datetime | None = None  # when the served version was swapped in
        self._damage: str | None = None  # the served version's damage last reported (logged once per change)
        self._lock = asyncio.Lock()
        self._report_stamp: tuple[str, int] | None = None  # the served manifest's (version, mtime) last read
        # a candidate is opened, replayed and caught up on a thread of its own below the searches' CPU priority:
        # a replay after a compaction applies every write that came during it (their lists' assignment, their
        # metadata), seconds of a core that a search on a busy machine should not wait behind
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"swap-{self.collection.name}",
                                        initializer=lower_thread, initargs=(settings.write_nice,))

    def target(self) -> str | None:
        try:
            return os.readlink(self.root.root / CURRENT).rsplit("/", 1)[-1]
        except OSError:
            return None

    def _check_quality(self, new: Searcher, served: Searcher | None) -> None:
        if served is None or new.version <= served.version:
            return
        a, b = served.manifest, new.manifest
        # the full evaluation's MRR@10, or the gate's when the report runs after publishing (`indexer.report`)
        served_mrr, new_mrr = a.gate_mrr_at_10(), b.gate_mrr_at_10()
        if served_mrr is None or new_mrr is None or math.isnan(served_mrr):
            return
        if (a.data.protocol, a.data.n_queries) != (b.data.protocol, b.data.n_queries):
            log.info("MRR@10 of %s and %s are not comparable (different evaluation sets): not gated",
                     served.version, new.version)
            return
        if new_mrr < served_mrr - self.settings.max_mrr_drop:
            raise SwapRefused("quality", f"version {new.version} has MRR@10 {new_mrr:.4f}, more than "
                              f"{self.settings.max_mrr_drop} below the served {served.version} "
                              f"({served_mrr:.4f})")

    def _check_size(self, new: Searcher, served: Searcher | None) -> None:
        """The shrink guard: both sizes are the documents served after the write log's replay (`LiveIndex.ntotal`),
        so a rebuild from source that the log tops back up is compared with what it will really serve; with writes,
        at the switch, where both hold the same entries (a candidate replayed while writes went on is not compared
        with the served version's later count)."""
        if served is None or new.version <= served.version:
            return
        limit = self.settings.max_shrink
        served_docs, new_docs = int(served.index.ntotal), int(new.index.ntotal)
        if shrinks_too_much(served_docs, new_docs, limit):
            raise SwapRefused("shrink", f"version {new.version} would serve {new_docs:,} documents (write log "
                              f"replayed), {new_docs / served_docs:.1%} of the served {served.version}'s "
                              f"{served_docs:,}: more than {MAX_SHRINK_ENV}={limit:g} fewer, so it is not swapped "
                              f"in by itself (a truncated input?); POST /admin/reload?force=true serves it, "
                              f"`indexer rollback` goes back")

    def _verify(self, folder: Path) -> None:
        """Every file against its manifest checksum, before anything reads it (a damaged FAISS file is never
        handed to FAISS's reader)."""
        t0 = time.perf_counter()
        try:
            verified = verify_folder(folder)
        except IntegrityError as exc:
            raise SwapRefused("corrupt", str(exc)) from exc
        seconds = time.perf_counter() - t0
        self.metrics.verify_seconds.set(seconds)
        if verified.checked:
            log.info("verified %s: %d files, %.1f MiB match their checksums in %.2fs", folder.name, verified.files,
                     verified.bytes / 2**20, seconds)

    def _prepare(self, version: str, force: bool = False) -> Searcher:
        """Runs in a worker thread: verify, open and check the candidate while the served searcher keeps
        answering. `force`: the operator's override of the shrink guard."""
        s, served = self.settings, self.leases.current
        folder = self.root.version_dir(version)
        if not folder.is_dir():
            raise SwapRefused("missing", f"{self.root.root}/current points to {version}, which does not exist")
        self._verify(folder)
        try:
            index = self.backend.open_index(folder)
            try:  # each encoder folder is loaded once per process, whichever collections and versions pair with it
                searcher = Searcher(self.encoders.get(Path(s.model_dir or index.manifest.model.dir)), index,
                                    hybrid_lexical=s.hybrid_lexical, lexical_workers=s.workers)
            except BaseException:
                index.close()
                raise
            log.info("opened index %s (%d vectors) with encoder %s", index.version, index.ntotal,
                     searcher.encoder.model_dir)
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
            if not force and self.writes is None:  # with writes: at the switch, both caught up (`attempt`)
                self._check_size(searcher, served)
            try:
                searcher.search([PROBE_QUERY], 1)
            except Exception as exc:  # noqa: BLE001 (anything a probe raises disqualifies the version)
                raise SwapRefused("probe", f"version {version} failed a probe query: {exc}") from exc
        except BaseException:
            searcher.close()
            raise
        return searcher

    async def reload(self, trigger: str, *, force: bool = False) -> SwapResult:
        """An operator's explicit swap (`POST /admin/reload`) to what `current` points at, retried even when that
        version was refused before; raises SwapRefused (the served version keeps answering) when the candidate is
        refused. `force`: serve it even when it shrinks by more than `max_shrink` (every other gate holds)."""
        result = await self.attempt(trigger, retry=True, force=force)
        if result.outcome == "refused":
            kind = self.refused.kind if self.refused else "missing"
            raise SwapRefused(kind, result.reason or "refused", candidate=result.candidate, served=result.version)
        return result

    async def start(self) -> SwapResult:
        """The startup load: the version last served (from the serving record) first, when `current` points
        elsewhere, then `current` through the gates like any swap (a version refused before stays refused)."""
        target, last = self.target(), self.record.served
        if last is not None and last != target:
            if self.root.version_dir(last).is_dir():
                log.info("collection %s: opening %s, the version served last, before current's %s",
                         self.collection.name, last, target)
                await self.attempt("startup", version=last, retry=True)
            else:
                log.error("collection %s: %s, the version served last, is gone", self.collection.name, last)
        return await self.attempt("startup")

    async def attempt(self, trigger: str, *, retry: bool = False, force: bool = False,
                      version: str | None = None) -> SwapResult:
        """`reload` that reports a refusal in its result instead of raising it (startup, watcher, SIGHUP).
        Without `retry` (the watcher, startup), a refused version is not tried again until `current` changes,
        nor after a restart. `version`: that one instead of `current`'s (the startup's last served version)."""
        async with self._lock:
            served = self.leases.current
            served_version = served.version if served else None
            target = version or self.target()
            self.current_refusal()  # forget a refusal of a version `current` no longer points at
            if target is None:
                reason = f"{self.root.root} has no current index (build one with `indexer build --root " \
                         f"{self.root.root}`)"
                if served is None:
                    self._refuse(SwapRefused("missing", reason), None, trigger)
                    return SwapResult("refused", None, None, reason)
                return SwapResult("unchanged", served_version, None, reason)
            if target == served_version or (not retry and self.refused and self.refused.version == target):
                return SwapResult("unchanged", served_version, target,
                                  self.refused.reason if self.refused and self.refused.version == target else None)
            remembered = self.record.refused.get(target)
            if remembered is not None and not retry and not force:  # refused before a restart: stays refused
                reason = (f"{remembered.reason} [refused at {remembered.at}, remembered across restarts; "
                          f"serving {served_version or 'nothing'}; POST /admin/reload?force=true serves it]")
                self._refuse(SwapRefused(remembered.kind, reason), target, trigger, record=False)
                return SwapResult("refused", served_version, target, reason)
            loop = asyncio.get_running_loop()
            try:
                new = await loop.run_in_executor(self._pool, self._prepare, target, force)
            except SwapRefused as exc:
                self._refuse(exc, target, trigger)
                return SwapResult("refused", served_version, target, str(exc))
            except (LayoutError, Exception) as exc:  # noqa: BLE001 (whatever breaks a load must not break serving)
                refusal = SwapRefused("missing" if isinstance(exc, LayoutError) else "error", str(exc))
                self._refuse(refusal, target, trigger)
                return SwapResult("refused", served_version, target, str(exc))
            if self.writes is not None:  # under the write lock: writes logged meanwhile are applied first
                check = None if force else functools.partial(self._check_size, new, served)
                try:
                    await loop.run_in_executor(self._pool, self.writes.switch, new, self.leases.swap, check)
                except SwapRefused as exc:
                    new.close()
                    self._refuse(exc, target, trigger)
                    return SwapResult("refused", served_version, target, str(exc))
            else:
                self.leases.swap(new)
            del served  # the old searcher is retired (freed off this loop) once its requests finish: `leases`
            self.refused = None
            self.record.passed(new.version)
            await asyncio.to_thread(self.record.save)
            self._publish(new, trigger, served_version)
            return SwapResult("swapped", new.version, target)

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def served_damage(self, version: str) -> str | None:
        """A file of the served version gone or resized on disk since it was verified (`integrity.damage`: a stat
        per file). The version keeps answering from what it has open (its index in memory, its store's open
        file), but a restart or swap would refuse it: said in `/ready` and the log, once per change."""
        found = damage(self.root.version_dir(version))
        if found != self._damage:
            if found is not None:
                log.error("the served version %s is damaged on disk: %s; it keeps answering from the files it has "
                          "open, but a restart or swap will refuse it (rebuild, or `indexer rollback`)", version, found)
            self._damage = found
        return found

    def current_refusal(self) -> Refusal | None:
        """The latest refusal while it still applies: `current` points at the refused version (or at nothing,
        for a refusal of a missing `current`). A refusal `current` has moved away from (`indexer rollback` to the
        served version, a new build) is forgotten, and the refused gauge reset."""
        r = self.refused
        if r is not None and r.version != self.target():
            self.refused = None
            self.collection.refusal_cleared()
            log.info("the refusal of %s no longer applies: current points at %s", r.version, self.target())
            return None
        return r

    def _refuse(self, exc: SwapRefused, version: str | None, trigger: str, *, record: bool = True) -> None:
        self.refused = Refusal(version, exc.kind, str(exc), datetime.now(timezone.utc))
        self.collection.refused(exc.kind)
        if record and version is not None and exc.kind in VERDICTS:  # durably: a restart keeps it refused
            self.record.refuse(version, exc.kind, str(exc), self.refused.at.isoformat(timespec="seconds"))
            self.record.save()
        served = self.leases.current
        log.error("refused index swap to %s (%s, trigger %s): %s; still serving %s", version, exc.kind, trigger,
                  exc, served.version if served else "nothing")

    def _publish(self, searcher: Searcher, trigger: str, previous: str | None) -> None:
        manifest = searcher.manifest
        self.served_since = datetime.now(timezone.utc)
        mrr = manifest.gate_mrr_at_10()
        self.collection.served(searcher.version, searcher.encoder.meta.pooling, int(searcher.index.ntotal),
                               float("nan") if mrr is None else mrr, swapped=previous is not None)
        log.info("collection %s: serving index %s (trigger %s, previous %s)", self.collection.name, searcher.version,
                 trigger, previous)

    def refresh_report(self) -> None:
        """While the served version's report runs after its publishing (`indexer.report`), take its figures from
        the manifest on disk once it is rewritten (a stat per call until then; nothing once the report is over)."""
        searcher = self.leases.current
        report = searcher.manifest.report if searcher is not None else None
        if searcher is None or report is None or report.state in ("done", "failed"):
            return
        folder = self.root.version_dir(searcher.version)
        try:
            stamp = (searcher.version, (folder / MANIFEST).stat().st_mtime_ns)
            if stamp == self._report_stamp:
                return
            fresh = Manifest.load(folder)
        except (OSError, ManifestError):
            return  # the version was removed under us, or a rewrite is not readable: the figures stay as they were
        self._report_stamp = stamp
        served = searcher.manifest  # the figures first, the state last: a reader never sees "done" without them
        served.eval, served.eval_modes, served.report = fresh.eval, fresh.eval_modes, fresh.report
        if fresh.report is not None and fresh.report.state == "done":
            log.info("the report of %s is done: its figures are served", searcher.version)

    async def watch(self) -> None:
        """Poll the `current` symlink (a readlink: cheap, and works on any volume, unlike inotify)."""
        interval = self.settings.watch_interval_s
        while True:
            await asyncio.sleep(interval)
            served = self.leases.current
            target = self.target()
            refused = self.current_refusal()
            if target != (served.version if served else None) and not (refused and refused.version == target):
                try:
                    await self.attempt("watch")
                except Exception:  # noqa: BLE001 (the watcher must outlive any one failed attempt)
                    log.exception("index watcher: reload failed")
