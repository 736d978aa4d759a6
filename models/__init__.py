"""Strata models: the training side. Encoders, detachable layer poolers, contrastive objectives, STS
evaluation and the ONNX exporter that strips the pooler and writes the serving encoder (`export`; the sentences
its parity check and the int8 batch-invariance check run on in `parity`; int8 quantisation in `quantize`, its
graph rewrites in `int8_graph`), and the `encoder` CLI (`cli`, the entry point; one module per subcommand in
`commands`).

May import: torch, transformers, onnx and `indexer` (to load and check the exported encoder it writes).
Nothing on the serving path (`indexer`, `service`) may import this package.
"""
