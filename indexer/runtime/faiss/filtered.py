"""Filtered search: a search restricted to a set of ids *inside* the scan (a FAISS ID selector), never by dropping
hits afterwards.

A metadata filter becomes a set of FAISS ids; the search must return what the same index search restricted to
those documents returns. FAISS applies an ID selector inside the scan of each probed list, so nothing is lost
to post-filtering. Two problems remain, and the rule in `filtered_search` answers both:
- with a selective filter, nprobe lists hold few matches (at 1 % selectivity, 20 of 1,024 lists hold ~20
  matching vectors of 100k: fewer than a top 10 should choose from). So nprobe grows as the selectivity
  falls (`filtered_nprobe`): the probed lists then hold about as many *matching* vectors as an unfiltered
  search scans, and the scan still only computes distances for matches.
- once that many lists would be probed anyway, the lists that hold a match are probed instead, all of them:
  every matching vector is scored, so the answer is exact (brute force over the matching documents), and it
  costs no more than the approximate search would. For a small matching set this is far cheaper than an IVF
  scan (100 matches of 100k sit in ~100 lists of ~100 vectors each), and it needs no copy of the vectors:
  the scores come from the lists' own codes, the same numbers an unfiltered search gives those documents.

A filter used again gets more: a few matches' codes gathered and scored exactly (`Gathered`, `exact_pays`), or,
where the IVF search stays the cheaper, the matches' codes copied into inverted lists of their own (`OwnLists`,
`own_lists_pay`) over the index's own coarse quantizer. The filtered IVF search then probes the same lists and
scores the same codes, so it returns the same hits, without walking the other documents' ids through the selector.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import faiss
import numpy as np

from indexer.runtime.faiss.exact import code_dtype
from indexer.runtime.faiss.training import clamp_nprobe

# The selector is a bitmap over the ids (a bit test per scanned vector, built in well under a millisecond) when
# it is small: at most 128 KiB or 8 bytes per matching id (the size of the id array itself); otherwise FAISS's
# hash set (IDSelectorBatch: a bloom filter and a hash set, ~6 ms to build for 50k ids, ~40 bytes per id).
# Quora qids and dense integer ids take the bitmap; string ids (FAISS ids from 2^62) the hash set.
BITMAP_MIN_BITS = 1 << 20
BITMAP_BITS_PER_ID = 64


@dataclass(frozen=True)
class IdFilter:
    """Matching ids prepared for filtered searches of one index (build once, search many times)."""

    ids: np.ndarray  # sorted int64: the matching ids this index holds
    lists: np.ndarray  # int64: the inverted lists that hold at least one of them
    gathered: Gathered | None = None  # the matches' own codes, when scoring them all is the cheaper search
    own: OwnLists | None = None  # the matches' codes in lists of their own (a filter used again: `OwnLists`)
    # (the selector, what it points into): built on first use (`selector`), so that a filter only lexical searches
    # use never builds one; FAISS keeps a pointer into the bitmap, not a copy
    _built: list[tuple[faiss.IDSelector, object]] = field(default_factory=list, compare=False, repr=False)

    @property
    def selector(self) -> faiss.IDSelector | None:
        """A FAISS selector of `ids` (None when nothing matches), built on first use and kept."""
        if not len(self.ids):
            return None
        if not self._built:  # two threads may both build one: the first is kept, the same either way
            self._built.append(id_selector(self.ids))
        return self._built[0][0]

    @property
    def nbytes(self) -> int:
        """Memory held (ids, lists, the selector's bitmap, counted before it is built so that a cache's bound holds,
        the gathered codes; FAISS's hash set is not counted)."""
        bitmap = (_bitmap_bits(self.ids) + 7) // 8 if len(self.ids) else 0
        return (self.ids.nbytes + self.lists.nbytes + bitmap + (self.gathered.nbytes if self.gathered else 0)
                + (self.own.nbytes if self.own else 0))


# Cardinality planning (what Qdrant and Vespa do with a filter's estimated size): a filter matching few vectors is
# answered by scoring exactly those vectors, copied once out of their lists ("gathered") into a small index of the
# same codes, held with the filter in the version's cache. A filtered IVF search instead walks every id of each
# probed list through the selector; at 1 % of 1M documents the probed lists are all 4,096 of them (nprobe grows as
# the selectivity falls), a million ids checked and pages touched for ten thousand scored. The choice compares the
# two costs in id checks, one distance over a vector's codes counting DISTANCE_COST of them
# (bench/results/filtered-scale-*.md); gathered codes are bounded by GATHER_MAX_BYTES per filter.
DISTANCE_COST = 8
GATHER_MAX_BYTES = 128 << 20


def exact_pays(n_match: int, nprobe: int, ntotal: int, nlist: int, code_size: int) -> bool:
    """Whether scoring the `n_match` matching vectors themselves costs no more than the filtered IVF search at
    `filtered_nprobe` (ids checked in the probed lists, plus the distances of the matches among them)."""
    if n_match <= 0 or n_match * code_size > GATHER_MAX_BYTES:
        return False
    probe = filtered_nprobe(nprobe, n_match, ntotal, nlist)
    checked = probe * ntotal / nlist
    return n_match * DISTANCE_COST <= checked + n_match * probe / nlist * DISTANCE_COST


def own_lists_pay(n_match: int, ntotal: int, code_size: int) -> bool:
    """Whether a filter used again, too wide for `exact_pays`, gets its matches' codes in lists of their own: when
    the filtered IVF scan's id checks (every vector of each probed list) are at least half its cost (the matches'
    distances the rest), within `GATHER_MAX_BYTES` of codes."""
    return 0 < n_match * DISTANCE_COST <= ntotal and n_match * code_size <= GATHER_MAX_BYTES


@dataclass(frozen=True)
class OwnLists:
    """A filter's matches in inverted lists of their own: an IVF index of the same kind, codec and coarse quantizer
    as the index searched (its centroids, not a copy), each match's codes copied from its list into the same list
    number, in the same order. Searched at the filtered nprobe it probes the same lists and scores the same codes
    as the selector-filtered search of the whole index, so it finds the same hits, checking no other id."""

    index: faiss.IndexIVF
    whole: faiss.Index  # the index whose quantizer `index` reads: kept alive while this is
    n_bytes: int

    @property
    def nbytes(self) -> int:
        return self.n_bytes

    def search(self, queries: np.ndarray, k: int, nprobe: int) -> tuple[np.ndarray, np.ndarray]:
        params = faiss.SearchParametersIVF(nprobe=clamp_nprobe(nprobe, self.index.nlist))  # type: ignore[call-arg]
        return self.index.search(queries, k, params=params)


def _empty_like(ivf: faiss.IndexIVF) -> faiss.IndexIVF | None:
    """An empty IVF index over `ivf`'s coarse quantizer with its codec (None: a kind this does not copy)."""
    if isinstance(ivf, faiss.IndexIVFFlat):
        out = faiss.IndexIVFFlat(ivf.quantizer, ivf.d, ivf.nlist, ivf.metric_type)
    elif isinstance(ivf, faiss.IndexIVFScalarQuantizer):
        out = faiss.IndexIVFScalarQuantizer(ivf.quantizer, ivf.d, ivf.nlist, ivf.sq.qtype, ivf.metric_type,
                                            ivf.by_residual)
        out.sq = ivf.sq  # the trained ranges (SQ8) too
    else:
        return None
    if int(out.code_size) != int(ivf.code_size):
        return None
    out.is_trained = True
    return out


@dataclass(frozen=True)
class Gathered:
    """Copies of some vectors' codes, searched exactly with the distances their IVF lists give (same codec)."""

    ids: np.ndarray  # int64, the FAISS id of each row
    index: faiss.Index  # IndexFlatIP or IndexScalarQuantizer over the rows (inner product)

    @property
    def nbytes(self) -> int:
        return self.ids.nbytes + len(self.ids) * int(self.index.code_size)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        n = len(queries)
        scores = np.full((n, k), -np.inf, dtype=np.float32)
        ids = np.full((n, k), -1, dtype=np.int64)
        kk = min(k, len(self.ids))
        s, rows = self.index.search(queries, kk)
        found = rows >= 0
        scores[:, :kk] = np.where(found, s, -np.inf)
        ids[:, :kk] = np.where(found, self.ids[np.clip(rows, 0, None)], -1)
        return scores, ids


def _scorer_for(ivf: faiss.IndexIVF) -> faiss.Index | None:
    """An empty index scoring `ivf`'s list codes as they are (None: codes of residuals, or a codec it cannot)."""
    if ivf.by_residual and not isinstance(ivf, faiss.IndexIVFFlat):
        return None
    if isinstance(ivf, faiss.IndexIVFFlat) and ivf.metric_type == faiss.METRIC_INNER_PRODUCT:
        return faiss.IndexFlatIP(ivf.d)
    if isinstance(ivf, faiss.IndexIVFScalarQuantizer) and ivf.metric_type == faiss.METRIC_INNER_PRODUCT:
        sq = faiss.IndexScalarQuantizer(ivf.d, ivf.sq.qtype, faiss.METRIC_INNER_PRODUCT)
        sq.sq = ivf.sq  # the trained ranges (SQ8) too
        sq.is_trained = True
        return sq
    return None


def _bitmap_bits(ids: np.ndarray) -> int:
    """The bits of `id_selector`'s bitmap for sorted int64 `ids` (0: it takes the hash set)."""
    top = int(ids[-1]) + 1
    return top if ids[0] >= 0 and top <= max(BITMAP_MIN_BITS, BITMAP_BITS_PER_ID * len(ids)) else 0


def id_selector(ids: np.ndarray) -> tuple[faiss.IDSelector, object]:
    """A FAISS selector for sorted int64 `ids` (a bitmap where it is small, else FAISS's hash set: negative or
    sparse ids), and the array it reads (keep it alive)."""
    if top := _bitmap_bits(ids):
        bits = np.zeros(top, dtype=bool)
        bits[ids] = True
        bitmap = np.packbits(bits, bitorder="little")  # FAISS tests bit (id & 7) of byte id >> 3
        return faiss.IDSelectorBitmap(len(bitmap), faiss.swig_ptr(bitmap)), bitmap  # n: bytes, not bits
    return faiss.IDSelectorBatch(ids), ids


def by_id(ids: np.ndarray, lists: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids, lists, offsets) reordered by ascending id. A build's ids are its rows (0..N-1, a few gaps after
    writes), so they are placed by scatter, in linear time; a sort only for sparse ids (string ids, from 2^62) or
    repeats (the two timed: docs/decisions.md)."""
    top = int(ids.max()) + 1 if len(ids) else 0
    if len(ids) and int(ids.min()) >= 0 and top <= 2 * len(ids) + BITMAP_MIN_BITS:
        at = np.full(top, -1, dtype=np.int64)
        at[ids] = np.arange(len(ids))
        if top == len(ids) and (at >= 0).all():  # every id 0..N-1 once: `at` is the order itself
            return np.arange(top, dtype=np.int64), lists[at], offsets[at]
        order = at[at >= 0]
        if len(order) == len(ids):
            return ids[order], lists[order], offsets[order]
    order = np.argsort(ids, kind="stable")
    return ids[order], lists[order], offsets[order]


class ListLocator:
    """Where each id of an IVF index sits: its inverted list and place there (16 bytes per vector, read once from
    the lists): what `prepare` needs to know which lists an exact filtered search must probe, and to gather the
    codes of a few matches."""

    def __init__(self, index: faiss.Index) -> None:
        ivf = self._ivf = ivf_of(index)
        invlists = ivf.invlists
        ids = [np.zeros(0, dtype=np.int64)]
        self._sizes = np.zeros(ivf.nlist, dtype=np.int64)
        for lst in range(ivf.nlist):
            size = self._sizes[lst] = invlists.list_size(lst)
            if size:  # a view of the list's ids, copied by the concatenation below
                ids.append(faiss.rev_swig_ptr(invlists.get_ids(lst), size))
        all_ids = np.concatenate(ids)
        all_lists = np.repeat(np.arange(ivf.nlist, dtype=np.int32), self._sizes)
        starts = np.concatenate([[0], np.cumsum(self._sizes)[:-1]])
        all_offsets = (np.arange(len(all_ids)) - np.repeat(starts, self._sizes)).astype(np.int32)
        self.ids, self.lists, self.offsets = by_id(all_ids, all_lists, all_offsets)
        n = len(self.ids)
        self._rows = n > 0 and int(self.ids[-1]) == n - 1 and bool((self.ids == np.arange(n)).all())  # 0..N-1
        self._views: list[np.ndarray | None] | None = None
        self._scorer = _scorer_for(ivf)
        self._whole = index

    def prepare(self, ids: np.ndarray, gather: Callable[[int], bool] = lambda n: False) -> IdFilter:
        """The ids among `ids` (any order, repeats allowed) that this index holds, their lists and a selector;
        their codes gathered too when `gather(number of matches)` says so (and the codec allows it)."""
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) > 1 and not (ids[1:] > ids[:-1]).all():  # the store's ids come sorted: no second sort
            ids = np.unique(ids)
        if len(self.ids) == 0 or len(ids) == 0:
            return IdFilter(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        if self._rows:  # ids 0..N-1: an id is its own place
            ids = pos = ids[(ids >= 0) & (ids < len(self.ids))]
        else:
            pos = np.minimum(np.searchsorted(self.ids, ids), len(self.ids) - 1)
            held = self.ids[pos] == ids
            ids, pos = ids[held], pos[held]
        if len(ids) == 0:
            return IdFilter(ids, np.zeros(0, dtype=np.int64))
        lists = np.flatnonzero(np.bincount(self.lists[pos], minlength=1))  # the lists holding a match, in order
        gathered = self.gather(pos) if self._scorer is not None and gather(len(ids)) else None
        return IdFilter(ids, lists.astype(np.int64), gathered=gathered)  # its selector built when first searched

    @property
    def can_gather(self) -> bool:
        """Whether this index's codes can be scored outside their lists (not residuals, a codec `Gathered` takes)."""
        return self._scorer is not None

    def _code_views(self) -> list[np.ndarray | None]:
        """Views into the lists' codes: valid while the index is unchanged (a change drops this locator) and, for a
        memory-mapped index, read from the mapping without a copy."""
        if self._views is None:
            invlists, cs = self._ivf.invlists, int(self._ivf.code_size)
            self._views = [faiss.rev_swig_ptr(invlists.get_codes(lst), int(size) * cs).reshape(int(size), cs)
                           if size else None for lst, size in enumerate(self._sizes.tolist())]
        return self._views

    def vectors_of(self, ids: np.ndarray) -> np.ndarray:
        """The vectors held under `ids` (one row each, in their order) as the lists' codes decode them (SQfp16:
        rounded to float16; SQ8: its 8-bit grid); KeyError for an id this index does not hold."""
        ids = np.asarray(ids, dtype=np.int64)
        dim, dtype = self._ivf.d, code_dtype(self._ivf)
        if not len(ids):
            return np.zeros((0, dim), dtype=np.float32)
        pos = np.minimum(np.searchsorted(self.ids, ids), max(0, len(self.ids) - 1))
        missing = ids[self.ids[pos] != ids] if len(self.ids) else ids
        if len(missing):
            raise KeyError(f"id {int(missing[0])} is not in this index")
        views = self._code_views()
        codes = np.stack([views[lst][off] for lst, off in  # type: ignore[index]
                          zip(self.lists[pos].tolist(), self.offsets[pos].tolist(), strict=True)])
        if dtype is np.uint8:
            return self._ivf.sq.decode(codes)
        return codes.view(dtype).reshape(len(ids), dim).astype(np.float32)

    def _copy_codes(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[int], list[int]]:
        """The codes of the vectors at `pos` (positions in `self.ids`), list by list in place order (each list's
        codes read forwards): (codes, the order of `pos` they are in, each run's start, each run's end)."""
        views = self._code_views()
        lists, offsets = self.lists[pos], self.offsets[pos]
        order = np.lexsort((offsets, lists))
        lists, offsets = lists[order], offsets[order]
        cuts = (np.flatnonzero(np.diff(lists)) + 1).tolist()
        starts, ends = [0, *cuts], [*cuts, len(pos)]
        codes = np.empty((len(pos), int(self._ivf.code_size)), dtype=np.uint8)
        for a, b in zip(starts, ends, strict=True):
            codes[a:b] = views[int(lists[a])][offsets[a:b]]  # type: ignore[index]
        return codes, order, starts, ends

    def own_lists(self, pos: np.ndarray) -> OwnLists | None:
        """The vectors at `pos` (positions in `self.ids`) in lists of their own (`OwnLists`; None: a kind it does
        not copy)."""
        out = _empty_like(self._ivf)
        if out is None or not len(pos):
            return None
        codes, order, starts, ends = self._copy_codes(pos)
        ids = np.ascontiguousarray(self.ids[pos][order])
        lists = self.lists[pos][order]
        invlists = out.invlists
        for a, b in zip(starts, ends, strict=True):
            invlists.add_entries(int(lists[a]), b - a, faiss.swig_ptr(ids[a:b]), faiss.swig_ptr(codes[a:b]))
        out.ntotal = len(pos)
        # held: the codes and ids, copied into the lists, and each list's two (mostly empty) std::vectors
        return OwnLists(out, self._whole, codes.nbytes + ids.nbytes + 48 * int(out.nlist))

    def gather(self, pos: np.ndarray) -> Gathered:
        """The codes of the vectors at `pos` (positions in `self.ids`), copied list by list into a scorer."""
        codes, order, _, _ = self._copy_codes(pos)
        scorer = faiss.clone_index(self._scorer)
        if isinstance(scorer, faiss.IndexFlat):
            scorer.add(codes.view(np.float32))
        else:
            faiss.copy_array_to_vector(codes.ravel(), scorer.codes)
            scorer.ntotal = len(pos)
        return Gathered(self.ids[pos][order], scorer)


