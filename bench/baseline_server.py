"""The competitor in `bench/compare.py`: what a user would otherwise deploy — FastAPI, sentence-transformers
(torch fp32) encoding each request as it comes, and an exact FAISS `IndexFlatIP` over the corpus vectors.

It serves `POST /search {"query", "top_k"}` → `{"hits": [{"id", "text", "score"}]}` like Strata's `/search`.
The corpus (ids, texts, vectors) is read from an `.npz` written by the bench, so both servers search the same
documents with the same model weights.

    STRATA_BASELINE_CORPUS=corpus.npz STRATA_BASELINE_MODEL=DIR uvicorn bench.baseline_server:app --port 8001
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

import faiss
import numpy as np
from fastapi import Depends, FastAPI, Request
from pydantic import BaseModel, Field


class SearchIn(BaseModel):
    query: str = Field(min_length=1, max_length=2000)
    top_k: int = Field(10, ge=1, le=100)


class Baseline:
    def __init__(self, corpus: str, model_dir: str) -> None:
        from sentence_transformers import SentenceTransformer

        data = np.load(corpus, allow_pickle=False)
        self.ids = data["ids"]
        self.texts = data["texts"].tolist()
        self.index = faiss.IndexFlatIP(data["vectors"].shape[1])
        self.index.add(np.ascontiguousarray(data["vectors"], dtype=np.float32))
        self.model = SentenceTransformer(model_dir, device="cpu")


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    app.state.baseline = Baseline(os.environ["STRATA_BASELINE_CORPUS"], os.environ["STRATA_BASELINE_MODEL"])
    yield


app = FastAPI(lifespan=lifespan)


def baseline(request: Request) -> Baseline:
    return request.app.state.baseline


@app.get("/ready")
def ready() -> dict[str, str]:
    return {"status": "ready"}


@app.post("/search")
def search(body: SearchIn, b: Annotated[Baseline, Depends(baseline)]) -> dict[str, list[dict[str, object]]]:
    # A sync endpoint: FastAPI runs it in its thread pool, as most deployments of this pattern do.
    vec = b.model.encode([body.query], normalize_embeddings=True, convert_to_numpy=True)
    scores, pos = b.index.search(np.asarray(vec, dtype=np.float32), body.top_k)
    return {"hits": [{"id": int(b.ids[p]), "text": b.texts[p], "score": float(s)}
                     for s, p in zip(scores[0], pos[0], strict=True) if p >= 0]}
