"""Freeing a large container without pausing the other threads: a slice of items at a time.

Emptying a dict of 200,000 written documents with `clear()` (or dropping its last reference) is one C call that
frees every item while holding the GIL, and no search thread runs a line of Python until it ends (measured:
docs/decisions.md#search-during-an-ingest). Popping the items from Python instead gives the interpreter a bytecode
boundary per item, where it hands the GIL to a waiting thread; a slice of `SLICE` items is followed by a
`time.sleep(0)`, which lets one go at once.
"""

from __future__ import annotations

import time
from typing import Any

SLICE = 1024  # items freed between two offers of the GIL (~0.2 ms of work)


def drain(container: dict[Any, Any] | set[Any] | list[Any]) -> None:
    """Empty `container` in place, `SLICE` items at a time."""
    pop = container.popitem if isinstance(container, dict) else container.pop
    while container:
        for _ in range(min(SLICE, len(container))):
            pop()
        time.sleep(0)  # releases the GIL: a search waiting for it runs now, not at the next switch interval
