"""Whether a build splits its documents into passages (`indexer build --chunk`), and how: the settings checked
before any work, the decision made with its reason (logged and recorded in the manifest's `passages`).

`--chunk TOKENS` splits (`--overlap TOKENS`, default an eighth of the chunk); `--chunk off` indexes whole
documents; `--chunk auto`, the default, splits when more than `passages.LONG_SHARE` (10 %) of the documents (the
first `AUTO_SAMPLE` read, fewer when they pass `AUTO_SAMPLE_CHARS`; read once, the ingest goes on from them) run
past the encoder's window, and never a corpus whose rows bring their vectors (a vector stands for a whole
document). The evidence for the default is in docs/passages.md (`bench/passages.py`): passages lose nothing
significant on corpora of long documents and gain where the answer sits past the window; a corpus of short
texts has no document past it and is indexed whole. A version of passages is evaluated
and gated like any other: evaluations rank its documents by their best passage (`indexer.doc_ranks`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from indexer.doc_limits import encoding_prefix
from indexer.runtime.manifest import PassagesInfo
from indexer.runtime.passages import PassageError, Splitter, check_sizes, decide

if TYPE_CHECKING:
    from indexer.corpus import CorpusSource
    from indexer.runtime.encoder import OnnxEncoder

log = logging.getLogger(__name__)

AUTO_SAMPLE = 2000  # documents whose token lengths decide --chunk auto
AUTO_SAMPLE_CHARS = 4_000_000  # or fewer when they are long: the sample is held until the ingest takes it
AUTO_CHUNK = 254  # --chunk auto's passages: the encoder's whole window (256) less [CLS] and [SEP]


OFF, AUTO = "off", "auto"


def parse_chunk(value: str) -> int | str:
    """`--chunk`: a number of tokens, `auto` or `off`."""
    v = value.strip().lower()
    if v in (OFF, AUTO):
        return v
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"--chunk {value!r}: a number of tokens, 'auto' or 'off'") from None


def default_overlap(chunk: int) -> int:
    return chunk // 8


def check_chunking(chunk: int | str | None, overlap: int | None, max_length: int) -> None:
    """Refuse bad --chunk/--overlap before any work (the message names the flag)."""
    if chunk in (None, OFF):
        if overlap is not None:
            raise ValueError("--overlap needs --chunk")
        return
    size = min(AUTO_CHUNK, max_length - 2) if chunk == "auto" else int(chunk)
    try:
        check_sizes(size, default_overlap(size) if overlap is None else overlap, max_length)
    except PassageError as exc:
        raise ValueError(f"--chunk/--overlap: {exc}") from None


def _window_counts(splitter: Splitter, texts: list[str], window: int) -> list[int]:
    """Each text's token count as far as `decide` needs it (past `window` or not): only a prefix that holds more
    than `window` tokens is tokenized, a few texts at a time, so a long text costs no more than a short one."""
    counts: list[int] = []
    for s in range(0, len(texts), 64):
        counts += splitter.token_counts([encoding_prefix(t, window + 1) for t in texts[s:s + 64]])
    return counts


def resolve(chunk: int | str | None, overlap: int | None, source: CorpusSource, encoder: OnnxEncoder
            ) -> tuple[Splitter | None, PassagesInfo]:
    """The splitter the build uses (None: whole documents) and the manifest's record of why (logged)."""
    window = encoder.meta.max_length - 2
    if chunk in (None, OFF):
        info = PassagesInfo(enabled=False, reason="off: --chunk off (documents whole)")
        log.info("passages %s", info.reason)
        return None, info
    size = min(AUTO_CHUNK, window) if chunk == "auto" else int(chunk)
    over = default_overlap(size) if overlap is None else overlap
    splitter = Splitter(encoder.tokenizer, size, over, encoder.meta.max_length)
    if chunk == AUTO:
        sample = source.sample(AUTO_SAMPLE, AUTO_SAMPLE_CHARS)  # read once: the ingest goes on from it
        texts = [d.text for d in sample if d.text]
        if any(d.vector is not None for d in sample):
            on, why = False, "off: the rows bring their vectors (each stands for a whole document)"
        else:
            on, why = decide(_window_counts(splitter, texts, window), window)
        reason = f"--chunk auto, first {len(texts):,} documents: {why}"
        if not on:
            log.info("passages %s", reason)
            return None, PassagesInfo(enabled=False, reason=reason)
    else:
        reason = f"--chunk {size}"
    log.info("passages on (%s): chunk %d tokens, overlap %d", reason, size, over)
    return splitter, PassagesInfo(enabled=True, chunk=size, overlap=over, reason=reason)
