"""What a build keeps of one document, whatever one file or row holds, so that its memory follows its batch and
vector sizes, not the largest input.

- `MAX_DOC_CHARS`: a document's text (title joined) is cut at this many characters before anything tokenizes,
  stores or indexes it (about 1 MB of English, some 1,000 passages of 254 tokens); the cut is counted.
- `MAX_ROW_BYTES`: a line of a JSONL, CSV or TSV file longer than this is refused (`FILE:LINE`) without being
  read whole: a row's metadata is bounded too, so nothing a row may hold comes near it.
- `MAX_PASSAGES`: a document makes at most this many passages (the last ones are dropped, counted).
- `READ_BYTES`: of a Markdown, HTML or text file, only the first bytes are read (the rest is cut: markup past them
  could only add text past `MAX_DOC_CHARS` or nothing a reader sees).
- `MAX_PDF_BYTES`, `PDF_SECONDS`: a PDF is parsed whole, so a larger one is skipped unread, and one whose pages
  take longer to read is skipped with that reason (pypdf cannot read a prefix).
- `MAX_HTML_DEPTH`: an HTML page nesting its elements deeper is refused before it is parsed (the parser's time
  grows with the depth times the tags; a page read by people nests a few dozen levels).
- `encoding_prefix`: the text the encoder is given of a document embedded whole: the encoder keeps its first
  `max_length` tokens, so `CHARS_PER_TOKEN` characters per token are plenty (English averages about 4.5) and
  nothing past them is tokenized.
"""

from __future__ import annotations

import re

import numpy as np

MAX_DOC_CHARS = 1_000_000
MAX_PASSAGES = 4096
MAX_ROW_BYTES = 64 * 1024 * 1024
READ_BYTES = 8 * 1024 * 1024
MAX_PDF_BYTES = 256 * 1024 * 1024
PDF_SECONDS = 60.0
MAX_HTML_DEPTH = 2048
CHARS_PER_TOKEN = 32

# tags that never hold others (void) or whose end tag the parser implies (so a page need not close them)
_NO_DEPTH = tuple(("area base br col embed hr img input link meta param source track wbr keygen "
                   "p li dt dd tr td th thead tbody tfoot option optgroup rp rt colgroup caption html head body "
                   "script style").split())
_NAME = 8  # tag names compared on their first bytes: every name above has at most this many
_RAW_TEXT = re.compile(rb"<(script|style)\b.*?</\1\s*>", re.I | re.S)
_COMMENT = re.compile(rb"<!--.*?-->", re.S)


def cut_text(text: str) -> tuple[str, bool]:
    """(the text kept, whether it was cut) at `MAX_DOC_CHARS`."""
    return (text, False) if len(text) <= MAX_DOC_CHARS else (text[:MAX_DOC_CHARS], True)


def encoding_prefix(text: str, max_tokens: int) -> str:
    """What the encoder needs of `text` to embed its first `max_tokens` tokens."""
    return text[: max_tokens * CHARS_PER_TOKEN]


def _name_keys(names: list[str]) -> np.ndarray:
    out = np.zeros((len(names), _NAME), np.uint8)
    for i, n in enumerate(names):
        out[i, : len(n)] = np.frombuffer(n.encode(), np.uint8)
    return out.view(np.uint64).ravel()


def html_depth(data: bytes) -> int:
    """How deep the page's elements nest, in one vectorised pass over its tags (no Python step per tag: a page of
    millions of tags is counted in well under a second): an open tag nests one level deeper, an end tag one level
    out; void and implied-end tags, `<x/>`, comments, scripts and styles do not count."""
    data = _COMMENT.sub(b"", _RAW_TEXT.sub(b"", data))
    arr = np.frombuffer(data, np.uint8)
    lt = np.flatnonzero(arr == ord("<"))
    if len(lt) == 0:
        return 0
    pad = np.concatenate([arr, np.zeros(_NAME + 2, np.uint8)])
    close = pad[lt + 1] == ord("/")
    name = np.lib.stride_tricks.sliding_window_view(pad, _NAME)[lt + 1 + close]  # (tags, _NAME) bytes
    lower = np.where((name >= ord("A")) & (name <= ord("Z")), name | 0x20, name)
    is_name = ((lower >= ord("a")) & (lower <= ord("z"))) | ((lower >= ord("0")) & (lower <= ord("9"))) | (
        lower == ord("-")) | (lower == ord(":"))
    for k in range(1, _NAME):  # the name ends at its first other byte
        is_name[:, k] &= is_name[:, k - 1]
    keep = is_name.astype(np.uint8)
    keys = np.ascontiguousarray(lower * keep).view(np.uint64).ravel()
    is_tag = (lower[:, 0] >= ord("a")) & (lower[:, 0] <= ord("z")) & ~np.isin(keys, _name_keys(list(_NO_DEPTH)))
    gt = np.flatnonzero(arr == ord(">"))
    nxt = np.searchsorted(gt, lt)  # each tag's closing ">"
    ends = gt[np.minimum(nxt, max(len(gt) - 1, 0))] if len(gt) else lt
    self_closing = (nxt < len(gt)) & (pad[np.maximum(ends - 1, 0)] == ord("/"))
    steps = np.where(is_tag & ~close & ~self_closing, 1, np.where(is_tag & close, -1, 0)).astype(np.int64)
    walk = np.cumsum(steps)
    depth = walk - np.minimum(np.minimum.accumulate(walk), 0)  # an end tag at depth 0 closes nothing
    return int(depth.max())


def utf8_prefix(data: bytes, cut: bool) -> bytes:
    """`data` without a character cut in half at its end (when `cut`: the bytes are a file's first ones)."""
    if not cut:
        return data
    for back in range(1, min(4, len(data)) + 1):  # a UTF-8 character is at most 4 bytes: drop a partial one
        b = data[-back]
        if b < 0x80:
            return data
        if b >= 0xC0:  # a lead byte: complete when its sequence fits in the bytes after it
            need = 2 if b < 0xE0 else 3 if b < 0xF0 else 4
            return data if back >= need else data[:-back]
    return data
