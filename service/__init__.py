"""Strata service: the FastAPI app serving `/encode`, `/search`, the writes (`PUT /documents`, `POST
/documents/delete`), `/health`, `/ready`, `/metrics`, `/stats`, `/admin/reload`, the OpenAI-compatible
`/v1/embeddings` and `/v1/models`, the collections (`/collections`, `/collections/{name}/…`), and the search page at
`/`, over one `Collection` each (one scheduler shared by all) with a local or a Ray-sharded backend.

Owns: the engine (`service.engine`: one engine per collection on one shared scheduler — micro-batching, workers,
leases, swaps, the write lane that encodes writes, caps, timeout, backends; a write's log, overlay and replay are the
runtime's, `indexer.runtime.writes`), the HTTP layer around it — app factory (`main`), routers, dependencies
(`deps`), the mapping of engine errors to HTTP (`errors`), API keys (`auth`), the body cap (`limits`), access log
and request ids (`access`, `logs`), schemas (`schemas`, `openai_schemas`, `stats_schemas`, `collection_schemas`),
the hot routes' JSON (`responses`) and their handler without per-request dependency solving (`lean_route`) —
plus settings (environment variables prefixed `STRATA_`), Prometheus metrics,
optional OpenTelemetry tracing (`tracing`), the sliding-window recorder behind `/stats` (`stats`), the search page's
static files (`static/`) and the demo command (`demo`, with its background chain's status and ETA in `training_status`).

May import: `indexer.runtime` (encoder runtime, index versions, layout, the write path), fastapi/starlette (outside
`service.engine`), pydantic, prometheus-client, numpy, uvicorn, OpenTelemetry (`tracing` only, and only when tracing
is on), and Ray (the sharded backend only). Never torch or `models` (the API image ships without them), and never
the build pipeline (`indexer.build`, ...): the demo runs `encoder export` and `indexer build` as child processes.
"""
