"""`BodyProcess`: a write's large body validated in a child process, so that its parse does not hold this process's
GIL while searches wait for it.

Why: pydantic-core validates a body in Rust without letting go of the GIL, and the vectors' checks that follow
(`numpy.asarray` of nested lists) do the same; for a `PUT /documents` of 128 documents with 384-float vectors that is
a few milliseconds at a time during which no search thread can run a line of Python, whatever its CPU priority
(docs/decisions.md, the ingest bench). In a process of its own, below the searches' CPU priority (`write_nice`), the
parse costs the searches only the CPU the kernel lends it.

What comes back is cheap to take in: an `UpsertRequest`'s documents as their fields with the vectors of all of them
in one float64 array (the values JSON gave, exactly), rebuilt as models without a second validation
(`model_construct`: the child validated them); any other model as it is (a delete's ids). A body the child refuses,
and any failure of the child itself, come back as None: the caller parses the body itself, so that a refusal is
said exactly as in-process (FastAPI's 422) and a broken child never refuses a write.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np
from pydantic import BaseModel, ValidationError

from service.schemas.documents import UpsertRequest, WriteDocument

log = logging.getLogger(__name__)

PARENT_CHECK_S = 0.5
Packed = tuple[list[tuple[Any, str, dict[str, Any]]], np.ndarray, list[int]]


def _start_child(nice: int, parent: int) -> None:
    """The child's whole process below the searches (a fresh process: one thread so far), and gone with the API:
    its task queue's pipe stays open in the child itself, so a parent killed with SIGKILL would leave it waiting."""
    try:
        os.nice(nice)
    except OSError:
        pass
    threading.Thread(target=_exit_with, args=(parent,), name="parent-watch", daemon=True).start()


def _exit_with(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_S)
    os._exit(0)


def _ready() -> None:
    """A first task, so that the child is spawned (and has imported the schemas) before the first write."""


def _validate(raw: bytes, model: type[BaseModel]) -> Packed | BaseModel | None:
    """In the child: the body validated as `model`, packed (`UpsertRequest`) or as it is; None when refused."""
    try:
        body = model.model_validate_json(raw)
    except ValidationError:
        return None
    if not isinstance(body, UpsertRequest):
        return body
    docs = body.documents
    at = [i for i, d in enumerate(docs) if d.vector is not None]
    lengths = {len(docs[i].vector) for i in at}  # type: ignore[arg-type]
    if len(lengths) > 1:  # vectors of several lengths: refused later, per document, from the model as it is
        return body
    vectors = np.array([docs[i].vector for i in at], dtype=np.float64).reshape(len(at), lengths.pop() if at else 0)
    return [(d.id, d.text, d.metadata) for d in docs], vectors, at


def _unpack(packed: Packed | BaseModel) -> BaseModel:
    if isinstance(packed, BaseModel):
        return packed
    fields, vectors, at = packed
    row = dict(zip(at, vectors, strict=True))
    return UpsertRequest.model_construct(documents=[
        WriteDocument.model_construct(id=i, text=t, metadata=m, vector=row.get(k))
        for k, (i, t, m) in enumerate(fields)])


class BodyProcess:
    """One child process validating large bodies in turn (a process more would take a core more from the searches
    on a small machine); started at once, so that the first write does not wait for it."""

    def __init__(self, nice: int) -> None:
        self._nice = nice
        self._pool: ProcessPoolExecutor | None = None
        self.validated = 0  # bodies the child validated and handed back
        self._start()

    def _start(self) -> None:
        # spawn: the API's process runs threads, which a fork would copy mid-flight
        self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=_start_child, initargs=(self._nice, os.getpid()))
        self._pool.submit(_ready)

    async def validate(self, raw: bytes, model: type[BaseModel]) -> BaseModel | None:
        """`raw` validated as `model` in the child; None: refused, or the child failed (parse it here instead)."""
        pool = self._pool
        if pool is None:
            return None
        try:
            packed = await asyncio.wrap_future(pool.submit(_validate, raw, model))
        except Exception as exc:  # noqa: BLE001 (a dead or broken child: this body is parsed in-process)
            log.warning("the body-parsing process failed (%s: %s); parsing in-process, and starting it again",
                        type(exc).__name__, exc)
            self.close()
            self._start()
            return None
        if packed is None:
            return None
        self.validated += 1
        # the models rebuilt on a thread: a ms of Python for 128 documents that the event loop need not hold
        return await asyncio.to_thread(_unpack, packed)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
