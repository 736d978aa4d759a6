"""Strata's torch-free runtime: what any process needs to *use* an exported encoder and a versioned index.

Named `runtime` because it is the part of `indexer` that runs everywhere: in the API process (`service`), in
the build pipeline (`indexer.build`, `indexer.add`, `indexer.ray_build`, ...), and in the training side's
export and int8 gate (`models`). The pipeline is built on it, never the other way round.

Owns:
- `encoder`: the exported sentence encoder at run time (tokenizers + ONNX Runtime);
- `ann`: the one index seam, `AnnIndex`, and the registry of index kinds (`KIND_SPECS`: flat, ivf, hnsw), each
  with its typed build and search parameters (recorded in the manifest), its factory string and its search knob,
  `--index auto`'s measured crossover and the per-request search parameter checks;
- `faiss`: the one package that imports faiss, one job per module (its docstring lists them): the kinds'
  implementations (`flat`, `ivf`, `hnsw`, registered by kind; `kinds`: build and open), IVF training (`training`,
  `kmeans`, `quantizer`), threads and the GPU (`devices`), index files (`files`), searches (`search`, `exact`,
  `filtered`);
- `lexical`: the lexical seam (the one module that imports PyStemmer): the analysis, `LexicalIndex` and the
  engines by name, the BM25 index built in every version beside the vectors, searched exactly under filters, and
  the overlay that scores written documents with the version's statistics; its engines `lexical_bm25s` and
  `lexical_tantivy`, each the one module importing its library;
- `fusion`: dense + lexical ranked lists fused into one (reciprocal-rank fusion, convex combination);
- `version`: an index version opened for searching (FAISS index + lexical index + id → text store + manifest,
  checked), the interface every served version has (`VectorIndex`), its typed `Hit`s and its filtered searches
  (with a small per-version cache of filter → matching ids);
- `layout`: the index root (`versions/`, the `current` symlink, the build lock, pruning);
- `manifest`: `manifest.json`, what a version was built from and how well it retrieves;
- `store`: the id → text SQLite store with the evaluation queries, external ids and metadata;
- `metadata`: the one schema for metadata values (64-bit integers, finite numbers, valid Unicode, bounded
  nesting and size), enforced by builds, writes and filters alike, and the repair of values stored before it;
- `filters`: the metadata filter language (parsed and validated here, compiled to SQL over the store);
- `integrity`: checksums of a version's files, sealed into its manifest, verified before it is served;
- `snapshot`: a collection's snapshots (one checksummed archive: the version, the write log up to one seq, its
  config, the encoder's identity; under `ROOT/snapshots/`), and `restore`: one restored into a new root, checked
  whole in a staging folder before it is renamed into place;
- `shrink_guard`: the shrink guard (`STRATA_MAX_SHRINK`) shared by builds and swaps;
- `priority`: the lowered CPU and IO priority of builds and compactions (`STRATA_BUILD_PRIORITY`);
- `serving`: the serving record (`serving.json`: the version an API last swapped in, the versions its gates
  refused), so that restarts hold the swap gates;
- `vectors`: the check of vectors a user brings (dimension, finite, non-zero) and their normalisation, shared by
  builds, `PUT /documents` and `/search`;
- the write path, beside its log: `writelog`, the root's write log (documents written through the API, durable);
  `writes`, a write from its encoded texts on (logged, applied to the served version's overlay, replayed onto every
  version opened, switched with it; the service encodes and maps its refusals to HTTP); `overlay`, the live
  overlay of those writes on a version (`LiveIndex`, the version's own interface) and the fold of the same writes
  that `indexer compact` writes into a version; `ids`, the one external id → FAISS id rule of builds, writes and
  compaction;
- `passages`: long documents as passages: the split (sentence boundaries, the encoder's tokens, character
  offsets), passages as rows of a version (their ids and record), documents ranked by their best passage, the
  highlighted snippet, and `--chunk auto`'s rule;
- `doc_topk`: a version of passages' top k documents: how deep to search, the bounded deepening when a few
  documents fill the candidates, and hybrid's fusion in tiers of fixed depths, so no ranking depends on k;
- `topk`: the one top-k merge of several answers to the same queries (overlay, shards);
- `rowsets`: membership in a set of rows held as an ascending array (a filter's rows, tombstones' rows);
- `logs`: the log format of every Strata process (text on a terminal, JSON lines otherwise, `STRATA_LOG_FORMAT`);
- `progress`: a long job's progress: a bar on a terminal, log lines with rate and ETA elsewhere, and the
  `STRATA_PROGRESS_FILE` a parent process follows;
- `atomic`: atomic file and folder writes;
- `paths`: default locations (`STRATA_HOME`, `STRATA_DATA_DIR`).

May import: numpy, onnxruntime, tokenizers, faiss (in the `faiss` package only), PyStemmer (in `lexical` only),
bm25s and tantivy (in their engine's module only), pydantic, tqdm, xxhash and the standard library. Never torch,
transformers, `models`, `service`, or the rest of `indexer` (the build pipeline).
"""
