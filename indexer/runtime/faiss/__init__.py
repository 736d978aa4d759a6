"""FAISS behind the index seam (`indexer.runtime.ann`): the one package that imports faiss, one job per module.

- `kinds`: the front door: `build_index`, `wrap_index`, `read_ann` (importing it registers every kind);
- one module per index kind, each an `AnnIndex` registered under its name (`base.implements`): `flat` (exact),
  `ivf` (inverted lists holding the vectors' codes) and `hnsw` (a graph), `flat` and `hnsw` over `idmap`'s
  shared `IndexIDMap2` storage; `base`: the registry and what every FAISS-backed kind reads off its index;
- `training`: IVF's list count for N, codecs, building and training an IVF index, nprobe clamped to nlist;
  `kmeans`: the bounded training sample and two-level k-means; `quantizer`: the coarse quantizer (flat or a graph);
- `devices`: OpenMP threads (set only by `set_threads`, per calling thread) and the GPU path;
- `files`: reading (copied or memory-mapped), writing, serialising, IVF shard files, memory held;
- `search`: plain searches, `Exclusion` (ids skipped inside the scan), removal, search parameters by name;
- `exact`: exact search over the vectors an index holds (IVF lists read as vectors);
- `filtered`: search restricted to a filter's ids inside the scan (`IdFilter`, `ListLocator`, `filtered_search`).

Every other module of Strata reaches FAISS through these (the import contract `Only indexer.runtime.faiss imports
faiss` in pyproject.toml says so).
"""
