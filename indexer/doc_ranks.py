"""What an evaluation ranks: a version's rows, or for a version of passages (`indexer build --chunk`), its documents,
each ranked by its best passage — as `/search` returns them — so that qrels, which judge documents, apply.

A document of a version of passages stands in every ranking and judgment for the FAISS id of its passage 0
(`passage_id(doc, 0)`, which every document with text has, and which keeps its FAISS id when a write replaces the
document: `indexer.runtime.ids`). `DocumentRanks.resolver` resolves a qrels file's document ids to those ids; the
build resolves its own with `first_passage_resolver`. A ranked list of passages becomes one of documents by
keeping each document's first (best) passage (`collapse`: max aggregation), searched `passages.fetch_depth(k)`
deep for k documents, as `/search` searches. A version of whole documents ranks its rows, unchanged.

Used by the dense evaluation (`indexer.evaluate`), the gate (`indexer.report`) and the lexical and hybrid ones
(`indexer.eval_modes`), so the swap gate and every mode's figures of a version of passages are document figures.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import numpy as np

from indexer.runtime.ids import ExtId
from indexer.runtime.passages import fetch_depth, parse_passage_id, passage_id

if TYPE_CHECKING:
    from indexer.runtime.version import IndexVersion

_INT = re.compile(r"-?(0|[1-9][0-9]*)")


def first_passage_resolver(lookup: Callable[[list[ExtId]], dict[ExtId, int]]
                           ) -> Callable[[Iterable[str]], dict[str, int]]:
    """Document ids written as strings (qrels: "17" is the string id "17", else the integer 17) → the FAISS id
    of each document's passage 0, found by `lookup` (row ids → FAISS ids); unknown documents are left out."""

    def resolve(keys: Iterable[str]) -> dict[str, int]:
        keys = list(dict.fromkeys(keys))
        as_str = {k: passage_id(k, 0) for k in keys}
        as_int = {k: passage_id(int(k), 0) for k in keys if _INT.fullmatch(k) and abs(int(k)) < 1 << 63}
        found = lookup([*as_str.values(), *as_int.values()])
        out: dict[str, int] = {}
        for k in keys:
            fid = found.get(as_str[k])
            if fid is None and k in as_int:
                fid = found.get(as_int[k])
            if fid is not None:
                out[k] = int(fid)
        return out

    return resolve


class DocumentRanks:
    """How an evaluation of `version` turns its searches into rankings (see the module docstring)."""

    def __init__(self, version: IndexVersion) -> None:
        self.passages = version.manifest.chunking() is not None
        self._store = version.store
        self._rows = np.zeros(0, dtype=np.int64)  # sorted FAISS ids of the passage rows
        self._docs = np.zeros(0, dtype=np.int64)  # beside each, its document's FAISS id (its passage 0's)
        if not self.passages:
            return
        rows = version.store.all_ext_ids()
        first: dict[tuple[type, ExtId], int] = {}
        of_row: list[tuple[int, tuple[type, ExtId]]] = []
        for fid, ext in rows:
            parsed = parse_passage_id(ext)
            key = (type(ext), ext) if parsed is None else (type(parsed[0]), parsed[0])
            if parsed is None or parsed[1] == 0:
                first[key] = fid
            else:  # a document without its passage 0 (none that a build or a write leaves) keeps one of its rows
                first.setdefault(key, fid)
            of_row.append((fid, key))
        of_row.sort()
        self._rows = np.fromiter((f for f, _ in of_row), dtype=np.int64, count=len(of_row))
        self._docs = np.fromiter((first[k] for _, k in of_row), dtype=np.int64, count=len(of_row))

    def depth(self, k: int) -> int:
        """Rows to search for k documents."""
        return fetch_depth(k) if self.passages else k

    def resolver(self) -> Callable[[Iterable[str]], dict[str, int]]:
        """A qrels file's document ids → the ids rankings name them by."""
        return first_passage_resolver(self._store.ids_of) if self.passages else self._store.resolve_ext_ids

    def docs(self, ids: np.ndarray) -> np.ndarray:
        """Each row id's document id (-1 stays -1; a version of whole documents: the ids themselves)."""
        if not self.passages or not len(self._rows):
            return ids
        at = np.clip(np.searchsorted(self._rows, ids), 0, len(self._rows) - 1)
        return np.where((ids >= 0) & (self._rows[at] == ids), self._docs[at], -1)

    def collapse(self, scores: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Ranked rows (one list per query, best first) → each query's top k documents (scores, ids), each scored
        by its best row; padded with -inf / -1."""
        docs = self.docs(ids)
        if not self.passages:
            return scores[:, :k], docs[:, :k]
        return _first_per_row(scores, docs, np.ones(docs.shape, dtype=bool), k)

    def drop_self(self, scores: np.ndarray, ids: np.ndarray, self_docs: np.ndarray, k: int
                  ) -> tuple[np.ndarray, np.ndarray]:
        """Rows (kept as rows, at most k per query) less those of each query's own document (-1: none)."""
        keep = self.docs(ids) != self_docs[:, None]
        return _first_per_row(scores, ids, keep, k, unique=False)


def _first_per_row(scores: np.ndarray, ids: np.ndarray, keep: np.ndarray, k: int, *, unique: bool = True
                   ) -> tuple[np.ndarray, np.ndarray]:
    out_s = np.full((len(ids), k), -np.inf, dtype=np.float32)
    out_i = np.full((len(ids), k), -1, dtype=np.int64)
    for r in range(len(ids)):
        row = ids[r]
        mask = keep[r] & (row >= 0)
        if unique:  # each id's first place, in rank order
            vals, first = np.unique(np.where(mask, row, -1), return_index=True)
            at = np.sort(first[vals >= 0])[:k]
        else:
            at = np.flatnonzero(mask)[:k]
        out_s[r, : len(at)], out_i[r, : len(at)] = scores[r, at], row[at]
    return out_s, out_i
