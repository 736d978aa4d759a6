"""FAISS behind the index seam (`indexer.runtime.ann`): the one package that imports faiss, one job per module
(the kinds, IVF training, threads and the GPU, index files, searches).

Its modules, one line each: the package table of docs/ARCHITECTURE.md (the one module map, checked against the
tree by tests/test_docs.py).

Every other module of Strata reaches FAISS through these (the import contract `Only indexer.runtime.faiss imports
faiss` in pyproject.toml says so).
"""

from indexer.runtime.faiss.blas import prefer_native_kernels

# before any module of this package imports faiss, which loads the wheel's OpenBLAS (`blas`)
prefer_native_kernels()
