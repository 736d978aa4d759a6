"""The background work of an engine and of the collections (`service.engine.triggers`): tasks, a real SIGHUP, and
one stop that ends both."""

from __future__ import annotations

import asyncio
import os
import signal

from service.engine.triggers import Triggers


def test_sighup_spawns_and_stop_ends_the_tasks_and_the_handler() -> None:
    async def run() -> None:
        triggers, seen = Triggers(), asyncio.Event()
        forever_started = asyncio.Event()

        async def forever() -> None:
            forever_started.set()
            await asyncio.Event().wait()

        async def on_hup() -> None:
            seen.set()

        triggers.spawn(forever)
        triggers.on_sighup(on_hup)
        await asyncio.wait_for(forever_started.wait(), 10)
        assert signal.getsignal(signal.SIGHUP) not in (signal.SIG_DFL, signal.SIG_IGN)
        os.kill(os.getpid(), signal.SIGHUP)  # a real signal: the handler spawns on_hup on the loop
        await asyncio.wait_for(seen.wait(), 10)
        tasks = set(triggers._tasks)
        assert tasks, "forever is still running"
        await triggers.stop()
        assert all(t.done() for t in tasks) and not triggers._tasks
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_DFL  # a later SIGHUP is no longer ours
        await triggers.stop()  # twice is harmless

    asyncio.run(run())
