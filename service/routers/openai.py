"""OpenAI-compatible routes: `POST /v1/embeddings`, `GET /v1/models`, `GET /v1/models/{model}`.

The same engine call as `/encode` (keys, limits, the in-flight cap, micro-batching and metrics are shared; the
metrics are labelled `/v1/embeddings`), in OpenAI's request and response shapes, so that OpenAI's clients work
with `base_url="http://HOST:PORT/v1"`. Errors here have OpenAI's shape (`service.errors`).

Each distinct encoder of the collections is a model (`service.engine.model_catalog` says how they are named; a key
restricted to collections sees only their encoders).
`model` must be a served id (`STRATA_MODEL_NAME`, default `strata-<dim>`: the same across swaps that keep the
dimension) or an alias: the served encoder's folder name, the encoders of the versions a rollback can serve (of the
same dimension), `STRATA_MODEL_ALIASES` (`["*"]`: any name); another name is a 404 `model_not_found`, as OpenAI
answers, and a name whose vectors had another dimension a 410 `model_dimension_changed` (`service.engine.model_names`).
An answer's `model` names the encoder that made its vectors.
"""

from __future__ import annotations

import base64
from collections.abc import Callable

import numpy as np
from fastapi import APIRouter, HTTPException, Request

from service.auth import ANY_KEY
from service.deps import CollectionsDep
from service.engine import Collection, Collections, Forbidden, NotReady, ServedModel, listed, resolve
from service.schemas.openai import (
    Embedding,
    EmbeddingRequest,
    EmbeddingResponse,
    ModelCard,
    ModelList,
    OpenAIErrorBody,
    OpenAIRequestError,
    Usage,
)

# any valid key: each route finds the collections the key may read (`_may_read`)
router = APIRouter(prefix="/v1", tags=["openai"], dependencies=[ANY_KEY], responses={
    400: {"model": OpenAIErrorBody, "description": "invalid request: validation, token arrays, `dimensions`"},
    401: {"model": OpenAIErrorBody, "description": "missing or invalid API key (only when keys are configured)"},
    403: {"model": OpenAIErrorBody, "description": "`model` is served only for collections the key may not use"},
    404: {"model": OpenAIErrorBody, "description": "`model` is not the served model or an accepted alias"},
    410: {"model": OpenAIErrorBody, "description": "`model` named vectors of a dimension no longer served (a swap "
          "changed it); the message names the served id"},
    413: {"model": OpenAIErrorBody, "description": "request body over the size cap"},
    429: {"model": OpenAIErrorBody, "description": "too many requests in flight; see Retry-After"},
    503: {"model": OpenAIErrorBody, "description": "no index loaded"},
    504: {"model": OpenAIErrorBody, "description": "inference timed out"},
})


def _card(served: ServedModel) -> ModelCard:
    return ModelCard(id=served.name, created=int(served.exported_at.timestamp()))


def _base64(vector: np.ndarray) -> str:
    """What OpenAI sends for encoding_format=base64: the little-endian float32 bytes."""
    return base64.b64encode(vector.astype("<f4", copy=False).tobytes()).decode("ascii")


def _may_read(request: Request) -> Callable[[str], bool]:
    return lambda name: request.app.state.authorizer.may_read(request, name)


def _resolve(request: Request, collections: Collections, asked: str) -> tuple[Collection, ServedModel]:
    try:
        return resolve(collections, asked, _may_read(request))
    except Forbidden as exc:
        raise HTTPException(403, detail=str(exc)) from None


@router.post("/embeddings", response_model=EmbeddingResponse)
async def embeddings(body: EmbeddingRequest, request: Request, collections: CollectionsDep) -> EmbeddingResponse:
    """OpenAI's embeddings call: the same L2-normalised vectors as `/encode`, as floats or base64, from the encoder
    `model` names (each distinct encoder of the collections is a model)."""
    collection, served = _resolve(request, collections, body.model)
    if body.dimensions is not None and body.dimensions != served.dim:
        raise OpenAIRequestError(400, f"`{served.name}` makes {served.dim}-dimensional vectors and cannot shorten "
                                 f"them (it was not trained for truncated, Matryoshka-style vectors): omit "
                                 f"'dimensions' or send {served.dim}", param="dimensions")
    texts = [body.input] if isinstance(body.input, str) else body.input
    answer = await collection.encode(texts, endpoint="/v1/embeddings")
    if body.encoding_format == "base64":
        data = [Embedding(index=i, embedding=_base64(v)) for i, v in enumerate(answer.vectors)]
    else:
        data = [Embedding(index=i, embedding=v) for i, v in enumerate(answer.vectors.tolist())]
    tokens = sum(answer.tokens)
    return EmbeddingResponse(data=data, model=answer.model, usage=Usage(prompt_tokens=tokens, total_tokens=tokens))


@router.get("/models", response_model=ModelList)
async def models(request: Request, collections: CollectionsDep) -> ModelList:
    """The served ids, one per distinct encoder of the collections this key may read (aliases are accepted by
    `/v1/embeddings` but not listed, so the list does not change when a swap changes an encoder)."""
    may_read = _may_read(request)
    shown = [m.model for m in listed(collections) if any(may_read(n) for n in m.collections)]
    if not shown and not any(e.leases.current for e in collections.by_name.values()):
        # nothing loaded yet: 503 with the default collection's reason (404 when there is no default collection)
        raise NotReady(collections.default().not_ready_reason())
    return ModelList(data=[_card(m) for m in shown])


@router.get("/models/{model}", response_model=ModelCard)
async def model(model: str, request: Request, collections: CollectionsDep) -> ModelCard:
    """A served model, asked for by its id or an accepted alias."""
    return _card(_resolve(request, collections, model)[1])
