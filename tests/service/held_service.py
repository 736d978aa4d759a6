"""`python -m service` with holds the test controls, for tests of deadlines (the shutdown grace) and of what the
event loop does meanwhile:

- `STRATA_TEST_HOLD`: every batch the inference workers run first writes its process id to
  `<STRATA_TEST_HOLD>.entered`, then waits while that file exists (patches `service.engine.scheduler.run_routed`);
- `STRATA_TEST_HOLD_BODY`: every request body parsed off the event loop (the large ones: in the body process,
  `service.body_process._validate`, or on the parser's thread, `service.lean_route.validate_body`) first writes its
  process id to `<STRATA_TEST_HOLD_BODY>.entered`, then waits while that file exists;
- `STRATA_TEST_HOLD_SNAPSHOT`: every snapshot being made, its version's files open, waits the same way before it
  copies the write log (patches `indexer.runtime.snapshot.copy_log`).

A request is then in flight for exactly as long as the test wants, whatever the machine's speed. Test-only: the
product has no such hook; this module patches the product's functions before serving."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import indexer.runtime.snapshot as snapshot
import service.body_process as body_process
import service.engine.scheduler as scheduler
import service.lean_route as lean_route
from service.__main__ import main


def held(hold: Path, function: Callable[..., Any], when: Callable[..., bool] = lambda *_: True) -> Callable[..., Any]:
    def wait_then_call(*args: Any, **kwargs: Any) -> object:  # noqa: ANN401 (the held function's own)
        if when(*args):
            Path(f"{hold}.entered").write_text(str(os.getpid()))  # who holds it: the API's process or a child
            while hold.exists():
                time.sleep(0.01)
        return function(*args, **kwargs)

    return wait_then_call


_validate_in_child = body_process._validate


def held_validate(raw: bytes, model: type) -> object:
    """`body_process._validate`, held: it runs in the body process, which imports this module by name (spawned: the
    patch below is made there too, and the hold's file comes from the environment it inherits)."""
    hold = Path(os.environ["STRATA_TEST_HOLD_BODY"])
    return held(hold, _validate_in_child)(raw, model)


if hold := os.environ.get("STRATA_TEST_HOLD"):
    scheduler.run_routed = held(Path(hold), scheduler.run_routed)  # type: ignore[assignment]
if hold := os.environ.get("STRATA_TEST_HOLD_BODY"):  # the large bodies only: a search's is parsed on the loop
    lean_route.validate_body = held(Path(hold), lean_route.validate_body,  # type: ignore[assignment]
                                    lambda raw, *_: len(raw) >= lean_route.OFF_LOOP_BYTES)
    body_process._validate = held_validate  # type: ignore[assignment]
if hold := os.environ.get("STRATA_TEST_HOLD_SNAPSHOT"):
    snapshot.copy_log = held(Path(hold), snapshot.copy_log)  # type: ignore[assignment]

if __name__ == "__main__":
    sys.exit(main())
