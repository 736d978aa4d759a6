"""Strata's torch-free runtime: what any process needs to *use* an exported encoder and a versioned index.

Named `runtime` because it is the part of `indexer` that runs everywhere: in the API process (`service`), in
the build pipeline, and in the training side's export and int8 gate (`models`). The pipeline is built on it,
never the other way round.

Owns: the exported encoder at run time, the index seam and its kinds (FAISS behind it, in the `faiss` package),
the lexical seam and its engines, fusion, an opened version and the index root's layout, the manifest, the store,
the metadata schema and filter language, checksums, snapshots, the write log and the write path beside it,
passages, logs, progress and atomic writes.

Its modules, one line each: the package table of docs/ARCHITECTURE.md (the one module map, checked against the
tree by tests/test_docs.py).

May import: numpy, onnxruntime, tokenizers, faiss (in the `faiss` package only), PyStemmer (in `lexical` only),
bm25s and tantivy (in their engine's module only), pydantic, tqdm, xxhash and the standard library. Never torch,
transformers, `models`, `service`, or the rest of `indexer` (the build pipeline).
"""
