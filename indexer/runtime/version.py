"""An index version opened for searching: FAISS index + id → text store + manifest, checked for consistency."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from indexer.runtime.faiss_index import INDEX_FILE, read_index, read_merged, search, set_nprobe, stored_vectors
from indexer.runtime.manifest import Manifest, ManifestError
from indexer.runtime.store import STORE, Store

log = logging.getLogger(__name__)

QUERY_VECTORS = "queries.npy"


class IndexLoadError(RuntimeError):
    """A version folder is incomplete, corrupt or inconsistent with its manifest."""


class IndexVersion:
    def __init__(self, folder: str | Path, *, nprobe: int | None = None) -> None:
        self.folder = Path(folder)
        try:
            self.manifest = Manifest.load(self.folder)
        except ManifestError as exc:
            raise IndexLoadError(str(exc)) from exc
        shards = self.manifest.index.shards
        # A sharded version (built with `--shards N`) opened in one process: its shards merged in memory.
        paths = [self.folder / s.file for s in shards] if shards else [self.folder / INDEX_FILE]
        path = paths[0] if len(paths) == 1 else self.folder / "shards"
        for p in paths:
            if not p.is_file():
                raise IndexLoadError(f"{p} is missing")
        try:
            self.index = read_index(paths[0]) if len(paths) == 1 else read_merged(paths)
        except RuntimeError as exc:  # FAISS raises RuntimeError for truncated or foreign files
            raise IndexLoadError(f"{path} is not a readable FAISS index: {str(exc).splitlines()[0]}") from exc
        m = self.manifest
        if self.index.d != m.model.dim:
            raise IndexLoadError(f"{path} has dimension {self.index.d} but the manifest says {m.model.dim}")
        if self.index.ntotal != m.index.ntotal:
            raise IndexLoadError(f"{path} holds {self.index.ntotal} vectors but the manifest says "
                                 f"{m.index.ntotal}")
        try:
            self.store = Store(self.folder / STORE)
        except (FileNotFoundError, ValueError) as exc:
            raise IndexLoadError(str(exc)) from exc
        self.nprobe = set_nprobe(self.index, nprobe or m.index.nprobe)  # clamped to nlist

    @property
    def version(self) -> str:
        return self.manifest.version

    @property
    def dim(self) -> int:
        return int(self.index.d)

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    def search(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, ids), each (n, k); missing hits have id -1."""
        return search(self.index, vectors, k)

    def hits(self, scores: np.ndarray, ids: np.ndarray) -> list[list[tuple[int, str, float]]]:
        """Attach texts: per query, [(id, text, score)] without the -1 padding."""
        texts = self.store.texts(ids.ravel().tolist())
        return [[(int(i), texts.get(int(i), ""), float(s)) for s, i in zip(srow, irow, strict=True) if i >= 0]
                for srow, irow in zip(scores, ids, strict=True)]

    def query_vectors(self) -> np.ndarray | None:
        path = self.folder / QUERY_VECTORS
        return np.load(path) if path.is_file() else None

    def close(self) -> None:
        self.store.close()


def vectors_by_id(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    """(ids, vectors) of a version's IVF-Flat index, sorted by id: two builds compare row for row."""
    version = IndexVersion(folder)
    try:
        ids, vecs = stored_vectors(version.index)
    finally:
        version.close()
    order = np.argsort(ids)
    return ids[order], vecs[order]
