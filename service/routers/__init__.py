"""HTTP routers, one concern each: `search`, `encode`, `documents` (writes), `health` (/health, /ready, /metrics),
`admin` (/admin/*).

Owns: turning requests into engine calls and engine answers into response bodies. Refusals are the engine's
errors, mapped to HTTP by `service.errors`; keys and limits are app-wide (`service.auth`, `service.limits`).

May import: fastapi, prometheus-client, `service.deps` (each route asks only for what it uses: the engine, the
metrics), `service.schemas`, the engine's public names (`service.engine`). Never the engine's internals or
`indexer`.
"""
