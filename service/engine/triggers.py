"""What starts work in the background of a collection or of all of them: their tasks (the `current` watcher, the
collections folder's watcher, a SIGHUP's reload) and the SIGHUP handler, started and stopped in one place.

May import: the standard library."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Coroutine

Start = Callable[[], Coroutine[object, object, object]]


class Triggers:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[object]] = set()
        self._sighup = False

    def spawn(self, start: Start) -> None:
        """Run `start()` as a task of the running loop, cancelled by `stop`."""
        task = asyncio.get_running_loop().create_task(start())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def on_sighup(self, start: Start) -> None:
        """Spawn `start()` on each SIGHUP (not off the main thread, nor where the loop takes no signals)."""
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self.spawn, start)
            self._sighup = True

    async def stop(self) -> None:
        """Remove the SIGHUP handler, cancel the tasks and wait for them to end."""
        if self._sighup:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
            self._sighup = False
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
