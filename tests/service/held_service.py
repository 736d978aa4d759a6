"""`python -m service` with holds the test controls, for tests of deadlines (the shutdown grace) and of what the
event loop does meanwhile:

- `STRATA_TEST_HOLD`: every batch the inference workers run first touches `<STRATA_TEST_HOLD>.entered`, then waits
  while that file exists (patches `service.engine.scheduler.run_routed`);
- `STRATA_TEST_HOLD_BODY`: every request body parsed off the event loop (`service.lean_route.validate_body`, the
  large ones) first touches `<STRATA_TEST_HOLD_BODY>.entered`, then waits while that file exists.

A request is then in flight for exactly as long as the test wants, whatever the machine's speed. Test-only: the
product has no such hook; this module patches the product's functions before serving."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import service.engine.scheduler as scheduler
import service.lean_route as lean_route
from service.__main__ import main


def held(hold: Path, function: Callable[..., Any], when: Callable[..., bool] = lambda *_: True) -> Callable[..., Any]:
    def wait_then_call(*args: Any, **kwargs: Any) -> object:  # noqa: ANN401 (the held function's own)
        if when(*args):
            Path(f"{hold}.entered").touch()
            while hold.exists():
                time.sleep(0.01)
        return function(*args, **kwargs)

    return wait_then_call


if hold := os.environ.get("STRATA_TEST_HOLD"):
    scheduler.run_routed = held(Path(hold), scheduler.run_routed)  # type: ignore[assignment]
if hold := os.environ.get("STRATA_TEST_HOLD_BODY"):  # the large bodies only: a search's is parsed on the loop
    lean_route.validate_body = held(Path(hold), lean_route.validate_body,  # type: ignore[assignment]
                                    lambda raw, *_: len(raw) >= lean_route.OFF_LOOP_BYTES)

if __name__ == "__main__":
    sys.exit(main())
