"""JSON bodies serialised once, by orjson, for the hot routes (`/search`, `/encode`).

FastAPI validates a returned value against the route's response model and then serialises it; for a `/search`
answer that is the hits built as pydantic models, validated again, and dumped — a few hundred µs of a
request whose encoder run takes ~2 ms. The hot routes build plain dicts and return them through `json_response`;
their `response_model` still documents the shape in the OpenAPI schema, and the schemathesis test checks every
answer against it. (FastAPI's own `ORJSONResponse` is deprecated; this is the same idea without it.)
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import Response

# numpy arrays and scalars (vectors, FAISS scores) go straight to JSON; float32 arrays are widened by the caller
# where the exact float64 digits matter
_OPTIONS = orjson.OPT_SERIALIZE_NUMPY


def json_response(content: Any, status_code: int = 200) -> Response:
    return Response(orjson.dumps(content, option=_OPTIONS), status_code=status_code, media_type="application/json")
