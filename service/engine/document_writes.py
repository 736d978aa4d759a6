"""A collection's writes of documents: `upsert` and `delete`, each encoded on the write lane (through the
scheduler's admission and timeout, not micro-batched with searches), then logged durably and applied on a thread of
the collection's own (`indexer.runtime.writes`: an fsync never holds an inference worker) — all before they return.
That thread, and the one that checks the vectors a write brings, run `nice` levels below the searches (the
settings' `write_nice`, as the write lane's encoding), so that a stream of writes does not take the cores searches
need; they still hold the overlay's lock only briefly (`indexer.runtime.overlay`).

A version built with passages (`indexer build --chunk`) gets each written document split as the build split it:
its passages encoded and written, and its earlier passages past the new count deleted, in one log transaction.
Its write's counts (`WriteResult.applied`) count documents, as any version's do; what the write did to the passage
rows is `WriteResult.passages`."""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

from indexer.runtime.faiss.devices import set_threads
from indexer.runtime.layout import IndexRoot
from indexer.runtime.overlay import Applied
from indexer.runtime.passages import old_count, passage_rows, stale_ids
from indexer.runtime.priority import lower_thread
from indexer.runtime.query import Query
from indexer.runtime.vectors import VectorError, check_vector, check_vectors
from indexer.runtime.writelog import Delete, ExtId, Upsert
from indexer.runtime.writes import Document, WriteResult, Writes, WritesUnavailable
from service.engine.errors import BadVector, NotReady, WriteRefused
from service.engine.leases import Leases
from service.engine.metrics import CollectionMetrics, Metrics
from service.engine.searcher import Searcher, SearchResult

# the scheduler's call for a write's encoding (`Collection._call`)
EncodeCall = Callable[..., Awaitable[tuple[Searcher, SearchResult]]]


