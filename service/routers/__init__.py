"""HTTP routers, one concern each. Its modules, one line each: the package table of docs/ARCHITECTURE.md (the one
module map, checked against the tree by tests/test_docs.py).

Owns: turning requests into engine calls and engine answers into response bodies. Refusals are the engine's errors,
mapped to HTTP by `service.errors`; keys and limits are app-wide (`service.auth`, `service.limits`).

May import: fastapi, prometheus-client, numpy, `service.deps` (each route asks only for what it uses: the engine,
the metrics, the settings, the live stats, the key checker), `service.schemas`, `service.openai_schemas`,
`service.stats_schemas`, `service.collection_schemas`, `service.stats`, the engine's front doors (`service.engine`,
and for several collections `service.engine.registry` and `service.engine.model_catalog`). Never the engine's internals
or `indexer`."""
