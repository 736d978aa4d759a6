from __future__ import annotations

import time

from fastapi import APIRouter

from service.deps import BatcherDep, StateDep
from service.schemas import EncodeRequest, EncodeResponse

router = APIRouter(tags=["inference"])


@router.post("/encode", response_model=EncodeResponse)
async def encode(body: EncodeRequest, batcher: BatcherDep, state: StateDep) -> EncodeResponse:
    """Encode 1–64 texts into L2-normalised vectors (the same vectors the index holds)."""
    t0 = time.perf_counter()
    engine, result = await batcher.submit(body.texts, None)
    vecs, truncated = result.vectors, result.truncated
    assert vecs is not None  # encode-only jobs always carry their vectors
    took = time.perf_counter() - t0
    state.metrics.encode_seconds.labels("/encode").observe(took)
    state.metrics.texts_encoded.labels("/encode").inc(len(body.texts))
    return EncodeResponse(vectors=vecs.tolist(), dim=engine.encoder.dim, took_ms=round(took * 1000, 3),
                          truncated=truncated, index_version=engine.version)
