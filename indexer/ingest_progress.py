"""The documents bar of a build's ingest (`indexer.ingest`): bytes of the input read *and encoded*."""

from __future__ import annotations

from collections.abc import Callable


class ChunkProgress:
    """The documents bar: bytes of the input file as on disk (compressed, for .gz: the size known up front) whose
    rows are read *and encoded*. Rows are read a chunk ahead of the encoder, so the bar moves through each chunk's
    bytes as its texts are encoded; so a corpus of one chunk does not sit at 0 % while all of it is encoded.
    `on_advance(position)` (tests, callers' own displays) hears every move. A bar on a terminal, log lines with
    rate and ETA elsewhere (`indexer.runtime.progress`; `enabled=False`: log lines only)."""

    def __init__(self, total: int, *, enabled: bool = True,
                 on_advance: Callable[[int], None] | None = None) -> None:
        from indexer.runtime.progress import Progress

        self.bar = Progress(total, "documents", unit="B", unit_scale=True, bar=enabled)
        self.on_advance = on_advance
        self.read = 0  # bytes the reader has taken from disk
        self.position = 0  # bytes behind the rows already encoded (or stored, when not encoding)
        self._chunk: tuple[int, int, int] | None = None  # (start position, end position, texts)
        self._done = 0

    def bytes_read(self, n: int) -> None:
        self.read += n

    def start_chunk(self, texts: int) -> None:
        self._chunk, self._done = (self.position, self.read, max(texts, 1)), 0

    def texts_done(self, n: int) -> None:
        if self._chunk is None:
            return
        start, end, texts = self._chunk
        self._done += n
        self._move_to(start + (end - start) * min(self._done, texts) // texts)

    def end_chunk(self, rows: int, unit: str = "docs") -> None:
        """A chunk's rows encoded (or stored): `rows` in all so far, each a `unit` (docs, or a version of passages'
        passages)."""
        self._chunk = None
        self.bar.set_postfix(refresh=False, **{unit: rows})
        self._move_to(self.read)

    def _move_to(self, position: int) -> None:
        if position > self.position:
            self.bar.update(position - self.position)
            self.position = position
            if self.on_advance is not None:
                self.on_advance(position)

    def close(self) -> None:
        self.bar.close()
