"""Sharded serving on Ray Serve: one deployment per shard of a `--shards N` index version, and an ingress that
speaks the single-process service's HTTP API (`/search`, `/encode`, `/health`, `/ready`, same request and
response models).

The ingress encodes queries with `@serve.batch` (concurrent requests share one ONNX call), sends the vectors to
every shard in parallel, and merges the top k by score. Every shard holds the same trained coarse quantizer,
so each probes the same `nprobe` lists and the merge equals a search of the merged index. Texts come from the
version's `store.sqlite`. Paths must be visible to every node at the same place (a shared file system).

Not (yet) in this mode: API keys, in-flight caps/timeouts, `/metrics` and hot swaps (redeploy to change
version; Ray Serve rolls replicas over).
"""

# No `from __future__ import annotations`: Serve's class-based FastAPI views need real annotations to see
# `body: SearchRequest` as a JSON body.

import asyncio
import logging
import time
from pathlib import Path

import numpy as np
from fastapi import FastAPI
from ray import serve

from indexer.runtime.encoder import OnnxEncoder
from indexer.runtime.faiss_index import read_index, search, set_nprobe, set_threads
from indexer.runtime.layout import IndexRoot
from indexer.runtime.manifest import Manifest
from indexer.runtime.store import STORE, Store
from service.errors import install_error_handlers
from service.schemas import EncodeRequest, EncodeResponse, Hit, QueryHits, Ready, SearchRequest, SearchResponse

log = logging.getLogger(__name__)

app = FastAPI(title="Strata (sharded)", version="0.1.0",
              description="Semantic search over an ONNX sentence encoder and a sharded FAISS index on Ray Serve.")
install_error_handlers(app)  # the single-process service's 422s: no echoed input (NaN, lone surrogates)


