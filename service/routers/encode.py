from __future__ import annotations

import time

import numpy as np
from fastapi import APIRouter, Response

from service.auth import READ_COLLECTION
from service.deps import CollectionDep
from service.responses import json_response
from service.schemas.encode import EncodeRequest, EncodeResponse

# collection-scoped: `/encode` and `/collections/{name}/encode` (`service.routers.scoped`)
router = APIRouter(tags=["inference"], dependencies=[READ_COLLECTION])


@router.post("/encode", response_model=EncodeResponse)
async def encode(body: EncodeRequest, collection: CollectionDep) -> Response:
    """Encode 1–64 texts into L2-normalised vectors (the same vectors the index holds)."""
    t0 = time.perf_counter()
    answer = await collection.encode(body.texts)
    # orjson writes the float32 vectors widened to float64: the same digits `tolist()` + json gave, much faster
    return json_response({"vectors": answer.vectors.astype(np.float64), "dim": answer.dim,
                           "took_ms": round((time.perf_counter() - t0) * 1000, 3), "truncated": answer.truncated,
                           "index_version": answer.version})
