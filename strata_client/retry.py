"""When to send a request again: a 429 (the server's in-flight cap) or a 503 (no index loaded yet, a write log
briefly unwritable) and a connection that could not be opened. Strata refuses a 429 before doing any work and
its writes are idempotent by id, so every call may be retried; a 504 is not (the work goes on in the server)."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    """`max_attempts` sends in all (1: never retry); `max_total_s` bounds the time spent waiting between them:
    a wait that would pass it is not started and the last error is raised. The wait is the answer's
    `Retry-After` when it has one (capped at `max_wait_s`), else `backoff_s` doubled per attempt up to
    `max_wait_s`, with ±`jitter` so that many clients refused together do not come back together."""

    max_attempts: int = 5
    max_total_s: float = 30.0
    backoff_s: float = 0.25
    max_wait_s: float = 10.0
    jitter: float = 0.1
    statuses: tuple[int, ...] = (429, 503)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if min(self.max_total_s, self.backoff_s, self.max_wait_s, self.jitter) < 0:
            raise ValueError("times and jitter must not be negative")

    def wait(self, attempt: int, retry_after_s: float | None) -> float:
        """Seconds to wait after the `attempt`-th send (1-based) failed."""
        if retry_after_s is not None:
            # never earlier than the server asked; a little later, spread
            return min(retry_after_s, self.max_wait_s) * (1 + random.uniform(0, self.jitter))
        base = min(self.backoff_s * 2 ** (attempt - 1), self.max_wait_s)
        return base * (1 + random.uniform(-self.jitter, self.jitter))

    def next_wait(self, attempt: int, retry_after_s: float | None, waited_s: float) -> float | None:
        """The wait before the next attempt, or None when the attempts or the time are spent."""
        if attempt >= self.max_attempts:
            return None
        delay = self.wait(attempt, retry_after_s)
        return None if waited_s + delay > self.max_total_s else delay


NO_RETRY = RetryPolicy(max_attempts=1)
