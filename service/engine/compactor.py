"""Compaction by itself: each collection folds its write log into a new version when its policy says so.

Every `compact_interval_s` a collection's compactor measures what its served version does not hold yet — the
documents written since (its overlay's), the write-log bytes after the version's `folded_seq`, the share of the
version's documents deleted or replaced — against its `collection.json` `compaction` policy
(`indexer.runtime.collection_config.Compaction`). Past a limit it runs `indexer compact` (the same compaction, the
same staging and sealing as by hand) as a child process, below the API's CPU and I/O priority (the CLI's
`STRATA_BUILD_PRIORITY`), with `--index auto` when the policy lets the index kind follow the size; then it swaps
to the new version through the same gates as any swap (`swap.Swapper.attempt`), at once rather than at the
watcher's next look. One compaction runs per collection, and at most `max_compactions` across the collections (the
scheduler's semaphore); writes go on throughout: the child reads the log up to one seq, and the swap replays what
came after under the write lock.

A compaction that fails (the child's exit status and the last line it printed) or that a gate refuses is reported
(the status, the log, `strata_compactions_total{outcome}`) and tried again after `compact_retry_s`, doubled at each
failure in a row up to `compact_retry_max_s` — never in a loop. A kill of the API at any point loses nothing: the
log is the truth, a half-staged version is removed by the next compaction, and a published version not yet swapped
to is served at the next start.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from indexer.runtime.collection_config import Compaction
from indexer.runtime.live_index import LiveIndex
from indexer.runtime.writelog import log_path
from service.engine.errors import WritesHeldBack
from service.engine.leases import Leases
from service.engine.metrics import Metrics
from service.engine.settings import EngineSettings

log = logging.getLogger(__name__)

STDERR_TAIL = 2000
HELD_BACK_RETRY_S = 2  # the least Retry-After of an upsert held back at the overlay's bound
HELD_BACK_RETRY_MAX_S = 30
RATE_MIN_S = 1.0  # the least time over which the write rate is measured before it may waive the interval


@dataclass(frozen=True)
class Pending:
    """What the served version does not hold yet, and which limit of the policy it passes (None: none)."""

    entries: int = 0  # log entries after the version's folded_seq
    written_docs: int = 0
    log_bytes: int = 0
    deleted_share: float = 0.0
    due: str | None = None
    # more documents wait in the overlay than the version holds: a collection growing faster than it compacts,
    # whose written documents ride on lists sized for a version a fraction of its size (`written.WrittenLists`)
    outgrown: bool = False


@dataclass
class Outcome:
    outcome: str  # swapped | unchanged (nothing to fold) | failed | refused
    at: str
    seconds: float
    version: str | None = None
    reason: str | None = None
    index_kind: str | None = None
    trigger: str | None = None  # why it ran: the policy's limit passed, and what waived `min_interval_s` if anything


@dataclass
class CompactionStatus:
    pending: Pending = field(default_factory=Pending)
    running_since: str | None = None
    last: Outcome | None = None
    failures: int = 0  # in a row
    next_try_at: str | None = None  # after a failure: not before then
    enabled: bool = True

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def log_bytes_after(root: Path, seq: int) -> int:
    """Bytes of the write log's entries after `seq` (texts, metadata and vectors)."""
    path = log_path(root)
    if not path.is_file():
        return 0
    con = sqlite3.connect(path.absolute().as_uri() + "?mode=ro", uri=True, timeout=5)
    try:
        row = con.execute("SELECT COALESCE(SUM(LENGTH(vector) + LENGTH(text) + LENGTH(metadata)), 0) FROM entries "
                          "WHERE seq > ?", (seq,)).fetchone()
    finally:
        con.close()
    return int(row[0])


def measure(root: Path, leases: Leases, policy: Compaction) -> Pending:
    searcher = leases.current
    live = searcher.index if searcher is not None else None
    if not isinstance(live, LiveIndex):
        return Pending()
    w = live.manifest.writes
    folded = w.folded_seq if w is not None else 0
    entries = max(0, live.overlay.applied_seq - folded)
    if entries == 0:
        return Pending()
    written, removed, base = live.overlay.written, live.overlay.removed_from_base, max(live.base.ntotal, 1)
    size = log_bytes_after(root, folded)
    share = removed / base
    rows = "documents" if live.manifest.chunking() is None else "passages"  # the overlay's rows, what is counted
    due = (f"{written} {rows} written wait, the overlay's bound (max_unfolded_docs) is "
           f"{policy.max_unfolded_docs}: upserts are held back"
           if policy.auto and written >= policy.max_unfolded_docs else  # no bound with auto off: `check_room`
           # an empty version lends written texts no BM25 statistics (`LexicalIndex.weights`): the first
           # compaction gives them their own
           f"{written} {rows} written to a version that holds none" if written and not live.base.ntotal else
           f"{written} {rows} written, the policy's limit is {policy.written_docs}"
           if written >= policy.written_docs else
           f"{size / 2**20:.1f} MiB of write log, the policy's limit is {policy.log_mib:g}"
           if size >= policy.log_mib * 2**20 else
           f"{share:.0%} of the version's {rows} deleted or replaced, the policy's limit is "
           f"{policy.deleted_share:.0%}" if removed and share >= policy.deleted_share else None)
    return Pending(entries, written, size, round(share, 4), due, due is not None and written > live.base.ntotal)


