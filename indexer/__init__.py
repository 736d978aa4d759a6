"""Strata indexer: embeds a corpus with an *exported* ONNX encoder and builds, versions, evaluates and tunes
FAISS indexes (the `indexer` CLI).

Owns: the build pipeline (`build`, `add`, `compact` with `compact_index` (the index kind following the size),
`ray_build`, `ray_embed`, `ray_input`, `shards`, `reshard`;
what a build is asked for in `build_config`, whether and how it splits documents into passages in `chunking` (a build's
passages: `ingest_passages`), the steps every build takes in its staging folder in `stage`), a user's corpus read row
by row (`corpus`; a row → a document in `corpus_rows`, opening files and telling formats apart in `corpus_files`;
the vectors a corpus brings and the memory-mapped array a build keeps its vectors in, `ingest_vectors`), the
Quora loader and evaluation protocols (`quora`), queries and qrels files (`eval_files`) and the evaluation sets made
of them (`evalset`), retrieval metrics (`metrics`, `evaluate`; per `/search` mode: `eval_modes`; a version of
passages ranked by its documents: `doc_ranks`; which are gates
before a version is published and which a report after: `report`), TREC run files (`runs`) and their paired
comparison (`compare`), the index sweep (`tune`), the per-encoder calibration of
nprobe/ef_search (`calibrate`) on query-like probes (`probes`) and the CLI (`cli`, the entry point; one module per
subcommand in `commands`; `console`). The torch-free runtime it builds on — encoder runtime, FAISS wrapper, version
layout, manifest, store, atomic writes, paths — is the `indexer.runtime` subpackage, which `service` and
`models` use too.

May import: `indexer.runtime`, numpy, onnxruntime, tokenizers, pydantic, tqdm, ray and pyarrow (the Ray build
only), ir_measures and scipy (`compare` only: the `eval` extra) and the standard library. Never faiss directly
(only the `indexer.runtime.faiss` package does), torch, transformers, `models` or `service`: the build runs with the
`serve` extra alone.
"""
