"""What long bench runs print while they work: timestamped progress lines and the machine's load, since every
figure here is read beside the load it was measured under."""

from __future__ import annotations

import os
import sys
from datetime import datetime


def log(msg: str) -> None:
    """A timestamped progress line on stderr (stdout stays for the result table)."""
    print(f"[{datetime.now():%H:%M:%S}] {msg}", file=sys.stderr, flush=True)


def load() -> str:
    """The 1/5/15-minute load averages, e.g. "1.97/2.02/2.20"."""
    return "/".join(f"{x:.2f}" for x in os.getloadavg())
