"""JSON bodies serialised once, by orjson, for the hot routes (`/search`, `/encode`).

FastAPI validates a returned value against the route's response model and then serialises it; for a `/search` answer
that is the hits built as pydantic models, validated again, and dumped: a real share of a request whose encoder run
is short (docs/decisions.md#the-serving-paths-own-cpu). The hot routes build plain dicts and return them through
`json_response`; their `response_model` still documents the shape in the OpenAPI schema, and the schemathesis test
checks every answer against it. (FastAPI's own `ORJSONResponse` is deprecated; this is the same idea without it.)

A value orjson refuses (an integer outside 64 bits, a lone surrogate, nesting past its 254 levels) can only
come from a document stored before the metadata schema (`indexer.runtime.metadata`) was enforced at every way
in. Such a document must never turn a search into a 500: the answer is sent with those values repaired
(`json_safe`: the integer as its decimal string, U+FFFD for the surrogate, null for what nests too deep), and a
warning names what was changed.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from fastapi import Response

from indexer.runtime.metadata import json_safe

log = logging.getLogger(__name__)

# numpy arrays and scalars (vectors, FAISS scores) go straight to JSON; float32 arrays are widened by the caller
# where the exact float64 digits matter
_OPTIONS = orjson.OPT_SERIALIZE_NUMPY


def json_response(content: Any, status_code: int = 200) -> Response:  # noqa: ANN401
    try:
        body = orjson.dumps(content, option=_OPTIONS)
    except orjson.JSONEncodeError as exc:
        safe, repairs = json_safe(content)
        body = orjson.dumps(safe, option=_OPTIONS)
        log.warning("a response held values JSON cannot carry (%s; documents stored before the metadata schema?): "
                    "sent repaired: %s", exc, "; ".join(repairs[:5]) + (f"; … ({len(repairs)} in all)"
                                                                       if len(repairs) > 5 else ""))
    return Response(body, status_code=status_code, media_type="application/json")
