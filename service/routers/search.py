from __future__ import annotations

import time

from fastapi import APIRouter, Response

from service.deps import EngineDep, StatsDep
from service.responses import json_response
from service.schemas import SearchRequest, SearchResponse

router = APIRouter(tags=["inference"])


@router.post("/search", response_model=SearchResponse, response_model_exclude_none=True)
async def search(body: SearchRequest, engine: EngineDep, stats: StatsDep) -> Response:
    """Top-k nearest documents for one `query` or a batch of `queries`, among those matching `filter` if given."""
    t0 = time.perf_counter()
    texts = [body.query] if body.query is not None else list(body.queries or [])
    # one version answers all of it, and names itself
    answer = await engine.search(texts, body.top_k, body.filter, body.knobs)
    took = (time.perf_counter() - t0) * 1000
    stats.record(took, answer.encode_ms, answer.search_ms, queries=len(texts))  # GET /stats
    # plain JSON-ready values, serialised once (`service.responses`); `SearchResponse` documents the shape
    hit_lists = [[{"id": h.ext_id, "text": h.text, "score": h.score, "metadata": h.metadata} for h in hits]
                 for hits in answer.hits]
    out: dict[str, object] = {"took_ms": round(took, 3), "encode_ms": round(answer.encode_ms, 3),
                              "search_ms": round(answer.search_ms, 3), "index_version": answer.version}
    if body.query is not None:
        out |= {"hits": hit_lists[0], "truncated": answer.truncated[0]}
    else:
        out["results"] = [{"query": q, "hits": h, "truncated": t}
                          for q, h, t in zip(texts, hit_lists, answer.truncated, strict=True)]
    return json_response(out)
