"""Strata indexer: embeds a corpus with an *exported* ONNX encoder and builds, versions, evaluates and tunes
indexes (the `indexer` CLI).

Owns: the build pipeline (local and on Ray, growing and compacting a version, splitting it into shards), a user's
corpus and its readers, the Quora loader and evaluation protocols, evaluation, TREC runs and their comparison,
the index sweep, the per-encoder calibration of the search parameter, and the CLI. The torch-free runtime it
builds on is the `indexer.runtime` subpackage, which `service` and `models` use too.

Its modules, one line each: the package table of docs/ARCHITECTURE.md (the one module map, checked against the
tree by tests/test_docs.py).

May import: `indexer.runtime`, numpy, onnxruntime, tokenizers, pydantic, tqdm, ray and pyarrow (the Ray build
only), ir_measures and scipy (`compare` only: the `eval` extra) and the standard library. Never faiss directly
(only the `indexer.runtime.faiss` package does), torch, transformers, `models` or `service`: the build runs with the
`serve` extra alone.
"""
