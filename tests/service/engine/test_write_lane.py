"""The write lane: searches keep priority over writes' encoding, and writes still complete and stay durable.

All on the real engine (ONNX Runtime, FAISS, the SQLite write log) over a copy of a real Quora index."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest

from indexer.runtime.query import Query
from indexer.runtime.writelog import WriteLog, log_path
from service.engine import Collection, Document, TimedOut
from service.settings import Settings

QUERIES = ["How can I be a good geologist?", "What is the step by step guide to invest in share market?",
           "How do I learn Python?", "Why is the sky blue?", "What is the best smartphone under 15000?",
           "How can I lose weight fast?", "What is love?", "How do I get a job at Google?"]
WORDS = ("how what why can i learn python money invest india sky blue sea green dog cat car road guitar horse food "
         "child woman man best way quickly good great river mountain bridge").split()


def long_text(n: int) -> str:
    """~250 distinct words: a text the model cuts at its max_length, so each costs a full-length run."""
    return f"document {n}: " + " ".join(WORDS[(n * 7 + i * 13) % len(WORDS)] for i in range(250))


@pytest.fixture()
def root(quora_root: Path, tmp_path: Path) -> Path:
    """A copy of the session's Quora root: writes go to the copy's log."""
    dst = tmp_path / "root"
    shutil.copytree(quora_root, dst, symlinks=True)
    return dst


def settings(root: Path, **kw: object) -> Settings:
    base: dict[str, object] = {"index_root": root, "workers": 1, "threads": 1, "watch_interval_s": 0,
                               "write_threads": 1, "write_chunk_texts": 16, "request_timeout_s": 300}
    return Settings(**(base | kw))  # type: ignore[arg-type]


def logged(root: Path) -> int:
    path = log_path(root)
    if not path.is_file():
        return 0
    wlog = WriteLog(path)
    try:
        return len(list(wlog.entries(after=0)))
    finally:
        wlog.close()


def test_a_search_sent_while_a_large_write_is_encoded_is_answered_first(root: Path) -> None:
    """One search worker, one write of 96 full-length documents: before the lane, the write's texts took the only
    worker for their whole run and the search waited behind them; now the search is answered while the write is
    still being encoded (at the searches' own priority here: the lane's threads alone make the difference), and the
    write then completes, durable and searchable."""
    docs = [Document(20_000_000 + i, long_text(i), {}) for i in range(96)]
    events: list[str] = []

    async def scenario() -> None:
        collection = Collection(settings(root, write_nice=0))
        await collection.start()
        try:
            write = asyncio.create_task(collection.upsert(docs))
            write.add_done_callback(lambda _: events.append("write answered"))
            while collection.write_lane.ran == 0:  # the write is being encoded: its first chunk is done
                await asyncio.sleep(0.005)
            assert not write.done()
            events.append("search sent")
            hits = await collection.search(Query([QUERIES[2]], 5))
            events.append("search answered")
            assert len(hits.hits[0]) == 5
            assert collection.write_lane.pending > 0, ("the write was no longer being encoded when the search was "
                                                       "answered")
            result = await write
            assert result.seq == len(docs)
            top = await collection.search(Query([docs[50].text], 1))
            assert top.hits[0][0].faiss_id == docs[50].id  # acknowledged, so served
        finally:
            await collection.stop()

    asyncio.run(scenario())
    assert events == ["search sent", "search answered", "write answered"]
    assert logged(root) == len(docs)  # acknowledged, so logged


def test_writes_complete_under_a_continuous_search_stream(root: Path) -> None:
    """16 clients search back to back on 2 workers (more than the cores can answer at once) while writes are
    encoded below the searches' priority (the default `write_nice`): the writes still complete, all of them logged
    and searchable, and the searches went on all along."""
    docs = [Document(30_000_000 + i, f"{QUERIES[i % len(QUERIES)]} (written {i})", {}) for i in range(2 * 64)]
    searched: list[float] = []

    async def scenario() -> None:
        collection = Collection(settings(root, workers=2, write_threads=2))
        assert collection.settings.write_nice > 0
        await collection.start()
        stop = asyncio.Event()

        async def client(n: int) -> None:
            i = n
            while not stop.is_set():
                await collection.search(Query([QUERIES[i % len(QUERIES)]], 10))
                searched.append(time.monotonic())
                i += 1

        clients = [asyncio.create_task(client(n)) for n in range(16)]
        try:
            while len(searched) < 16:  # the stream is running (a count, not a pause: a loaded machine is slower)
                await asyncio.sleep(0.01)
            t0 = time.monotonic()
            results = [await collection.upsert(docs[i : i + 64]) for i in range(0, len(docs), 64)]
            t1 = time.monotonic()
            assert [r.seq for r in results] == [64, 128]
            during = [t for t in searched if t0 <= t <= t1]
            assert len(during) >= 16, "the search stream stopped while the writes ran"
            assert not any(c.done() for c in clients)  # no search failed
            for d in docs[::37]:
                assert (await collection.search(Query([d.text], 1))).hits[0][0].faiss_id == d.id
        finally:
            stop.set()
            await asyncio.gather(*clients)
            await collection.stop()

    asyncio.run(scenario())
    assert logged(root) == len(docs)


def test_a_timed_out_write_drops_its_remaining_chunks_and_logs_nothing(root: Path) -> None:
    docs = [Document(40_000_000 + i, long_text(i), {}) for i in range(256)]

    async def scenario() -> None:
        collection = Collection(settings(root, request_timeout_s=0.3))
        await collection.start()
        try:
            with pytest.raises(TimedOut):
                await collection.upsert(docs)
            while collection.write_lane.pending:
                await asyncio.sleep(0.01)
            lane = collection.write_lane
            assert lane.dropped > 0 and lane.ran + lane.dropped == len(docs) // 16
            assert len((await collection.search(Query([QUERIES[0]], 3))).hits[0]) == 3
        finally:
            await collection.stop()

    asyncio.run(scenario())
    assert logged(root) == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
def test_write_threads_run_below_the_searches_priority(root: Path) -> None:
    collection = Collection(settings(root, write_nice=7))
    try:
        own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        lane = collection.write_lane.pool.submit(lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        worker = collection.pool.submit(lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        assert (worker.result(), lane.result()) == (own, min(19, own + 7))
        # the commit thread (log append, fsync, overlay apply) and the brought vectors' check run there too
        commit = collection.documents.write_pool.submit(
            lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        check = collection.documents.check_pool.submit(
            lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        assert (commit.result(), check.result()) == (min(19, own + 7), min(19, own + 7))
        # and a swap's candidate (opened, the write log replayed onto it, caught up under the write lock)
        swap = collection.swapper._pool.submit(lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        assert swap.result() == min(19, own + 7)
    finally:
        collection.pool.shutdown()
        collection.swapper.close()
        collection.documents.close()
        collection.write_lane.close()
