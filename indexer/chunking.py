"""Whether a build splits its documents into passages (`indexer build --chunk`), and how: the settings checked
before any work, the default decided with its reason (logged and recorded in the manifest's `passages`).

`--chunk TOKENS` splits (`--overlap TOKENS`, default an eighth of the chunk); `--chunk auto` splits when more
than `passages.LONG_SHARE` of the documents (the first `AUTO_SAMPLE` read) run past the encoder's window;
`--chunk off` and no `--chunk` index whole documents. Off stays the default: the build's own evaluation and the
swap gate rank documents by their vectors, and a version of passages is not evaluated by them yet
(docs/passages.md gives the evidence for `auto` and the reasons for the default).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from indexer.runtime.manifest import PassagesInfo
from indexer.runtime.passages import PassageError, Splitter, check_sizes, decide

if TYPE_CHECKING:
    from indexer.corpus import CorpusSource
    from indexer.runtime.encoder import OnnxEncoder

log = logging.getLogger(__name__)

AUTO_SAMPLE = 2000  # documents whose token lengths decide --chunk auto
AUTO_CHUNK = 254  # --chunk auto's passages: the encoder's whole window (256) less [CLS] and [SEP]


def parse_chunk(value: str) -> int | str | None:
    """`--chunk`: a number of tokens, `auto` or `off` (None)."""
    v = value.strip().lower()
    if v == "off":
        return None
    if v == "auto":
        return "auto"
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"--chunk {value!r}: a number of tokens, 'auto' or 'off'") from None


def default_overlap(chunk: int) -> int:
    return chunk // 8


def check_chunking(chunk: int | str | None, overlap: int | None, max_length: int) -> None:
    """Refuse bad --chunk/--overlap before any work (the message names the flag)."""
    if chunk is None:
        if overlap is not None:
            raise ValueError("--overlap needs --chunk")
        return
    size = min(AUTO_CHUNK, max_length - 2) if chunk == "auto" else int(chunk)
    try:
        check_sizes(size, default_overlap(size) if overlap is None else overlap, max_length)
    except PassageError as exc:
        raise ValueError(f"--chunk/--overlap: {exc}") from None


def resolve(chunk: int | str | None, overlap: int | None, source: CorpusSource, encoder: OnnxEncoder
            ) -> tuple[Splitter | None, PassagesInfo]:
    """The splitter the build uses (None: whole documents) and the manifest's record of why."""
    window = encoder.meta.max_length - 2
    if chunk is None:
        info = PassagesInfo(enabled=False, reason="off: --chunk not given (documents whole, the default)")
        log.info("passages %s", info.reason)
        return None, info
    size = min(AUTO_CHUNK, window) if chunk == "auto" else int(chunk)
    over = default_overlap(size) if overlap is None else overlap
    splitter = Splitter(encoder.tokenizer, size, over, encoder.meta.max_length)
    if chunk == "auto":
        texts = [d.text for d in source.docs(AUTO_SAMPLE, None) if d.text]
        on, why = decide(splitter.token_counts(texts), window)
        reason = f"--chunk auto, first {len(texts):,} documents: {why}"
        if not on:
            log.info("passages %s", reason)
            return None, PassagesInfo(enabled=False, reason=reason)
    else:
        reason = f"--chunk {size}"
    log.info("passages on (%s): chunk %d tokens, overlap %d", reason, size, over)
    return splitter, PassagesInfo(enabled=True, chunk=size, overlap=over, reason=reason)
