"""The inference workers (`service.engine.workers`): answers on the event loop, errors and the caller's context
carried, a call given up before it started never run, each thread initialised once, shutdown draining the queue, and
what a finished call held let go at once (not when the next call comes: a searcher swapped out is retired then)."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
import weakref

import pytest

from service.engine.workers import Workers

tag: contextvars.ContextVar[str] = contextvars.ContextVar("tag", default="none")


def test_run_answers_on_the_loop_with_the_callers_context_and_errors() -> None:
    pool = Workers(2, thread_name_prefix="t")

    def where(x: int) -> tuple[int, str, str]:
        return x * 2, tag.get(), threading.current_thread().name

    def boom() -> None:
        raise ValueError("from the worker")

    async def main() -> None:
        tag.set("request-7")
        value, seen, thread = await pool.run(where, 21)
        assert (value, seen) == (42, "request-7")
        assert thread.startswith("t_") and thread != threading.current_thread().name
        with pytest.raises(ValueError, match="from the worker"):
            await pool.run(boom)
        # many at once: every future settles with its own answer
        answers = await asyncio.gather(*(pool.run(where, i) for i in range(50)))
        assert [(value, seen) for value, seen, _ in answers] == [(2 * i, "request-7") for i in range(50)]

    asyncio.run(main())
    pool.shutdown()


def test_a_call_given_up_before_it_started_never_runs() -> None:
    pool = Workers(1)
    release, ran = threading.Event(), []

    async def main() -> None:
        holding = pool.run(release.wait)  # the one worker is busy until released
        dropped = pool.run(ran.append, "dropped")
        dropped.cancel()
        release.set()
        assert await holding is True
        await pool.run(ran.append, "after")  # FIFO on one worker: the dropped call's turn has passed
        assert ran == ["after"]

    asyncio.run(main())
    pool.shutdown()


def test_executor_api_initializer_once_per_thread_and_shutdown_drains() -> None:
    inits: list[str] = []
    pool = Workers(3, thread_name_prefix="w", initializer=lambda: inits.append(threading.current_thread().name))
    assert [f.result() for f in [pool.submit(pow, 2, k) for k in range(10)]] == [2 ** k for k in range(10)]
    assert list(pool.map(abs, [-1, -2])) == [1, 2]
    gate, done = threading.Event(), []
    pool.submit(gate.wait)
    later = [pool.submit(done.append, i) for i in range(5)]
    gate.set()
    pool.shutdown(wait=True)  # returns once the work queued before it has run
    assert sorted(done) == list(range(5)) and all(f.done() for f in later)
    assert sorted(inits) == ["w_0", "w_1", "w_2"]
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(abs, 1)
    with pytest.raises(NotImplementedError):
        pool.shutdown(cancel_futures=True)


def test_a_finished_call_lets_go_of_what_it_held_before_the_next_call_comes() -> None:
    class Held:
        pass

    pool = Workers(1)
    held = Held()
    gone = weakref.ref(held)
    assert pool.submit(id, held).result() == id(held)
    del held
    for _ in range(500):  # the worker now waits for a next call that does not come
        if gone() is None:
            break
        time.sleep(0.01)
    assert gone() is None
    pool.shutdown()
