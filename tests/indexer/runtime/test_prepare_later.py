"""`PrepareLater`: one thread, each key taken up at most once at a time, a failed task not blocking its key,
`close` dropping what is queued and refusing more."""

from __future__ import annotations

import threading

from indexer.runtime.prepare_later import PrepareLater


def test_a_key_is_taken_up_once_at_a_time_and_again_once_done() -> None:
    later = PrepareLater("test-prepare")
    release, ran = threading.Event(), []

    def slow() -> None:
        ran.append("slow")
        release.wait(5)

    later.submit("a", slow)
    later.submit("a", lambda: ran.append("a again"))  # "a" is queued or running: not taken up
    later.submit("b", lambda: ran.append("b"))
    release.set()
    later.close()  # waits for the running task; "b" either ran or was dropped with the queue
    assert ran[0] == "slow" and "a again" not in ran and set(ran) <= {"slow", "b"}
    later.submit("c", lambda: ran.append("c"))  # closed: refused
    assert "c" not in ran

    again, done = PrepareLater("test-prepare"), threading.Event()

    def fails() -> None:
        raise MemoryError("no room")

    again.submit("a", fails)
    for _ in range(500):  # the failed task's key is free again once it is done
        again.submit("a", done.set)
        if done.wait(0.01):
            break
    assert done.is_set()
    again.close()
