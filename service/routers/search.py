from __future__ import annotations

import time

from fastapi import APIRouter

from service.deps import BatcherDep, StateDep
from service.schemas import Hit, QueryHits, SearchRequest, SearchResponse

router = APIRouter(tags=["inference"])


@router.post("/search", response_model=SearchResponse, response_model_exclude_none=True)
async def search(body: SearchRequest, batcher: BatcherDep, state: StateDep) -> SearchResponse:
    """Top-k nearest questions for one `query` or a batch of `queries`."""
    t0 = time.perf_counter()
    texts = [body.query] if body.query is not None else list(body.queries or [])
    # The engine that answered (leased for the whole call) names the version: a swap mid-request cannot mix them.
    engine, result = await batcher.submit(texts, body.top_k)
    took = (time.perf_counter() - t0) * 1000
    m = state.metrics
    m.encode_seconds.labels("/search").observe(result.encode_ms / 1000)
    m.search_seconds.observe(result.search_ms / 1000)
    m.texts_encoded.labels("/search").inc(len(texts))
    hit_lists = [[Hit(id=i, text=t, score=s) for i, t, s in hits] for hits in result.hits]
    common = {"took_ms": round(took, 3), "encode_ms": round(result.encode_ms, 3),
              "search_ms": round(result.search_ms, 3), "index_version": engine.version}
    if body.query is not None:
        return SearchResponse(hits=hit_lists[0], truncated=result.truncated[0], **common)
    return SearchResponse(results=[QueryHits(query=q, hits=h, truncated=t)
                                   for q, h, t in zip(texts, hit_lists, result.truncated, strict=True)], **common)
