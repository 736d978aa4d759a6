"""Strata models: the training side. Encoders, detachable layer poolers, contrastive objectives, STS evaluation,
and the ONNX exporter that strips the pooler and writes the serving encoder (with static int8 behind its gates),
and the `encoder` CLI.

Its modules, one line each: the package table of docs/ARCHITECTURE.md (the one module map, checked against the
tree by tests/test_docs.py).

May import: torch, transformers, onnx and `indexer` (to load and check the exported encoder it writes).
Nothing on the serving path (`indexer`, `service`) may import this package.
"""
