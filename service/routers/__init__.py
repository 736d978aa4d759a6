"""HTTP routers, one concern each: `search`, `encode`, `documents` (writes), `health` (/health, /ready, /metrics),
`stats` (/stats), `admin` (/admin/*), `collections` (/collections and each collection's routes), `snapshots` (each
collection's snapshots), `openai` (the OpenAI-compatible /v1/embeddings and /v1/models), `page` (the search page at
/ and its /static files).

Owns: turning requests into engine calls and engine answers into response bodies. Refusals are the engine's errors,
mapped to HTTP by `service.errors`; keys and limits are app-wide (`service.auth`, `service.limits`).

May import: fastapi, prometheus-client, numpy, `service.deps` (each route asks only for what it uses: the engine,
the metrics, the settings, the live stats, the key checker), `service.schemas`, `service.openai_schemas`,
`service.stats_schemas`, `service.collection_schemas`, `service.stats`, the engine's front doors (`service.engine`,
and for several collections `service.engine.registry` and `service.engine.model_catalog`). Never the engine's internals
or `indexer`."""
