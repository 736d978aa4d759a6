from __future__ import annotations

import time

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from service.deps import EngineDep, StateDep
from service.schemas import EncodeRequest, EncodeResponse

router = APIRouter(tags=["inference"])


@router.post("/encode", response_model=EncodeResponse)
async def encode(body: EncodeRequest, engine: EngineDep, state: StateDep) -> EncodeResponse:
    """Encode 1–64 texts into L2-normalised vectors (the same vectors the index holds)."""
    t0 = time.perf_counter()
    # ONNX Runtime releases the GIL; running it in the thread pool keeps the event loop answering.
    vecs, truncated = await run_in_threadpool(engine.encode, body.texts)
    took = time.perf_counter() - t0
    state.metrics.encode_seconds.labels("/encode").observe(took)
    state.metrics.texts_encoded.labels("/encode").inc(len(body.texts))
    return EncodeResponse(vectors=vecs.tolist(), dim=engine.encoder.dim, took_ms=round(took * 1000, 3),
                          truncated=truncated)