class DocumentWrites:
    """One collection's writes: its write log and overlay (`writes`), the one thread its commits run on."""

    def __init__(self, root: Path, name: str, threads: int, leases: Leases, metrics: Metrics,
                 collection_metrics: CollectionMetrics, call: EncodeCall, not_ready_reason: Callable[[], str],
                 nice: int = 0) -> None:
        self.leases, self.metrics, self.collection_metrics = leases, metrics, collection_metrics
        self._call, self.not_ready_reason = call, not_ready_reason
        self.root, self.name = root, name
        self.writes = Writes(root)
        # one thread: writes are serialised anyway (one log, one overlay), and their fsyncs wait here
        self.write_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"writes-{name}",
                                             initializer=_write_thread, initargs=(threads, nice))
        self.check_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"write-check-{name}",
                                             initializer=_write_thread, initargs=(threads, nice))

    def _served(self) -> Searcher:
        """The served version, which takes the write; without one, `WriteRefused` (409) when the collection has no
        version at all (nothing to write into until one is created or built), else `NotReady` (503: loading, or
        its version was refused)."""
        searcher = self.leases.current
        if searcher is not None:
            return searcher
        if IndexRoot(self.root).current_version() is None:
            raise WriteRefused(f"collection {self.name!r} has no version to write into ({self.root} holds none): "
                               f"create it with POST /collections (an empty collection that takes writes), or build "
                               f"one with `indexer build --root {self.root}`")
        raise NotReady(self.not_ready_reason())

    def close(self) -> None:
        self.write_pool.shutdown(wait=True)
        self.check_pool.shutdown(wait=True)
        self.writes.close()

    async def upsert(self, docs: list[Document]) -> WriteResult:
        """Write documents (an id already served is replaced): encoded with the served encoder, logged durably,
        then searchable — all before this returns. Raises WriteRefused / WritesUnsupported / WritesUnavailable."""
        searcher = self._served()
        Writes.check(searcher, [d.id for d in docs], any(d.metadata for d in docs))
        if searcher.splitter() is not None:
            return await self._upsert_passages(searcher, docs)
        # documents that bring their vector: checked before anything is encoded or written, off the event loop
        brought = await asyncio.get_running_loop().run_in_executor(
            self.check_pool, _check_brought, docs, searcher.encoder.dim
        ) if any(d.vector is not None for d in docs) else {}
        encoded_by, vectors = searcher, list(brought.values())
        if len(brought) < len(docs):
            encoded_by, r = await self._call(Query([d.text for d in docs if d.vector is None], None),
                                              write=True)
            assert r.vectors is not None
            self.metrics.encode_seconds.labels("/documents").observe(r.encode_ms / 1000)
            self.metrics.texts_encoded.labels("/documents").inc(len(docs) - len(brought))
            encoded = iter(r.vectors)
            vectors = [brought[i] if i in brought else next(encoded) for i in range(len(docs))]
            if brought and encoded_by.encoder.dim != searcher.encoder.dim:  # a swap to another space meanwhile
                raise BadVector(f"the served encoder changed to dimension {encoded_by.encoder.dim} during the write",
                                ["documents", next(iter(brought)), "vector"])
        sha = encoded_by.encoder.meta.onnx_sha256
        return await self._commit([Upsert(d.id, d.text, d.metadata, v, sha)
                                   for d, v in zip(docs, vectors, strict=True)], "upsert")

    async def delete(self, ids: list[ExtId]) -> WriteResult:
        """Delete documents by id, durably; a deleted id stays deleted in every version served later (also one
        built from source data that still holds it) until it is written again."""
        searcher = self._served()
        Writes.check(searcher, [], False)
        if searcher.splitter() is not None:
            return await self._delete_passages(ids)
        return await self._commit([Delete(i) for i in ids], "delete")

    async def _delete_passages(self, ids: list[ExtId]) -> WriteResult:
        """Every passage of each document, counted under the write lock (at least passage 0 is logged: the id
        stays deleted in a later version that holds it); `applied` counts the documents."""
        counted = Applied()

        def ops(served: Searcher) -> list[Upsert | Delete]:
            counted.deleted = counted.missing = 0
            out: list[Upsert | Delete] = []
            now: dict[ExtId, int] = {}  # an id given twice: gone after its first delete
            for i in ids:
                had = now[i] if i in now else _served_count(served, i)
                out += [Delete(p) for p in stale_ids(i, 0, max(1, had))]
                now[i] = 0
                counted.deleted, counted.missing = counted.deleted + (had > 0), counted.missing + (had == 0)
            return out

        return _by_documents(await self._commit(ops, "delete"), counted)

    async def _upsert_passages(self, searcher: Searcher, docs: list[Document]) -> WriteResult:
        """A version of passages: each document split as the build split it (`Searcher.splitter`), its passages
        encoded and written, and its earlier passages past the new count deleted — one log transaction, so a
        search sees all of a document's old passages or all of its new ones. A brought vector is refused: it
        would stand for the whole document, not for one passage."""
        for i, d in enumerate(docs):
            if d.vector is not None:
                raise BadVector(f"document {d.id!r}: version {searcher.version} indexes passages (indexer build "
                                f"--chunk): a vector stands for a whole document; send the text alone",
                                ["documents", i, "vector"])
        splitter = searcher.splitter()
        assert splitter is not None
        rows = [(d.id, passage_rows(d.id, d.text, d.metadata, ps))
                for d, ps in zip(docs, splitter.split_many([d.text for d in docs]), strict=True)]
        texts = [t for _, rs in rows for _, t, _ in rs]
        vectors: list[np.ndarray] = []
        encoded_by = searcher
        if texts:
            encoded_by, r = await self._call(Query(texts, None), write=True)
            assert r.vectors is not None
            self.metrics.encode_seconds.labels("/documents").observe(r.encode_ms / 1000)
            self.metrics.texts_encoded.labels("/documents").inc(len(texts))
            vectors = list(r.vectors)
        sha, vecs = encoded_by.encoder.meta.onnx_sha256, iter(vectors)
        upserts = [(doc, [Upsert(rid, text, meta, next(vecs), sha) for rid, text, meta in rs]) for doc, rs in rows]
        counted = Applied()  # counted under the write lock, by `ops`

        def ops(served: Searcher) -> list[Upsert | Delete]:
            # under the write lock: the passages a document has now (a concurrent write's included) are the ones
            # past the new count to delete, so the write acknowledged last leaves exactly its own passages
            if _split_as(served) != _split_as(searcher):
                raise WritesUnavailable(f"the served version changed from {searcher.version} to {served.version} "
                                        f"(another passages setting) during the write: send it again")
            counted.created = counted.replaced = 0
            out: list[Upsert | Delete] = []
            now: dict[ExtId, int] = {}  # an id given twice: the later one's passages replace the earlier one's
            for doc, ups in upserts:
                had = now[doc] if doc in now else _served_count(served, doc)
                out += ups
                out += [Delete(p) for p in stale_ids(doc, len(ups), had)]
                now[doc] = len(ups)
                counted.created, counted.replaced = counted.created + (had == 0), counted.replaced + (had > 0)
            return out

        return _by_documents(await self._commit(ops, "upsert"), counted)

    async def _commit(self, ops: list[Upsert | Delete] | Callable[[Searcher], list[Upsert | Delete]],
                      op: str) -> WriteResult:
        t0 = time.perf_counter()
        ctx = contextvars.copy_context()
        future = self.write_pool.submit(ctx.run, self.writes.commit, lambda: self.leases.current, ops)
        # shielded: once logged, a write is applied whatever happens to the request that sent it
        result = await asyncio.shield(asyncio.wrap_future(future))
        metrics = self.metrics
        metrics.write_seconds.labels(op).observe(time.perf_counter() - t0)
        a = result.applied
        n = a.created + a.replaced + a.deleted + a.missing if callable(ops) else len(ops)  # entries logged
        metrics.writes.labels(op).inc(n)
        self.collection_metrics.wrote(op, n, result.seq, result.size)
        return result


def _write_thread(threads: int, nice: int) -> None:
    set_threads(threads)
    lower_thread(nice)


def _check_brought(docs: list[Document], dim: int) -> dict[int, np.ndarray]:
    """The brought vectors by document index, normalised: checked as one array (one numpy pass for a whole write),
    and only when that refuses one, document by document for the first refused and its reason (`BadVector`)."""
    at = [i for i, d in enumerate(docs) if d.vector is not None]
    if all(len(docs[i].vector) == dim for i in at):  # type: ignore[arg-type]
        try:
            return dict(zip(at, check_vectors([docs[i].vector for i in at], dim), strict=True))  # type: ignore[misc]
        except VectorError:
            pass
    out = {}
    for i in at:
        try:
            out[i] = check_vector(docs[i].vector, dim)  # type: ignore[arg-type]
        except VectorError as exc:
            raise BadVector(f"document {docs[i].id!r}: {exc}", ["documents", i, "vector"]) from None
    return out


def _by_documents(result: WriteResult, docs: Applied) -> WriteResult:
    """A version of passages' write result: `applied` counts documents, `passages` the passage rows."""
    return replace(result, applied=docs, passages=result.applied)


def _served_count(served: Searcher, doc: ExtId) -> int:
    """How many passages the served version (its writes included) holds for `doc` now."""
    return old_count(doc, served.index.live_metadata)  # type: ignore[attr-defined]  # writes are served: a LiveIndex


def _split_as(searcher: Searcher) -> tuple[int | None, int | None] | None:
    """The chunk and overlap a served version's writes are split with (None: documents whole)."""
    c = searcher.manifest.chunking()
    return None if c is None else (c.chunk, c.overlap)
