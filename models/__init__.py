"""Strata models: the training side. Encoders, detachable layer poolers, contrastive objectives, STS
evaluation and the ONNX exporter that strips the pooler and writes the serving encoder.

May import: torch, transformers, onnx and `indexer` (to load and check the exported encoder it writes).
Nothing on the serving path (`indexer`, `service`) may import this package.
"""
