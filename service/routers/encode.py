from __future__ import annotations

import time

from fastapi import APIRouter

from service.deps import EngineDep
from service.schemas import EncodeRequest, EncodeResponse

router = APIRouter(tags=["inference"])


@router.post("/encode", response_model=EncodeResponse)
async def encode(body: EncodeRequest, engine: EngineDep) -> EncodeResponse:
    """Encode 1–64 texts into L2-normalised vectors (the same vectors the index holds)."""
    t0 = time.perf_counter()
    answer = await engine.encode(body.texts)
    return EncodeResponse(vectors=answer.vectors.tolist(), dim=answer.dim,
                          took_ms=round((time.perf_counter() - t0) * 1000, 3), truncated=answer.truncated,
                          index_version=answer.version)
