"""An index version opened for searching: FAISS index + id → text store + manifest, checked for consistency.

Also what every backend shares about search results and filters: `VectorIndex`, the interface a searcher needs of
a version (an `IndexVersion`, the live overlay on one, the shards of one), the `Hit` a search returns (external id
as the corpus gave it, text, score, metadata), and `FilterCache`, a version's small LRU of filter → matching ids.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from indexer.runtime import bounded_leg
from indexer.runtime.ann import AnnIndex, IndexParamError, check_search_params
from indexer.runtime.bounded_leg import LexicalLeg
from indexer.runtime.faiss.files import INDEX_FILE
from indexer.runtime.faiss.filtered import IdFilter
from indexer.runtime.faiss.kinds import read_ann
from indexer.runtime.lexical import LexicalError, LexicalIndex, open_lexical
from indexer.runtime.manifest import Manifest, ManifestError
from indexer.runtime.passage_rows import PassageRef
from indexer.runtime.prepare_later import PrepareLater
from indexer.runtime.store import STORE, Store

log = logging.getLogger(__name__)

QUERY_VECTORS = "queries.npy"


class IndexLoadError(RuntimeError):
    """A version folder is incomplete, corrupt or inconsistent with its manifest."""


@dataclass(frozen=True)
class Hit:
    """One search result."""

    faiss_id: int  # the FAISS id
    ext_id: int | str  # the document's id as the corpus gave it (a Quora qid for Quora builds)
    text: str
    score: float
    metadata: dict[str, Any]
    # a version built with passages (`indexer.runtime.passages`): the passage that matched; None: a whole document
    passage: PassageRef | None = None


def hits_from_store(store: Store, scores: np.ndarray, ids: np.ndarray, passages: bool = False) -> list[list[Hit]]:
    """Per query, the hits of a (scores, ids) search answer with their stored documents, without the -1 padding;
    with `passages`, a passage row's hit is its document's (`StoredDoc.as_passage`: read once per row)."""
    docs = store.documents(ids.ravel().tolist())
    out = []
    for srow, irow in zip(scores, ids, strict=True):
        row = []
        for s, i in zip(srow.tolist(), irow.tolist(), strict=True):
            if i < 0:
                continue
            doc = docs.get(i)
            if doc is None:
                row.append(Hit(i, i, "", s, {}))
            elif passages and (view := doc.as_passage) is not None:
                row.append(Hit(i, view[0], doc.text, s, view[1], view[2]))
            else:
                row.append(Hit(i, doc.ext_id, doc.text, s, doc.metadata))
        out.append(row)
    return out


@dataclass(frozen=True)
class FilterMatch:
    """The documents a filter matches in one version."""

    ids: np.ndarray  # sorted FAISS ids (int64)
    prepared: IdFilter | None = None  # for the index of this process (None for a sharded version)
    _rows: list[np.ndarray] = field(default_factory=list, compare=False, repr=False)  # `lexical_rows`, once found
    key: str = ""  # its `FilterCache.key` (the sharded backend's shards cache their share of it by this key)
    codes_tried: bool = False  # whether its matches' codes were gathered, or found not worth it (`IndexVersion`)
    rows_tried: bool = False  # whether its lexical rows were prepared (`LexicalIndex.prepare_rows`), or tried

    @property
    def nbytes(self) -> int:
        """Memory held: the ids, their lexical rows once found, what the index prepared of them (selector, codes)."""
        return 2 * self.ids.nbytes + (getattr(self.prepared, "nbytes", 0) if self.prepared is not None else 0)

    def lexical_rows(self, rows_of: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """The rows of these ids in the version's lexical index (its `rows_of`), found once and kept (one version's)."""
        if not self._rows:
            self._rows.append(rows_of(self.ids))  # two threads may both find them: the same rows either way
        return self._rows[0]


@runtime_checkable
class VectorIndex(Protocol):
    """What a searcher needs of an index version, wherever its vectors live: an `IndexVersion` in this process, the
    live overlay of the API's writes on one (`indexer.runtime.live_index.LiveIndex`), or the shard deployments of one
    version on Ray Serve (`service.engine.sharded`). Its vectors are an `indexer.runtime.ann.AnnIndex` of the
    manifest's kind. Each answers `lexical_search` (and hybrid's legs) from the version's BM25 index when its
    manifest has one (the sharded backend from the API process: the shards hold vectors only)."""

    manifest: Manifest

    @property
    def version(self) -> str: ...

    @property
    def dim(self) -> int: ...

    @property
    def ntotal(self) -> int: ...

    def match(self, flt: object) -> Any: ...  # a FilterMatch, or what the index's own `search` takes

    def search(self, vectors: np.ndarray, k: int, match: Any = None, *,
               search_params: dict[str, int] | None = None) -> tuple[np.ndarray, np.ndarray]: ...

    # `passages`: a passage row's hit as its document's (id, metadata, `PassageRef` without a snippet); `since`: an
    # index with a write overlay leaves out the documents written after that applied seq (`LiveIndex.hits`)
    def hits(self, scores: np.ndarray, ids: np.ndarray, passages: bool = False, since: int | None = None
             ) -> list[list[Hit]]: ...

    def ext_ids(self, ids: list[int]) -> dict[int, int | str]: ...  # rows' external ids, without their texts

    def doc_rows(self, ids: np.ndarray) -> np.ndarray: ...  # rows' document ordinals (-1: none), `Store.doc_rows`

    def lexical_search(self, queries: list[str], k: int, match: Any = None) -> list[tuple[np.ndarray, np.ndarray]]:
        ...

    def lexical_legs(self, queries: list[str], k: int, match: Any = None, *,
                     bounded_from: int | None = None) -> list[LexicalLeg]: ...

    def complete_legs(self, legs: list[LexicalLeg], dense_ids: list[np.ndarray]
                      ) -> list[tuple[np.ndarray, np.ndarray]]: ...

    def close(self) -> None: ...


class FilterCache:
    """A version's LRU of filter → `FilterMatch`, bounded in entries and in bytes held. A repeated filter (a
    tenant's, a product line's) skips the store's SQL, the building of its ID selector and, for a selective one,
    the gathering of its vectors' codes (`faiss.filtered.exact_pays`): at 1 % of 1M documents these are most of the
    filtered request's time (docs/decisions.md). A version never changes, so an entry never goes stale: the
    API's writes are the live overlay's, applied on top of the base's matches at every search (`LiveIndex`)."""

    # 256 MiB: ids (8 B each), selectors (a bitmap, or FAISS's hash set at ~40 B per id), gathered or own-list codes
    # (at most `GATHER_MAX_BYTES` per filter: 7.7 MB for 1 % of 1M 384-d fp16 vectors); the lexical engine its own
    def __init__(self, max_entries: int = 64, max_bytes: int = 256 << 20) -> None:
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._items: OrderedDict[str, FilterMatch] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    @staticmethod
    def key(flt: object) -> str:
        # sort_keys: the same filter written in another key order is the same entry; 1, 1.0 and true stay apart
        return json.dumps(flt, sort_keys=True)  # NaN too: the parser refuses it with a reason

    def get(self, key: str) -> FilterMatch | None:
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
            return hit

    def put(self, key: str, match: FilterMatch) -> None:
        size = match.nbytes
        if size > self.max_bytes or self.max_entries <= 0:
            return
        with self._lock:
            old = self._items.pop(key, None)
            self._held -= 0 if old is None else old.nbytes
            self._items[key] = match
            self._held += size
            while len(self._items) > self.max_entries or self._held > self.max_bytes:
                _, dropped = self._items.popitem(last=False)
                self._held -= dropped.nbytes


