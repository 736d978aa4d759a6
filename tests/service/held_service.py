"""`python -m service` with a hold the test controls, for tests of deadlines (the shutdown grace): every batch the
inference workers run first touches `<STRATA_TEST_HOLD>.entered`, then waits while the file `STRATA_TEST_HOLD`
exists. A request is then in flight for exactly as long as the test wants, whatever the machine's speed. Test-only:
the product has no such hook; this module patches `service.engine.scheduler.run_routed` before serving."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import service.engine.scheduler as scheduler
from service.__main__ import main

HOLD = Path(os.environ["STRATA_TEST_HOLD"])
_run_routed = scheduler.run_routed


def held(*args: object, **kwargs: object) -> object:
    Path(f"{HOLD}.entered").touch()
    while HOLD.exists():
        time.sleep(0.01)
    return _run_routed(*args, **kwargs)  # type: ignore[arg-type]


scheduler.run_routed = held  # type: ignore[assignment]

if __name__ == "__main__":
    sys.exit(main())
