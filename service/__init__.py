"""Strata service: the FastAPI app serving `/encode`, `/search`, `/health`, `/ready` and `/metrics`.

Owns: HTTP schemas, settings (environment variables prefixed `STRATA_`), the search engine that pairs a loaded
ONNX encoder with a loaded index version, and Prometheus metrics.

May import: `indexer` (encoder runtime, index versions), fastapi, pydantic, prometheus-client, numpy. Never
torch or `models`: the API image ships without them.
"""