class LexicalSearching:
    """The lexical searches of a version over its BM25 index `lexical` (None: built without one; the searcher
    refuses the lexical modes first), wherever its vectors live: an `IndexVersion`, or the sharded backend's
    version (the shards hold vectors; the lexical index is read in the API process)."""

    lexical: LexicalIndex | None

    def lexical_search(self, queries: list[str], k: int, match: FilterMatch | None = None
                       ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per query, (scores, ids) of its best k by BM25 (fewer when fewer share a term with it); with a `match`,
        among its documents only (exact)."""
        assert self.lexical is not None
        rows = None if match is None else match.lexical_rows(self.lexical.rows_of)
        return [self.lexical.search(q, k, allowed_rows=rows) for q in queries]

    def lexical_legs(self, queries: list[str], k: int, match: FilterMatch | None = None, *,
                     bounded_from: int | None = None) -> list[LexicalLeg]:
        """Per query, hybrid's lexical leg begun (`bounded_leg.begin`): exact, or bounded where it reads more than
        `bounded_from` postings (None: always exact), to `complete_legs` with the dense candidates."""
        assert self.lexical is not None
        rows = None if match is None else match.lexical_rows(self.lexical.rows_of)
        return [bounded_leg.begin(self.lexical, q, k, allowed_rows=rows, bounded_from=bounded_from) for q in queries]

    def complete_legs(self, legs: list[LexicalLeg], dense_ids: list[np.ndarray]
                      ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each leg's answer, a bounded one completed with its query's dense candidates (FAISS ids)."""
        assert self.lexical is not None
        return [bounded_leg.complete(self.lexical, leg, ids) for leg, ids in zip(legs, dense_ids, strict=True)]


class IndexVersion(LexicalSearching):
    """A version folder opened in this process. Its vectors are `ann`, an `AnnIndex` of the manifest's kind (the
    seam: nothing here knows FAISS); `index` is the FAISS index beneath it, for benches and tests that call
    the `faiss` package's functions on it directly."""

    def __init__(self, folder: str | Path, *, nprobe: int | None = None,
                 search_params: dict[str, int | None] | None = None, mmap: bool = False) -> None:
        self.folder = Path(folder)
        self.mmap = mmap  # the index file memory-mapped, read-only (`faiss.files.read_index`): what serving opens
        try:
            self.manifest = Manifest.load(self.folder)
        except ManifestError as exc:
            raise IndexLoadError(str(exc)) from exc
        shards = self.manifest.index.shards
        # A sharded version (built with `--shards N`) opened in one process: its shards merged in memory.
        paths = [self.folder / s.file for s in shards] if shards else [self.folder / INDEX_FILE]
        if shards and mmap:  # serving: say what it costs (`python -m service sharded` serves it without the copy)
            log.warning("version %s is kept as %d shards: this process merges them in memory (%.1f GiB), not "
                        "memory-mapped; serve it with `python -m service sharded`, or serve its unsharded parent "
                        "(%s)", self.manifest.version, len(shards),
                        sum(p.stat().st_size for p in paths if p.is_file()) / 2**30,
                        self.manifest.parent_version or "none")
        path = paths[0] if len(paths) == 1 else self.folder / "shards"
        for p in paths:
            if not p.is_file():
                raise IndexLoadError(f"{p} is missing")
        try:
            self.ann: AnnIndex = read_ann(paths, self.manifest.index.params, mmap=mmap)
        except RuntimeError as exc:  # FAISS raises RuntimeError for truncated or foreign files
            raise IndexLoadError(f"{path} is not a readable FAISS index: {str(exc).splitlines()[0]}") from exc
        except ValueError as exc:  # the file holds another kind of index than the manifest says
            raise IndexLoadError(f"{path}: {exc}") from exc
        manifest = self.manifest
        if self.ann.dim != manifest.model.dim:
            raise IndexLoadError(f"{path} has dimension {self.ann.dim} but the manifest says {manifest.model.dim}")
        if self.ann.ntotal != manifest.index.ntotal:
            raise IndexLoadError(f"{path} holds {self.ann.ntotal} vectors but the manifest says "
                                 f"{manifest.index.ntotal}")
        try:
            self.store = Store(self.folder / STORE)
        except (FileNotFoundError, ValueError) as exc:
            raise IndexLoadError(str(exc)) from exc
        # served defaults: the kinds' knob settings (STRATA_NPROBE, ...) where this kind takes them (others are
        # ignored, so one service setting fits every version it may swap to), else the manifest's
        wanted = {"nprobe": nprobe, **(search_params or {})}
        for name, value in wanted.items():
            if value is not None:
                try:
                    self.ann.set_default(name, value)
                except IndexParamError:
                    log.info("%s does not apply to %s's %s index", name, self.version, self.ann.kind)
        try:  # the BM25 index beside the vectors (None: a version built without one, dense only)
            self.lexical = (open_lexical(self.folder, manifest.lexical, mmap=mmap) if manifest.lexical is not None
                            else None)
        except LexicalError as exc:
            self.store.close()
            raise IndexLoadError(str(exc)) from exc
        self.filters = FilterCache()
        self._later = PrepareLater("filter-codes")  # a filter used again: its codes and lexical rows prepared

    @property
    def version(self) -> str:
        return self.manifest.version

    @property
    def index(self) -> Any:
        """The FAISS index beneath `ann` (not part of the seam: benches and tests that call the `faiss` package)."""
        return self.ann.faiss  # type: ignore[attr-defined]

    @property
    def dim(self) -> int:
        return self.ann.dim

    @property
    def ntotal(self) -> int:
        return self.ann.ntotal

    @property
    def kind(self) -> str:
        return self.ann.kind

    @property
    def nprobe(self) -> int | None:
        """The IVF lists probed per query (None for other kinds: see `search_defaults`)."""
        return self.ann.defaults().get("nprobe")

    @property
    def nlist(self) -> int | None:
        return getattr(self.ann, "nlist", None)

    def search_defaults(self) -> dict[str, int]:
        """The search parameters served when a request gives none (nprobe for IVF, ef_search for HNSW)."""
        return self.ann.defaults()

    def check_search_params(self, search_params: dict[str, int | None] | None) -> dict[str, int]:
        """A request's search parameters, checked against this version's kind (`IndexParamError`)."""
        return check_search_params(self.ann.kind, search_params)

    def match(self, flt: object, schema: dict[str, str] | None = None) -> FilterMatch:
        """The documents filter `flt` matches (see `indexer.runtime.filters`), prepared for `search`; raises
        `FilterError` with the reason when it does not fit this version's metadata (or `schema`, a wider one:
        the overlay's; the ids matched do not depend on it, so the cache holds either)."""
        key = FilterCache.key(flt)
        cached = self.filters.get(key)
        if cached is not None:
            if not cached.codes_tried or (cached._rows and not cached.rows_tried):
                self._gather_later(key, cached)
            return cached
        ids = self.store.filter_ids(flt, schema)
        self.filters.put(key, found := FilterMatch(ids, self.ann.prepare(ids)))
        return found

    def _gather_later(self, key: str, cached: FilterMatch) -> None:
        """A filter used again: its codes gathered or in own lists (`AnnIndex.with_codes`) and its lexical rows prepared
        (`LexicalIndex.prepare_rows`) on this version's gathering thread; until then, searches run as the first did."""
        def gather() -> None:
            prepared, rows_tried = cached.prepared, bool(cached._rows)
            assert prepared is not None
            try:  # tried once; without them, searches go on as before
                prepared = prepared if cached.codes_tried else self.ann.with_codes(prepared)
                if rows_tried and self.lexical is not None:  # kept by the engine while the rows array lives
                    self.lexical.prepare_rows(cached._rows[0])
            except (MemoryError, OSError) as exc:  # no memory for them, or a mapped file's read failed
                log.warning("filter %s: its codes or lexical rows were not prepared: %s", key[:200], exc)
            done = FilterMatch(cached.ids, prepared, cached._rows, codes_tried=True, rows_tried=rows_tried)
            if self.filters.get(key) is cached:  # not evicted meanwhile
                self.filters.put(key, done)

        self._later.submit(key, gather)

    def warm_filters(self) -> None:
        """Find, on a thread of its own, what the first filtered search of this version needs once (IVF: which list
        holds each id, 16 bytes per vector; at 10M it cost a first filter seconds), when it has metadata to filter:
        serving calls it, so that a new filter's first request pays for its own matches only."""
        if self.store.metadata_schema():
            threading.Thread(target=self.ann.warm_filters, name="filter-warm", daemon=True).start()

    def search(self, vectors: np.ndarray, k: int, match: FilterMatch | None = None, *,
               search_params: dict[str, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(scores, ids), each (n, k); missing hits have id -1. With a `match`, only its documents are searched
        (`AnnIndex.filtered_search`: exact when few enough match). `search_params`: this search's parameters."""
        if match is None:
            return self.ann.search(vectors, k, search_params=search_params)
        assert match.prepared is not None, "a match prepared for this process's index"
        scores, ids, _ = self.ann.filtered_search(vectors, k, match.prepared, search_params=search_params)
        return scores, ids

    def hits(self, scores: np.ndarray, ids: np.ndarray, passages: bool = False, since: int | None = None
             ) -> list[list[Hit]]:
        """Per query, its hits with external ids, texts and metadata, without the -1 padding (`passages`: passage
        rows as their documents, `hits_from_store`); `since` has no effect: a version is never written."""
        return hits_from_store(self.store, scores, ids, passages)

    def ext_ids(self, ids: list[int]) -> dict[int, int | str]:
        return self.store.ext_ids(ids)

    def doc_rows(self, ids: np.ndarray) -> np.ndarray:
        return self.store.doc_rows(ids)

    def query_vectors(self) -> np.ndarray | None:
        path = self.folder / QUERY_VECTORS
        return np.load(path) if path.is_file() else None

    def close(self) -> None:
        self._later.close()  # no gathering reads a closed index
        self.store.close()


def vectors_by_id(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    """(ids, vectors) of a version's index, sorted by id: two builds compare row for row."""
    version = IndexVersion(folder)
    try:
        ids, vecs = version.ann.stored_vectors()
    finally:
        version.close()
    order = np.argsort(ids)
    return ids[order], vecs[order]
