"""The API process's calls to the shard replicas (`sharded`): every answer awaited at most `shard_timeout_s`
(`STRATA_SHARD_TIMEOUT_S`), and a replica's failure — an error raised in it, its actor dead, its application gone,
no answer in time — raised as `ShardUnavailable` naming the shard (a 503 at the HTTP edge, `service.errors`) rather
than as whatever Ray wrapped it in (a bare 500). The other shards' calls still pending are cancelled: the search
is answered without waiting for them. And why a shard's deployment failed to start (`failure_text`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from ray import serve

from service.engine.errors import ShardUnavailable

log = logging.getLogger(__name__)


def _why(exc: BaseException) -> str:
    """One line: the replica's own exception where Ray wrapped it (`RayTaskError.cause`), else Ray's."""
    cause = getattr(exc, "cause", None) or exc
    first = next((ln for ln in str(cause).splitlines() if ln.strip()), "")
    return f"{type(cause).__name__}: {first}" if first else type(cause).__name__


def _cancel(pending: Sequence[Any]) -> None:
    for p in pending:
        try:
            p.cancel()
        except Exception:  # noqa: BLE001 (best effort: an answer that came meanwhile cannot be cancelled)
            pass


def gather(pending: Sequence[Any], shards: Sequence[str], timeout_s: float) -> list[Any]:
    """The answers of `pending` (Serve responses, one per shard named in `shards`), in order, all within
    `timeout_s` of this call; raises `ShardUnavailable` naming the first shard that failed or did not answer."""
    deadline, out = time.monotonic() + timeout_s, []
    for i, (shard, p) in enumerate(zip(shards, pending, strict=True)):
        try:
            out.append(p.result(timeout_s=max(0.0, deadline - time.monotonic())))
        except TimeoutError:  # Ray's GetTimeoutError is one too
            _cancel(pending[i:])
            raise ShardUnavailable(shard, f"no answer within {timeout_s:g} s (STRATA_SHARD_TIMEOUT_S)") from None
        except Exception as exc:  # noqa: BLE001 (a replica's error, a dead actor, a deleted application: Ray's types)
            _cancel(pending[i + 1:])
            log.warning("shard %s failed: %s", shard, exc)
            raise ShardUnavailable(shard, _why(exc)) from exc
    return out


def failure_text(app: str, exc: BaseException) -> str:
    """Why an application failed to deploy: the error, and the deployments' status messages, which carry the
    replica constructor's traceback."""
    parts = [str(exc)]
    try:
        status = serve.status().applications.get(app)
        if status is not None:
            parts += [status.message, *(d.message for d in status.deployments.values())]
    except Exception:  # noqa: BLE001 (best effort: the error itself is still reported)
        pass
    return "\n".join(p for p in parts if p)
