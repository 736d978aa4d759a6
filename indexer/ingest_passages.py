"""A build's passages (`indexer build --chunk`): the rows each document makes, and a repeated id's last occurrence
winning for all of its passages.

Rows stream into the store and the vector array as they are read, so a document whose id comes again replaces its
passages row by row (`passage_id(doc, n)` is the same row). A repeat with fewer passages would leave the earlier
occurrence's last ones behind; `BuildPassages` remembers each document's current count and the passages no
occurrence since has rewritten (`stale`), which `drop_stale` removes from the store, the ids and the vectors once
the corpus is read — so the version holds exactly the last occurrence's passages, as it holds the last row of a
repeated id without passages.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np

from indexer.corpus_rows import CorpusFormatError, Doc, ExtId
from indexer.doc_limits import MAX_PASSAGES
from indexer.runtime.passages import Splitter, passage_id, passage_rows

if TYPE_CHECKING:
    from indexer.runtime.store_writer import CorpusStoreWriter

log = logging.getLogger(__name__)


class BuildPassages:
    """Splits each document of a build (`rows_of`) and keeps what `drop_stale` needs: each document's passage
    count (its last occurrence's) and the passage rows of earlier occurrences that no later one rewrote."""

    def __init__(self, splitter: Splitter) -> None:
        self.splitter = splitter
        self.counts: dict[tuple[type, ExtId], int] = {}  # 17 and "17" are two documents
        self.stale: dict[str, None] = {}  # passage row ids, in the order they went stale
        self.docs_cut = 0  # documents whose passages past `MAX_PASSAGES` were dropped

    def rows_of(self, doc: Doc) -> list[tuple[ExtId, str, dict[str, Any]]]:
        """(row id, passage text, row metadata) of each passage of `doc`."""
        if doc.vector is not None:
            raise CorpusFormatError(f"{doc.where}: the row brings a vector, which stands for the whole document; "
                                    f"--chunk indexes a vector per passage: build without --chunk, or without the "
                                    f"vectors (encoded then)")
        made = self.splitter.split(doc.text)
        if len(made) > MAX_PASSAGES:  # the document's text is already cut; this bounds its rows whatever it holds
            made, self.docs_cut = made[:MAX_PASSAGES], self.docs_cut + 1
        parts: list[tuple[ExtId, str, dict[str, Any]]] = list(passage_rows(doc.ext_id, doc.text, doc.metadata, made))
        key = (type(doc.ext_id), doc.ext_id)
        before = self.counts.get(key, 0)
        self.counts[key] = len(parts)
        if self.stale and before:  # rows this occurrence rewrites are live again
            for rid, _, _ in parts:
                self.stale.pop(rid, None)  # type: ignore[arg-type]
        for n in range(len(parts), before):
            self.stale[passage_id(doc.ext_id, n)] = None
        return parts

    @property
    def passages(self) -> int:
        return sum(self.counts.values())

    @property
    def docs_split(self) -> int:
        return sum(1 for c in self.counts.values() if c > 1)


def drop_stale(stale: list[str], row_of: dict[ExtId, int], faiss_ids: np.ndarray, vectors: np.ndarray | None,
               writer: CorpusStoreWriter) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """Remove the rows `stale` (passage row ids) from the store being written and from the build's arrays:
    returns the kept FAISS ids, the kept vectors (a copy: the rare path of a repeated id with fewer passages) and
    the rows kept (positions into the arrays as they were)."""
    rows = np.asarray(sorted(row_of[r] for r in stale if r in row_of), dtype=np.int64)
    writer.delete([int(faiss_ids[r]) for r in rows])
    keep = np.ones(len(faiss_ids), dtype=bool)
    keep[rows] = False
    log.info("%d passages of earlier occurrences of repeated ids dropped (the last occurrence wins)", len(rows))
    return faiss_ids[keep], None if vectors is None else np.ascontiguousarray(vectors[keep]), np.flatnonzero(keep)
