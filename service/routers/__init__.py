"""HTTP routers, one concern each. Its modules, one line each: the package table of docs/ARCHITECTURE.md (the one
module map, checked against the tree by tests/test_docs.py).

Owns: turning requests into engine calls and engine answers into response bodies. Refusals are the engine's errors,
mapped to HTTP by `service.errors`; keys and limits are app-wide (`service.auth`, `service.limits`).

The collection-scoped routers (`search`, `encode`, `documents`, `admin`) are served twice by `scoped`: at the
default collection's paths and under `/collections/{name}`, each handler taking its collection from one dependency
(`service.deps.CollectionDep`).

May import: fastapi, prometheus-client, numpy, the edge's own modules (`service.deps`: each route asks only for what
it uses: the collection, the collections, the metrics, the settings, the live stats, the key checker;
`service.auth`, the bodies in `service.schemas` (one module per router), `service.stats`,
`service.training_status`, ...) and the engine's front door: the
names of `service.engine` itself. Never the engine's modules or `indexer` (an import contract in pyproject.toml)."""