def ivf_of(index: faiss.Index) -> faiss.IndexIVF:
    ivf = faiss.downcast_index(index)
    if not isinstance(ivf, faiss.IndexIVF):
        raise ValueError(f"filtered search needs an IVF index, not {type(ivf).__name__}")
    return ivf


def filtered_nprobe(nprobe: int, n_match: int, ntotal: int, nlist: int) -> int:
    """Lists to probe when only `n_match` of `ntotal` vectors may be returned: nprobe / selectivity, so that the
    probed lists hold about as many matching vectors as an unfiltered search at `nprobe` scans (clamped to
    nlist). At 50 % that is 2 × nprobe; at 10 %, 10 ×."""
    if n_match <= 0 or n_match >= ntotal:
        return clamp_nprobe(nprobe, nlist)
    return clamp_nprobe(math.ceil(nprobe * ntotal / n_match), nlist)


def filtered_search(index: faiss.Index, vectors: np.ndarray, k: int, flt: IdFilter, probe: int
                    ) -> tuple[np.ndarray, np.ndarray, bool]:
    """(scores, ids, exact): the top k of each query among the ids of `flt` only; missing hits have id -1.

    `probe` is the number of lists the approximate search probes (`filtered_nprobe`). When the lists holding a
    match are no more than that, exactly those lists are probed instead (`exact` True): every match is scored,
    so the answer is brute force over the matching vectors. Otherwise the IVF search probes `probe` lists with
    the selector applied inside the scan."""
    ivf = ivf_of(index)
    queries = np.ascontiguousarray(vectors, dtype=np.float32)
    n = len(queries)
    if flt.selector is None:
        return np.full((n, k), -np.inf, dtype=np.float32), np.full((n, k), -1, dtype=np.int64), True
    if flt.gathered is not None:  # few matches: their codes scored exactly, no list walked (`exact_pays`)
        scores, ids = flt.gathered.search(queries, k)
        return scores, ids, True
    if flt.own is not None and len(flt.lists) > probe:  # the same search over the matches' own lists
        scores, ids = flt.own.search(queries, k, probe)
        return scores, ids, False
    if len(flt.lists) <= probe:
        assign = np.ascontiguousarray(np.broadcast_to(flt.lists, (n, len(flt.lists))))
        # Coarse scores (query · centroid) only enter codes that hold residuals; Strata's lists hold the vectors
        # (Flat, fp16 without residuals), but an index from `indexer tune` (SQ8) may not.
        if ivf.by_residual and not isinstance(ivf, faiss.IndexIVFFlat):
            coarse = queries @ ivf.quantizer.reconstruct_batch(flt.lists).T
            coarse = np.ascontiguousarray(np.broadcast_to(coarse, assign.shape), dtype=np.float32)
        else:
            coarse = np.zeros(assign.shape, dtype=np.float32)
        params = faiss.SearchParametersIVF(sel=flt.selector, nprobe=len(flt.lists))
        scores = np.empty((n, k), dtype=np.float32)
        ids = np.empty((n, k), dtype=np.int64)
        # the C++ call: the Python wrapper of search_preassigned takes no search parameters (no selector)
        ivf.search_preassigned_c(n, faiss.swig_ptr(queries), k, faiss.swig_ptr(assign), faiss.swig_ptr(coarse),
                                 faiss.swig_ptr(scores), faiss.swig_ptr(ids), False, params)
        return scores, ids, True
    params = faiss.SearchParametersIVF(sel=flt.selector, nprobe=clamp_nprobe(probe, ivf.nlist))
    scores, ids = ivf.search(queries, k, params=params)
    return scores, ids, False
