from __future__ import annotations

import time
from dataclasses import asdict, fields

from fastapi import APIRouter, Request, Response

from service.auth import READ_COLLECTION
from service.deps import collection_of, collection_stats
from service.engine import Collection, Hit, Query, Stages
from service.lean_route import LeanRoute
from service.responses import json_response
from service.schemas.search import SearchRequest, SearchResponse
from service.stats import LiveStats

# collection-scoped: `/search` and `/collections/{name}/search` (`service.routers.scoped`); the hot route: see
# `service.lean_route`
router = APIRouter(tags=["inference"], route_class=LeanRoute, dependencies=[READ_COLLECTION])
STAGES = tuple(f.name for f in fields(Stages))  # the answer's `stages`, in order


@router.post("/search", response_model=SearchResponse, response_model_exclude_none=True)
async def search(body: SearchRequest, request: Request) -> Response:
    """Top-k documents for one `query` or a batch of `queries` by `mode` (dense, lexical or hybrid), among those
    matching `filter` if given."""
    # a lean route runs no dependency: the collection comes from the same function `service.deps` wraps
    collection = collection_of(request)
    return await run_search(body, collection, [request.app.state.stats, collection_stats(request, collection.name)])


async def run_search(body: SearchRequest, collection: Collection, stats: list[LiveStats]) -> Response:
    """The engine's answer as the response body; the timings are recorded in each of `stats` (the app's windows,
    and the collection's)."""
    t0 = time.perf_counter()
    if body.vector is not None:  # its text, if any, is BM25's (hybrid); nothing is encoded
        texts = [body.query or ""]
    else:
        texts = [body.query] if body.query is not None else list(body.queries or [])
    # the request's fusion over the collection's defaults (collection.json); `k` alone means rrf, `alpha` alone convex
    fusion = collection.config.fusion_for(body.fusion, body.k, body.alpha)
    # top_k left out: the default, or the collection's max_top_k when lower (a top_k given is checked against it)
    top_k = body.top_k if "top_k" in body.model_fields_set else collection.config.top_k_for(body.top_k)
    # one version answers all of it, and names itself
    answer = await collection.search(Query(texts, top_k, body.filter, body.search_params or None, body.mode,
                                           fusion, passages=body.passages, snippets=body.snippets), body.vector)
    took = (time.perf_counter() - t0) * 1000
    for windows in stats:  # GET /stats
        windows.record(took, answer.encode_ms, answer.search_ms, queries=len(texts), mode=answer.mode)
    # plain JSON-ready values, serialised once (`service.responses`); `SearchResponse` documents the shape
    hit_lists = [[_hit(h) for h in hits] for hits in answer.hits]
    out: dict[str, object] = {"took_ms": round(took, 3), "encode_ms": round(answer.encode_ms, 3),
                              "search_ms": round(answer.search_ms, 3), "index_version": answer.version,
                              "mode": answer.mode, "stages": {k: round(getattr(answer.stages, k), 3) for k in STAGES}}
    if body.query is not None or body.vector is not None:
        out |= {"hits": hit_lists[0], "truncated": answer.truncated[0]}
    else:
        out["results"] = [{"query": q, "hits": h, "truncated": t}
                          for q, h, t in zip(texts, hit_lists, answer.truncated, strict=True)]
    return json_response(out)


def _hit(h: Hit) -> dict[str, object]:
    out: dict[str, object] = {"id": h.ext_id, "text": h.text, "score": h.score, "metadata": h.metadata}
    if h.passage is not None:
        out["passage"] = asdict(h.passage)
    return out
