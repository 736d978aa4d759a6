"""Each document's analysed terms, kept beside a version's lexical index, so that a compaction analyses only the
documents written since its parent.

    <version>/lexical/analysed.i4           every row's term ids, row after row (little-endian int32)
    <version>/lexical/analysed.offsets.i8   row r's are terms[offsets[r]:offsets[r + 1]] (little-endian int64, rows + 1)
    <version>/lexical/analysed.json         the analyser they came from (stemmer, stopwords) and the terms by id

They are written as the build goes, a block at a time, so that a streamed build holds only the vocabulary, as
its engine does.

A compaction rebuilds the version's lexical index from every document its store holds, and the analysis of a text
(a regular expression, a stopword list and a stemmer, in Python) is most of that build for short texts; all the
documents but the ones written since the parent were analysed the same way when the parent was built. `Recorder`
keeps the terms as a build analyses them; `Reuse` hands them back for the documents the write log did not touch,
when the same analyser made them. A parent without them (a version of passages, whose rows are not documents, or
one built before they were kept) is analysed in full.
"""

from __future__ import annotations

import json
import logging
from array import array
from collections.abc import Iterable
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

TERMS_FILE, OFFSETS_FILE, VOCAB_FILE = "analysed.i4", "analysed.offsets.i8", "analysed.json"
TERMS_DTYPE, OFFSETS_DTYPE = np.dtype("<i4"), np.dtype("<i8")
FLUSH_EVERY = 16_384  # term ids buffered before they are written


class Recorder:
    """The terms of each row, in the order they are analysed (a build's: ascending FAISS ids), written into the
    lexical folder being built as they come."""

    def __init__(self, folder: Path, analyser: tuple[str, str]) -> None:
        self.folder, self.analyser = folder, analyser  # (stemmer, stopwords)
        self._ids: dict[str, int] = {}
        self._terms, self._offsets = array("i"), array("q", [0])
        self._written = 0  # term ids written so far
        self._files = (open(folder / TERMS_FILE, "wb"), open(folder / OFFSETS_FILE, "wb"))  # noqa: SIM115

    def add(self, terms: list[str]) -> None:
        ids = self._ids
        self._terms.extend([ids.setdefault(t, len(ids)) for t in terms])
        self._offsets.append(self._written + len(self._terms))
        if len(self._terms) >= FLUSH_EVERY:
            self._flush()

    def _flush(self) -> None:
        self._files[0].write(np.frombuffer(self._terms, dtype=np.int32).astype(TERMS_DTYPE).tobytes())
        self._files[1].write(np.frombuffer(self._offsets, dtype=np.int64).astype(OFFSETS_DTYPE).tobytes())
        self._written += len(self._terms)
        self._terms, self._offsets = array("i"), array("q")

    def save(self) -> None:
        """The last block and the vocabulary written, the files closed."""
        self._flush()
        for f in self._files:
            f.close()
        (self.folder / VOCAB_FILE).write_text(json.dumps({"stemmer": self.analyser[0], "stopwords": self.analyser[1],
                                                          "terms": list(self._ids)}))

    def close(self) -> None:
        for f in self._files:
            f.close()


class Reuse:
    """A parent version's analysed terms, for the documents of a new build that the parent held unchanged. Asked in
    ascending FAISS id order (a streamed build's), it walks the parent's rows once."""

    def __init__(self, rows: np.ndarray, terms: np.ndarray, offsets: np.ndarray, vocab: list[str],
                 changed: Iterable[int]) -> None:
        # read from their files (mapped) as the build walks them: a parent of 10M documents is not held in memory
        self._rows, self._terms, self._offsets, self._vocab = rows, terms, offsets, vocab
        self._changed = set(changed)
        self._at = 0  # the first parent row not passed yet
        self.reused = 0

    @classmethod
    def open(cls, folder: Path, rows_file: str, analyser: tuple[str, str], changed: Iterable[int]) -> Reuse | None:
        """The parent's `folder` (its lexical folder) read back, or None when it keeps no analysed terms, another
        analyser made them, or they cannot be read (then the build analyses everything, as without)."""
        try:
            meta = json.loads((folder / VOCAB_FILE).read_text())
            if (meta["stemmer"], meta["stopwords"]) != analyser:
                return None
            rows = np.load(folder / rows_file, mmap_mode="r")
            terms = np.memmap(folder / TERMS_FILE, dtype=TERMS_DTYPE, mode="r") \
                if (folder / TERMS_FILE).stat().st_size else np.zeros(0, TERMS_DTYPE)
            offsets = np.memmap(folder / OFFSETS_FILE, dtype=OFFSETS_DTYPE, mode="r")
            vocab = list(meta["terms"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            if (folder / VOCAB_FILE).exists():
                log.warning("the analysed terms in %s cannot be read (%s): every text is analysed again", folder, exc)
            return None
        if len(offsets) != len(rows) + 1 or (len(terms) and int(terms.max()) >= len(vocab)) or \
                int(offsets[-1]) != len(terms):
            log.warning("the analysed terms in %s do not fit its rows: every text is analysed again", folder)
            return None
        return cls(rows, terms, offsets, vocab, changed)

    def terms(self, fid: int) -> list[str] | None:
        """`fid`'s terms as the parent analysed them, or None: written since (or new), so analysed again."""
        rows, at, n = self._rows, self._at, len(self._rows)
        while at < n and rows[at] < fid:
            at += 1
        self._at = at
        if at == n or rows[at] != fid or fid in self._changed:
            return None
        vocab = self._vocab
        self.reused += 1
        return [vocab[i] for i in self._terms[self._offsets[at] : self._offsets[at + 1]].tolist()]
