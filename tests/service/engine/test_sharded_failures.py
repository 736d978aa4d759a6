"""A shard that fails a search on the sharded backend (`python -m service sharded` on the session's local Ray): a
503 naming the shard (`ShardUnavailable`), not a bare 500, and a shard that does not answer is given up on after
`STRATA_SHARD_TIMEOUT_S` (`service.engine.shard_calls.gather`) rather than holding the search's worker."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

ray = pytest.importorskip("ray")

from service.engine.errors import ShardUnavailable  # noqa: E402
from service.engine.shard_calls import gather  # noqa: E402
from tests.conftest import stop_server  # noqa: E402
from tests.service.engine.test_sharded import QUERY, shard_apps, start_sharded  # noqa: E402


def test_a_shard_gone_from_under_the_server_is_a_503_naming_it(ray_sharded: Path, ray_cluster: str,
                                                              tmp_path: Path) -> None:
    """The served version's shard 1 application deleted from the cluster (a lost shard): /search answers 503 naming
    shard 1 and its file (it was a 500 with Ray's error); the server stays up and says so again."""
    from ray import serve

    before = shard_apps()
    srv = start_sharded(tmp_path, ray_sharded.parent.parent, ray_cluster, {"STRATA_SHARD_TIMEOUT_S": "20"})
    try:
        with srv.client() as c:
            assert c.post("/search", json={"query": QUERY, "top_k": 3}).status_code == 200
            ours = sorted(shard_apps() - before)
            assert len(ours) == 2 and ours[1].endswith("-shard-1"), ours
            serve.delete(ours[1])
            for _ in range(2):
                started = time.monotonic()
                r = c.post("/search", json={"query": QUERY, "top_k": 3})
                assert r.status_code == 503, r.text
                assert "shard 1 of 2" in r.json()["detail"] and "shard-1" in r.json()["detail"], r.text
                assert time.monotonic() - started < 30
            assert c.get("/health").status_code == 200
    finally:
        stop_server(srv)


def replica_pids(app: str) -> list[int]:
    """The processes of the Serve replicas of application `app` (Ray titles a replica's worker
    `ray::ServeReplica:<app>:<deployment>`)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                title = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if f"ServeReplica:{app}:" in title:
                pids.append(int(entry.name))
    return pids


def test_a_hung_shard_replica_is_given_up_on_after_the_timeout_and_answers_again_once_it_runs(
        ray_sharded: Path, ray_cluster: str, tmp_path: Path) -> None:
    """A real hang: shard 1's replica process stopped (SIGSTOP), so its call neither answers nor fails. /search
    answers 503 naming shard 1 and the timeout after about `STRATA_SHARD_TIMEOUT_S` (it would wait for ever), the
    server keeps serving health; continued (SIGCONT), the replica answers and searches are 200 again."""
    before = shard_apps()
    srv = start_sharded(tmp_path, ray_sharded.parent.parent, ray_cluster, {"STRATA_SHARD_TIMEOUT_S": "4"})
    stopped: list[int] = []
    try:
        with srv.client() as c:
            assert c.post("/search", json={"query": QUERY, "top_k": 3}).status_code == 200
            ours = sorted(shard_apps() - before)
            assert len(ours) == 2 and ours[1].endswith("-shard-1"), ours
            pids = replica_pids(ours[1])
            assert pids, f"no replica process of {ours[1]}"
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
            started = time.monotonic()
            r = c.post("/search", json={"query": QUERY, "top_k": 3})
            waited = time.monotonic() - started
            assert r.status_code == 503, r.text
            assert "shard 1 of 2" in r.json()["detail"] and "no answer within 4 s" in r.json()["detail"], r.text
            assert 3.5 < waited < 15, waited
            assert c.get("/health").status_code == 200
            for pid in stopped:
                os.kill(pid, signal.SIGCONT)
            stopped.clear()
            deadline = time.monotonic() + 60
            while (r := c.post("/search", json={"query": QUERY, "top_k": 3})).status_code != 200:
                assert time.monotonic() < deadline, r.text
                time.sleep(0.5)
            assert len(r.json()["hits"]) == 3
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        stop_server(srv)


def test_a_shard_that_does_not_answer_in_time_is_named_and_the_others_are_cancelled() -> None:
    """`gather` on Serve's response shape: a shard answering past the timeout is a `ShardUnavailable` naming it after
    about the timeout (not after its answer), the calls still pending are cancelled; a replica's own error is one
    too, with that error's first line."""
    cancelled: list[str] = []

    def response(name: str, seconds: float, error: Exception | None = None) -> SimpleNamespace:
        done = threading.Event()
        threading.Timer(seconds, done.set).start()

        def result(timeout_s: float | None = None) -> str:
            if not done.wait(timeout_s):
                raise TimeoutError
            if error is not None:
                raise error
            return name

        return SimpleNamespace(result=result, cancel=lambda: cancelled.append(name))

    assert gather([response("a", 0), response("b", 0.01)], ["shard 0", "shard 1"], 5) == ["a", "b"]
    started = time.monotonic()
    with pytest.raises(ShardUnavailable, match=r"shard 1: no answer within 0.2 s \(STRATA_SHARD_TIMEOUT_S\)"):
        gather([response("a", 0), response("b", 3), response("c", 3)], ["shard 0", "shard 1", "shard 2"], 0.2)
    assert time.monotonic() - started < 2 and cancelled == ["b", "c"]
    with pytest.raises(ShardUnavailable, match=r"shard 0: OSError: disk gone"):
        gather([response("a", 0, OSError("disk gone\ntraceback"))], ["shard 0"], 5)