Attempt = Callable[[], Awaitable[Any]]  # the swap to what `current` points at now (`Swapper.attempt`)


class Compactor:
    def __init__(self, name: str, settings: EngineSettings, leases: Leases, policy: Callable[[], Compaction],
                 swap: Attempt, slots: asyncio.Semaphore, metrics: Metrics) -> None:
        self.name, self.settings, self.leases, self.policy = name, settings, leases, policy
        self.root = Path(settings.index_root)
        self._swap, self._slots, self._metrics = swap, slots, metrics
        self.status = CompactionStatus()
        self._lock = asyncio.Lock()
        self._last_end = 0.0
        self._retry_at = 0.0
        self._started: float | None = None  # the running compaction's start (monotonic)
        # (monotonic time, written documents waiting) at the first look after a compaction ended: the write rate's
        # origin (`_bound_ahead`)
        self._rate_from: tuple[float, int] | None = None
        self.proc: asyncio.subprocess.Process | None = None

    def report(self) -> dict[str, Any]:
        """The status as the routes show it: `enabled` is the policy's now (a collection created or configured with
        `auto: false` says so at once, not from the next look)."""
        self.status.enabled = self.policy().auto
        return self.status.to_json()

    async def run(self) -> None:
        """The background loop (a task of the collection's triggers)."""
        while True:
            await asyncio.sleep(self.settings.compact_interval_s)
            try:
                await self.tick()
            except Exception:  # noqa: BLE001 (the loop must outlive any one failed look)
                log.exception("collection %s: compaction check failed", self.name)

    async def tick(self) -> Outcome | None:
        """Measure, and compact when the policy says so and no backoff or interval holds it back."""
        policy = self.policy()
        self.status.enabled = policy.auto
        pending = await asyncio.to_thread(measure, self.root, self.leases, policy)
        self.status.pending = pending
        self._metrics.compaction_pending.labels(self.name).set(pending.entries)
        now = time.monotonic()
        if self._rate_from is None and self._last_end and not self._lock.locked():
            self._rate_from = (now, pending.written_docs)
        if not policy.auto or pending.due is None or self._lock.locked():
            return None
        if now < self._retry_at:
            return None
        holds, waived = self._interval_holds(pending, policy, now)
        if holds:
            return None
        return await self.compact(pending.due + (f"; {waived}" if waived else ""), policy)

    def _interval_holds(self, pending: Pending, policy: Compaction, now: float) -> tuple[bool, str | None]:
        """Whether `min_interval_s` since the last compaction's end holds a due one back, and what waived it if it
        would have. It is waived when writes are held back at the overlay's bound, when the overlay has outgrown
        the version (`Pending.outgrown`), and when the bound is ahead (`_bound_ahead`): then the next compaction
        starts at once (a backoff after a failure still holds: `tick`)."""
        if not self._last_end or now - self._last_end >= policy.min_interval_s:
            return False, None
        if pending.written_docs >= policy.max_unfolded_docs:
            return False, None  # (the bound is the reason `measure` gives)
        if pending.outgrown:
            return False, "min_interval_s waived: more documents wait than the version holds"
        ahead = self._bound_ahead(pending, policy, now)
        return ahead is None, ahead

    def _bound_ahead(self, pending: Pending, policy: Compaction, now: float) -> str | None:
        """Why waiting out the interval would hold writes back, or None: at the rate documents have been written
        since the last compaction ended, the overlay would reach its bound (`max_unfolded_docs`) before a
        compaction started now is done, if it takes as long as the last one. A collection fed steadily then
        compacts back to back instead of stopping its writers at the bound for a whole compaction; one fed a
        trickle still waits the interval."""
        last = self.status.last
        if self._rate_from is None or last is None:
            return None
        since, written_then = self._rate_from
        if now - since < RATE_MIN_S:
            return None
        rate = max(pending.written_docs - written_then, 0) / (now - since)
        if pending.written_docs + rate * last.seconds < policy.max_unfolded_docs:
            return None
        return (f"min_interval_s waived: at {rate:,.0f} documents/s the overlay would reach its bound of "
                f"{policy.max_unfolded_docs:,} within the last compaction's {last.seconds:.0f} s")

    async def compact(self, why: str, policy: Compaction) -> Outcome:
        async with self._lock, self._slots:
            t0 = self._started = time.monotonic()
            self.status.running_since = _now()
            self._metrics.compaction_running.labels(self.name).set(1)
            log.info("collection %s: compacting (%s)", self.name, why)
            try:
                outcome = await self._run_child(policy, t0)
            finally:
                self.status.running_since, self._started, self._rate_from = None, None, None
                self._metrics.compaction_running.labels(self.name).set(0)
                self._last_end = time.monotonic()
            outcome.trigger = why
            self._record(outcome)
            return outcome

    async def _run_child(self, policy: Compaction, t0: float) -> Outcome:
        cmd = [sys.executable, "-m", "indexer.cli", "compact", "--root", str(self.root), "--no-eval",
               "--index", policy.index]
        self.proc = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE,
                                                         stderr=asyncio.subprocess.PIPE)
        out, err = await self.proc.communicate()
        rc, self.proc = self.proc.returncode, None
        seconds = round(time.monotonic() - t0, 3)
        if rc != 0:
            lines = [ln for ln in err.decode(errors="replace").splitlines() if ln.strip()]
            return Outcome("failed", _now(), seconds, reason=f"indexer compact exited {rc}: "
                           f"{(lines[-1] if lines else '')[-STDERR_TAIL:]}")
        if out.decode(errors="replace").startswith("nothing to fold"):
            return Outcome("unchanged", _now(), seconds)
        result = await self._swap()
        served = self.leases.current
        kind = served.manifest.index.kind if served is not None else None
        if result.outcome == "refused":
            return Outcome("refused", _now(), round(time.monotonic() - t0, 3), result.version, result.reason, kind)
        return Outcome("swapped", _now(), round(time.monotonic() - t0, 3), result.version, None, kind)

    def _record(self, outcome: Outcome) -> None:
        s = self.status
        s.last = outcome
        self._metrics.compactions.labels(self.name, outcome.outcome).inc()
        self._metrics.compaction_seconds.labels(self.name).set(outcome.seconds)
        if outcome.outcome in ("failed", "refused"):
            s.failures += 1
            wait = min(self.settings.compact_retry_s * 2 ** (s.failures - 1), self.settings.compact_retry_max_s)
            self._retry_at = time.monotonic() + wait
            s.next_try_at = datetime.fromtimestamp(time.time() + wait, timezone.utc).isoformat(timespec="seconds")
            log.error("collection %s: compaction %s (%s); next try in %.0f s (failure %d in a row)", self.name,
                      outcome.outcome, outcome.reason, wait, s.failures)
        else:
            s.failures, s.next_try_at, self._retry_at = 0, None, 0.0
            log.info("collection %s: compaction %s in %.1f s: serving %s (%s)", self.name, outcome.outcome,
                     outcome.seconds, outcome.version, outcome.index_kind)

    def check_room(self) -> None:
        """Refuse an upsert (`WritesHeldBack`, a 429) while the served version's overlay holds the policy's
        `max_unfolded_docs` written documents: the bound on its memory, which a compaction alone lowers (it is
        due at once: `tick`). No bound when compaction by itself is off."""
        policy = self.policy()
        served = self.leases.current
        live = served.index if served is not None else None
        if policy.auto and isinstance(live, LiveIndex) and live.overlay.written >= policy.max_unfolded_docs:
            raise WritesHeldBack(live.overlay.written, policy.max_unfolded_docs, self._retry_after())

    def _retry_after(self) -> int:
        """When a held-back upsert is worth sending again: the running compaction's likely end (the last one's
        duration less what this one has run), within [HELD_BACK_RETRY_S, HELD_BACK_RETRY_MAX_S]."""
        last = self.status.last
        if self._started is None or last is None:
            return HELD_BACK_RETRY_S
        left = last.seconds - (time.monotonic() - self._started)
        return int(min(max(left, HELD_BACK_RETRY_S), HELD_BACK_RETRY_MAX_S))

    def stop_child(self) -> None:
        """At shutdown: the running compaction is killed (its staging folder is removed by the next one)."""
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
