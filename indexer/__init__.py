"""Strata indexer: embeds a corpus with an *exported* ONNX encoder and builds, versions, evaluates and tunes
FAISS indexes (the `indexer` CLI).

Owns: the build pipeline (`build`, `add`, `compact`, `ray_build`, `ray_embed`, `ray_input`, `shards`), the Quora
loader and evaluation protocols (`quora`), retrieval metrics (`evaluate`), the index sweep (`tune`), the per-encoder
nprobe calibration (`calibrate`) and the CLI (`cli`,
`console`). The torch-free runtime it builds on — encoder runtime, FAISS wrapper, version layout, manifest,
store, atomic writes, paths — is the `indexer.runtime` subpackage, which `service` and `models` use too.

May import: `indexer.runtime`, numpy, onnxruntime, tokenizers, pydantic, tqdm, ray and pyarrow (the Ray build
only) and the standard library. Never faiss directly (only `indexer.runtime.faiss_index` does), torch,
transformers, `models` or `service`: the build runs with the `serve` extra alone.
"""
