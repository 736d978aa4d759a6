"""Limits shared by `indexer build` and the service's swap gate (this module imports nothing heavy, so both can).

A build from a truncated input file must not silently replace a full index: `indexer build` warns when its corpus
holds fewer than (1 - max_shrink) of the current version's documents, and the service is to refuse swapping to
such a version by itself (`STRATA_MAX_SHRINK`, default 0.1: a version may hold up to 10 % fewer documents).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

MAX_SHRINK_ENV = "STRATA_MAX_SHRINK"
DEFAULT_MAX_SHRINK = 0.1


def max_shrink(env: Mapping[str, str] | None = None) -> float:
    """`STRATA_MAX_SHRINK` as a fraction in [0, 1] (default 0.1); a bad value raises ValueError naming it."""
    raw = (os.environ if env is None else env).get(MAX_SHRINK_ENV)
    if raw is None or raw.strip() == "":
        return DEFAULT_MAX_SHRINK
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{MAX_SHRINK_ENV}={raw!r}: expected a fraction between 0 and 1 (default "
                         f"{DEFAULT_MAX_SHRINK})")
    return value


def shrinks_too_much(served_docs: int, new_docs: int, limit: float = DEFAULT_MAX_SHRINK) -> bool:
    """True when `new_docs` is below (1 - limit) × `served_docs` (a version with fewer documents than allowed)."""
    return served_docs > 0 and new_docs < (1.0 - limit) * served_docs


def shrink_message(served_version: str, served_docs: int, new_docs: int, limit: float) -> str:
    return (f"the new version holds {new_docs:,} documents, {new_docs / served_docs:.0%} of the current version "
            f"{served_version}'s {served_docs:,} (more than {MAX_SHRINK_ENV}={limit:g} fewer): check that the "
            f"input is complete; an API serving this root should not swap to it by itself")
