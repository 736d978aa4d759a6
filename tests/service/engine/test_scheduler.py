"""The shared scheduler with real collections (real ONNX encoders, FAISS indexes built by the indexer): collections
built with one encoder share one loaded encoder and one micro-batch, and each is answered from its own index, as
it is when searched alone; a collection with another encoder is batched apart."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from indexer.build import BuildConfig, build
from indexer.runtime.query import Query
from service.engine.metrics import Metrics
from service.engine.registry import Collections
from service.settings import Settings

TEXTS = {
    "alpha": [f"how do I learn {w} quickly" for w in ("python", "guitar", "cooking", "chess", "french", "piano")],
    "beta": [f"where is the best {w} in india" for w in ("road", "food", "sea", "horse", "car", "school")],
    "gamma": [f"dog cat {w} sky blue" for w in ("sea", "green", "road", "car", "horse", "food")],
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory, minilm_mean: Path, tiny_exported: Path,
           tiny_checkpoint: Path) -> Path:
    """alpha and beta: MiniLM; gamma: the tiny BERT with CLS pooling; delta: the tiny BERT with mean pooling (another
    encoder of gamma's dimension)."""
    from models.export import export_encoder

    d = tmp_path_factory.mktemp("scheduler-collections")
    tiny_mean = d.parent / "tiny-mean"
    export_encoder(tiny_checkpoint, tiny_mean, pooling="mean")
    models = {"alpha": minilm_mean, "beta": minilm_mean, "gamma": tiny_exported, "delta": tiny_mean}
    for name, texts in (TEXTS | {"delta": TEXTS["gamma"]}).items():
        data = d.parent / f"{name}.jsonl"
        data.write_text("".join(json.dumps({"id": f"{name}-{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
        build(BuildConfig(model_dir=models[name], data=str(data), root=d / name, index="flat", threads=1,
                          evaluate=False, default_mode="dense"))
    return d


def batch_sizes(metrics: Metrics) -> list[float]:
    """Every micro-batch's texts, from the histogram: the upper bound of the bucket each fell in."""
    sizes: list[float] = []
    below = 0.0
    for family in metrics.registry.collect():
        if family.name != "strata_batch_texts":
            continue
        for s in family.samples:
            if s.name.endswith("_bucket") and s.labels["le"] != "+Inf":
                sizes += [float(s.labels["le"])] * int(s.value - below)
                below = s.value
    return sizes


def test_collections_on_one_encoder_share_its_session_and_its_batches(folder: Path) -> None:
    settings = Settings(collections_dir=folder, workers=1, threads=1, watch_interval_s=0, micro_batching=True)

    async def scenario() -> None:
        metrics = Metrics()
        collections = Collections(settings, metrics)
        await collections.start()
        try:
            a, b, g = (collections.get(n) for n in ("alpha", "beta", "gamma"))
            assert collections.scheduler.encoders.loads == 3  # MiniLM once for alpha and beta, two tiny BERTs
            assert a.leases.current.encoder is b.leases.current.encoder
            assert g.leases.current.encoder is not a.leases.current.encoder
            queries = [(name, text) for name in TEXTS for text in TEXTS[name][:4]]
            alone = [await collections.get(n).search(Query([q], 3)) for n, q in queries]  # one request at a time
            before = len(batch_sizes(metrics))
            together = await asyncio.gather(*(collections.get(n).search(Query([q], 3)) for n, q in queries))
            for (name, query), x, y in zip(queries, alone, together, strict=True):
                assert [h.ext_id for h in x.hits[0]] == [h.ext_id for h in y.hits[0]], (name, query)
                assert all(h.ext_id.startswith(name) for h in y.hits[0])
                np.testing.assert_allclose([h.score for h in x.hits[0]], [h.score for h in y.hits[0]], atol=1e-5)
            concurrent = batch_sizes(metrics)[before:]
            # a run held more texts than any one collection sent (4): alpha's and beta's shared it
            assert max(concurrent) > 4, concurrent
        finally:
            await collections.stop()

    asyncio.run(scenario())


def test_two_encoders_of_one_dimension_get_distinct_model_ids(folder: Path) -> None:
    """/v1 ids: with no default collection every encoder is `strata-<dim>@<first collection>`; gamma's and delta's
    encoders (both 32-dimensional) are two models, each resolved to its own collection, and `strata-<dim>@<name>`
    names a collection's encoder."""
    from service.engine.model_catalog import listed, resolve

    settings = Settings(collections_dir=folder, workers=1, threads=1, watch_interval_s=0)

    async def scenario() -> None:
        collections = Collections(settings, Metrics())
        await collections.start()
        try:
            assert collections.default_name() is None  # four collections, none named default
            ids = {m.model.name: m.collections for m in listed(collections)}
            dim = collections.get("gamma").served_model().dim
            assert ids == {"strata-384@alpha": ["alpha", "beta"], f"strata-{dim}@delta": ["delta"],
                           f"strata-{dim}@gamma": ["gamma"]}
            everyone = lambda name: True  # noqa: E731
            assert resolve(collections, f"strata-{dim}@delta", everyone)[0].name == "delta"
            assert resolve(collections, f"strata-{dim}@gamma", everyone)[0].name == "gamma"
            assert resolve(collections, "strata-384@beta", everyone)[0].name == "beta"
            vectors = {n: (await resolve(collections, f"strata-{dim}@{n}", everyone)[0].encode(["dog cat"])).vectors
                       for n in ("gamma", "delta")}
            assert not np.allclose(vectors["gamma"], vectors["delta"])  # two encoders, two kinds of vectors
        finally:
            await collections.stop()

    asyncio.run(scenario())


def test_a_queued_search_whose_request_is_cancelled_never_runs(quora_root: Path) -> None:
    """A search waiting for a worker whose request is cancelled (its client gone, its timeout) is dropped from the
    queue: its batch never runs, and the in-flight count comes back to 0. The search in the worker is answered."""
    import threading

    from service.engine import Collection

    async def scenario() -> None:
        collection = Collection(Settings(index_root=quora_root, workers=1, threads=1, watch_interval_s=0,
                                         write_threads=1, request_timeout_s=300))
        await collection.start(signals=False)
        hold = threading.Event()
        try:
            blocker = collection.pool.submit(hold.wait)  # the one inference worker is busy until `hold` is set
            first = asyncio.ensure_future(collection.search(Query(["How do I learn Python?"], 5)))
            second = asyncio.ensure_future(collection.search(Query(["Why is the sky blue?"], 5)))
            batchers = collection.scheduler.batchers
            while not batchers or not next(iter(batchers.values())).queue:
                await asyncio.sleep(0.01)  # the first one's batch is started (behind the blocker), the second queued
            batcher = next(iter(batchers.values()))
            assert collection.in_flight == 2
            second.cancel()
            with pytest.raises(asyncio.CancelledError):
                await second
            hold.set()
            answer = await first
            assert blocker.result() is True and len(answer.hits[0]) == 5
            while batcher.queue or batcher.running:
                await asyncio.sleep(0.01)
            assert batch_sizes(collection.metrics) == [1.0], "the cancelled search ran a batch"
            assert collection.in_flight == 0
        finally:
            hold.set()
            await collection.stop()

    asyncio.run(scenario())


def test_writes_take_only_their_share_of_admission_and_searches_keep_theirs(tmp_path: Path,
                                                                            tiny_exported: Path) -> None:
    """Writes held in flight (their encoding gated by the test) fill the writes' share (`max_write_in_flight`): the
    next write is a 429 naming writes, and every one of `max_in_flight` concurrent searches is still admitted and
    answered — writes never take a search's slot (they did: the cap was one count for both) — and so is a read by
    id (`reading`: admitted like a search; it was refused while writes alone held `max_in_flight`)."""
    from indexer.runtime.writes import Document
    from service.engine.errors import Overloaded
    from service.engine.reading import get_documents

    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps({"id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(TEXTS["gamma"])))
    build(BuildConfig(model_dir=tiny_exported, data=str(data), root=tmp_path / "c" / "only", index="flat", threads=1,
                      evaluate=False, default_mode="dense"))
    settings = Settings(collections_dir=tmp_path / "c", workers=2, threads=1, watch_interval_s=0, max_in_flight=2,
                        max_write_in_flight=2)

    async def scenario() -> None:
        collections = Collections(settings, Metrics())
        await collections.start()
        try:
            c, scheduler = collections.get("only"), collections.scheduler
            gate, lane = asyncio.Event(), scheduler.write_lane
            encode = lane.encode

            async def held(texts: list[str], leases: object) -> object:
                await gate.wait()
                return await encode(texts, leases)  # type: ignore[arg-type]

            lane.encode = held  # type: ignore[method-assign]
            writes = [asyncio.ensure_future(c.upsert([Document(f"w{i}", f"dog cat written {i}", {})]))
                      for i in range(2)]
            while scheduler.in_flight < 2:
                await asyncio.sleep(0.01)
            with pytest.raises(Overloaded, match="2 writes in flight"):
                await asyncio.wait_for(c.upsert([Document("w9", "one write too many", {})]), 20)  # (admitted: held)
            answers = await asyncio.gather(*(c.search(Query([f"dog cat sky {i}"], 3)) for i in range(2)),
                                           return_exceptions=True)
            assert all(not isinstance(a, BaseException) and a.hits[0] for a in answers), answers
            assert [d.id for d in (await get_documents(c, ["d0"]))[0]] == ["d0"]
            gate.set()
            assert sorted(r.seq for r in await asyncio.gather(*writes)) == [1, 2]
            assert scheduler.in_flight == 0
        finally:
            await collections.stop()

    asyncio.run(scenario())
