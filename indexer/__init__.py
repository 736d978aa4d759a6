"""Strata indexer: embeds a corpus with an *exported* ONNX encoder and builds, stores, versions and evaluates
FAISS indexes.

Owns: the ONNX encoder runtime (`onnx_encoder`), the Quora loader and evaluation protocols (`quora`), the
versioned on-disk index layout (`layout`, `manifest`, `store`), the build pipeline (`build`) and retrieval
metrics (`evaluate`).

May import: numpy, onnxruntime, tokenizers, faiss, pydantic, tqdm and the standard library. Never torch,
transformers or `models` (the training side): the serving path must run with the `serve` extra alone.
"""
