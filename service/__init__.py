"""Strata service: the FastAPI app serving `/encode`, `/search`, the writes, health and metrics, `/stats`, the
admin routes, the OpenAI-compatible `/v1` routes, the collections and the search page, over one `Collection` each
(one scheduler shared by all) with a local or a Ray-sharded backend.

Owns: the engine (`service.engine`) and the HTTP layer around it: the app factory, routers, dependencies, the
mapping of engine errors to HTTP (`errors`, the only place), API keys, the body cap, access logs, request and
response bodies, the edge's settings, the `/stats` recorder, the search page and the demo.

Its modules, one line each: the package table of docs/ARCHITECTURE.md (the one module map, checked against the
tree by tests/test_docs.py).

May import: `indexer.runtime` (encoder runtime, index versions, layout, the write path), fastapi/starlette (outside
`service.engine`), pydantic, prometheus-client, numpy, uvicorn, OpenTelemetry (`tracing` only, and only when tracing
is on), and Ray (the sharded backend only). Never torch or `models` (the API image ships without them), and never
the build pipeline (`indexer.build`, ...): the demo runs `encoder export` and `indexer build` as child processes.
"""