@serve.deployment(ray_actor_options={"num_cpus": 0.5})
class ShardSearcher:
    """One shard file in memory; answers (scores, ids) for a batch of query vectors."""

    def __init__(self, path: str, nprobe: int, threads: int = 1) -> None:
        self.threads = threads
        self.index = read_index(path)
        set_nprobe(self.index, nprobe)  # clamped to nlist like the single-process service
        self.path = path

    def search(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        set_threads(self.threads)  # per thread in OpenMP, and Serve may call from any thread
        return search(self.index, vectors, k)

    def ntotal(self) -> int:
        return int(self.index.ntotal)


def merge_top_k(parts: list[tuple[np.ndarray, np.ndarray]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per query, the k best (score, id) over all shards' answers (ids -1 = no hit sort last)."""
    scores = np.concatenate([s for s, _ in parts], axis=1)
    ids = np.concatenate([i for _, i in parts], axis=1)
    scores = np.where(ids >= 0, scores, -np.inf)
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, order, 1), np.take_along_axis(ids, order, 1)


@serve.deployment(ray_actor_options={"num_cpus": 0.5})
@serve.ingress(app)
class Ingress:
    def __init__(self, version_dir: str, shards: list, threads: int = 1) -> None:  # list[DeploymentHandle]
        folder = Path(version_dir)
        self.manifest = Manifest.load(folder)
        self.encoder = OnnxEncoder(self.manifest.model.dir, threads=threads, verify_sha256=True)
        self.store = Store(folder / STORE)
        self.shards = shards

    @serve.batch(max_batch_size=64, batch_wait_timeout_s=0.005)
    async def _encode(self, texts: list[str]) -> list[tuple[np.ndarray, bool]]:
        # One ONNX call for the texts of all requests that arrived within the wait window.
        vecs, flags = await asyncio.to_thread(self.encoder.encode_with_flags, texts, len(texts))
        return list(zip(vecs, flags, strict=True))

    async def encode_texts(self, texts: list[str]) -> tuple[np.ndarray, list[bool]]:
        pairs = await asyncio.gather(*(self._encode(t) for t in texts))
        return np.stack([v for v, _ in pairs]), [f for _, f in pairs]

    @app.post("/search", response_model=SearchResponse, response_model_exclude_none=True)
    async def search(self, body: SearchRequest) -> SearchResponse:
        t0 = time.perf_counter()
        texts = [body.query] if body.query is not None else list(body.queries or [])
        vecs, truncated = await self.encode_texts(texts)
        t1 = time.perf_counter()
        parts = await asyncio.gather(*(h.search.remote(vecs, body.top_k) for h in self.shards))
        scores, ids = merge_top_k(list(parts), body.top_k)
        names = self.store.texts(ids.ravel().tolist())
        hit_lists = [[Hit(id=int(i), text=names.get(int(i), ""), score=float(s))
                      for s, i in zip(srow, irow, strict=True) if i >= 0]
                     for srow, irow in zip(scores, ids, strict=True)]
        t2 = time.perf_counter()
        common = {"took_ms": round((t2 - t0) * 1000, 3), "encode_ms": round((t1 - t0) * 1000, 3),
                  "search_ms": round((t2 - t1) * 1000, 3), "index_version": self.manifest.version}
        if body.query is not None:
            return SearchResponse(hits=hit_lists[0], truncated=truncated[0], **common)
        return SearchResponse(results=[QueryHits(query=q, hits=h, truncated=t)
                                       for q, h, t in zip(texts, hit_lists, truncated, strict=True)], **common)

    @app.post("/encode", response_model=EncodeResponse)
    async def encode(self, body: EncodeRequest) -> EncodeResponse:
        t0 = time.perf_counter()
        vecs, truncated = await self.encode_texts(list(body.texts))
        return EncodeResponse(vectors=vecs.tolist(), dim=self.encoder.dim, truncated=truncated,
                              took_ms=round((time.perf_counter() - t0) * 1000, 3),
                              index_version=self.manifest.version)

    @app.get("/health")
    async def health(self) -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/ready", response_model=Ready, response_model_exclude_none=True)
    async def ready(self) -> Ready:
        return Ready(ready=True, index_version=self.manifest.version, index_size=self.manifest.index.ntotal,
                     model=str(self.encoder.model_dir), pooling=self.encoder.meta.pooling)


def sharded_app(index_root: Path, *, replicas: int = 1, threads: int = 1) -> serve.Application:
    """The Serve application for `current` of `index_root`, which must be a sharded version."""
    folder = IndexRoot(index_root).current_dir()
    manifest = Manifest.load(folder)
    if not manifest.index.shards:
        raise ValueError(f"{folder} is not sharded (build it with `indexer build --engine ray --shards N`)")
    shard_apps = [ShardSearcher.options(name=f"shard-{i}", num_replicas=replicas)
                  .bind(str(folder / s.file), manifest.index.nprobe, threads)
                  for i, s in enumerate(manifest.index.shards)]
    return Ingress.options(num_replicas=replicas).bind(str(folder), shard_apps, threads)


def run_sharded(index_root: Path, *, host: str, port: int, address: str | None, replicas: int,
                threads: int | None, blocking: bool = True) -> None:
    """Join (or start) Ray, start Serve's HTTP proxy on host:port and deploy the sharded application.

    Blocking: serve until SIGINT or SIGTERM, then delete the application and stop Serve (its controller and
    proxies); a Ray instance this call started is shut down with it, a cluster it joined is left running."""
    import os
    import signal
    import threading

    import ray

    started_ray = False
    if not ray.is_initialized():
        address = address or os.environ.get("RAY_ADDRESS") or None
        ray.init(address=address)
        started_ray = address is None
    stop = threading.Event()
    previous = {}
    if blocking:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda signum, frame: stop.set())
    try:
        serve.start(http_options={"host": host, "port": port})
        serve.run(sharded_app(index_root, replicas=replicas, threads=threads or 1), name="strata",
                  route_prefix="/", blocking=False)
        if not blocking:
            return
        log.info("serving %s on http://%s:%d (Ray Serve); SIGINT/SIGTERM stops", index_root, host, port)
        while not stop.wait(1.0):
            pass
        log.info("stopping: deleting the Serve application and Serve itself")
    except BaseException:
        blocking = True  # failed to start: clean up what was started
        raise
    finally:
        if blocking:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            try:
                serve.shutdown()
            finally:
                if started_ray:
                    ray.shutdown()
