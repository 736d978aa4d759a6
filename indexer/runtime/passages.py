"""Passages: a long document split into windows the encoder sees whole, and what a hit says about them.

- `Splitter.split(text)`: the passages of one document, `[start, end)` character offsets into it, each at most
  `chunk` tokens of the encoder's own tokenizer (special tokens not counted), cut on sentence boundaries where a
  sentence fits, inside a sentence at token boundaries where it does not; consecutive passages share up to
  `overlap` tokens (whole sentences where possible), so a statement cut by a boundary is whole in one of them.
- `aggregate`: a document's score from its passages' ranked list: the max (the best passage's score), with the
  best passage kept — chosen on `bench/passages.py`'s evidence (docs/passages.md).
- `snippet`: the best passage's text with the query's terms marked (`<mark>`), HTML-escaped, cut to a window.
- `decide`: the build's default (passages on or off) from the corpus's token lengths, with its reason.

How a version holds passages: each passage is a row of its own (its vector, its BM25 entry, its store row) whose
id is `passage_id(document id, n)` and whose metadata is the document's plus `PASSAGE_KEY: [start, end, count]`
— so filters apply to the document's metadata, the overlay, compaction and the write log handle passages as they
handle documents, and a write replaces all of a document's passages in one log transaction (`write_ops`).
`document_hits` turns a ranked list of passage hits back into documents.

May import: the standard library, tokenizers, `indexer.runtime.version` (its `Hit`).
"""

from __future__ import annotations

import html
import json
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from indexer.runtime.passage_rows import ID_PREFIX as _ID_PREFIX
from indexer.runtime.passage_rows import PASSAGE_KEY, PassageRef, parse_passage_id, row_view
from indexer.runtime.version import Hit

if TYPE_CHECKING:
    from tokenizers import Tokenizer

# a sentence ends at . ! ? (then closing quotes/brackets) followed by whitespace, or at a blank line / line end
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+|\n\s*")
# a word: word characters (`\w`) and the combining marks on them (Unicode category M, which `\w` leaves out: the
# accent of a decomposed "é", Devanagari's vowel signs and virama — "हिन्दी" is one word, not "ह", "न", "द")
_WORD_CHAR = re.compile(r"\w", re.UNICODE)
_WORD_REST = re.compile(r"\w*", re.UNICODE)
# words too common to mark in a snippet (the query's other terms are what a reader looks for)
_STOP = frozenset("a an and are as at be by for from has have how in is it its of on or that the this to was "
                  "were what when where which who why will with do does did not no can".split())
OVERFETCH = 4  # passages fetched per document asked for (`fetch_depth`)
SNIPPET_CHARS = 320  # the snippet's window around the marked terms
# the build's default: passages on when more than this share of documents run past the encoder's window
LONG_SHARE = 0.10


class PassageError(ValueError):
    """Bad chunk/overlap settings (the message says which and why)."""


@dataclass(frozen=True)
class Passage:
    start: int  # character offsets into the document: text[start:end] is the passage
    end: int
    tokens: int


def check_sizes(chunk: int, overlap: int, max_tokens: int | None = None) -> None:
    """Refuse chunk/overlap settings that cannot split: chunk past the encoder's window (special tokens
    included), an overlap that would not let the split advance."""
    if chunk < 8:
        raise PassageError(f"chunk must be at least 8 tokens (got {chunk})")
    if max_tokens is not None and chunk > max_tokens - 2:
        raise PassageError(f"chunk {chunk} tokens does not fit the encoder's window of {max_tokens} tokens "
                           f"([CLS] and [SEP] included): at most {max_tokens - 2}")
    if overlap < 0 or overlap * 2 > chunk:
        raise PassageError(f"overlap must be between 0 and half the chunk ({chunk // 2}), got {overlap}")


class Splitter:
    """Splits documents with the encoder's tokenizer (a copy without truncation, so every token is counted)."""

    def __init__(self, tokenizer: Tokenizer, chunk: int, overlap: int = 0, max_tokens: int | None = None) -> None:
        from tokenizers import Tokenizer as _Tok

        check_sizes(chunk, overlap, max_tokens)
        self.chunk, self.overlap = chunk, overlap
        self._tok = _Tok.from_str(tokenizer.to_str())
        self._tok.no_truncation()
        self._tok.no_padding()

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        return [len(e.ids) for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def split(self, text: str) -> list[Passage]:
        return self.split_many([text])[0]

    def split_many(self, texts: Sequence[str]) -> list[list[Passage]]:
        encs = self._tok.encode_batch(list(texts), add_special_tokens=False)
        return [self._split(text, [o for o in enc.offsets if o[1] > o[0]]) for text, enc in zip(texts, encs,
                                                                                               strict=True)]

    def _split(self, text: str, offsets: list[tuple[int, int]]) -> list[Passage]:
        if len(offsets) <= self.chunk:
            return [Passage(0, len(text), len(offsets))] if text.strip() else []
        units = _units(text, offsets, self.chunk, self.overlap)  # token ranges [a, b), each <= chunk
        out: list[Passage] = []
        i = 0
        while i < len(units):
            j = i  # the passage is units[i..j]
            while j + 1 < len(units) and units[j + 1][1] - units[i][0] <= self.chunk:
                j += 1
            a, b = units[i][0], units[j][1]
            out.append(Passage(offsets[a][0], offsets[b - 1][1], b - a))
            if j + 1 >= len(units):
                break
            nxt = j + 1  # the next passage starts with the last sentences of this one that fit in `overlap`
            while nxt - 1 > i and b - units[nxt - 1][0] <= self.overlap:
                nxt -= 1
            i = nxt
        return out


def _units(text: str, offsets: list[tuple[int, int]], chunk: int, overlap: int) -> list[tuple[int, int]]:
    """Token ranges of the sentences; a sentence over `chunk` tokens cut into windows of `chunk` overlapping by
    `overlap` (they may overlap each other: the packer never puts two of them in one passage)."""
    ends = [m.end() for m in _SENTENCE_END.finditer(text)]
    units: list[tuple[int, int]] = []
    t, e = 0, 0
    n = len(offsets)
    while t < n:
        while e < len(ends) and ends[e] <= offsets[t][0]:
            e += 1
        stop = ends[e] if e < len(ends) else len(text)
        u = t
        while u < n and offsets[u][0] < stop:
            u += 1
        u = max(u, t + 1)
        if u - t <= chunk:
            units.append((t, u))
        else:
            step = chunk - overlap
            a = t
            while True:
                units.append((a, min(a + chunk, u)))
                if a + chunk >= u:
                    break
                a += step
        t = u
    return units


@dataclass(frozen=True)
class DocHit:
    doc: int  # the document's id (whatever the caller keys documents by)
    score: float
    passage: int  # its best passage's id


def aggregate(scores: Iterable[float], passages: Iterable[int], doc_of: dict[int, int], top_k: int) -> list[DocHit]:
    """The top_k documents of a ranked passage list (best first), each scored by its best passage (max)."""
    out: dict[int, DocHit] = {}
    for s, p in zip(scores, passages, strict=False):
        if p < 0:
            continue
        d = doc_of.get(int(p))
        if d is None or d in out:
            continue
        out[d] = DocHit(d, float(s), int(p))
        if len(out) >= top_k:
            break
    return list(out.values())


def _is_mark(ch: str) -> bool:
    """A combining mark (category Mn, Mc or Me; none is below U+0300): part of the word it follows."""
    return ch >= "\u0300" and unicodedata.category(ch)[0] == "M"


def _word_end(text: str, j: int) -> int:
    """The end of the word that goes on at `j`: past its word characters and combining marks."""
    while True:
        j = _WORD_REST.match(text, j).end()  # type: ignore[union-attr]
        if j >= len(text) or not _is_mark(text[j]):
            return j
        j += 1


def _words(text: str) -> list[str]:
    """The words of `text`: runs of word characters with their combining marks."""
    out, pos = [], 0
    while (m := _WORD_CHAR.search(text, pos)) is not None:
        pos = _word_end(text, m.start())
        out.append(text[m.start() : pos])
    return out


def query_terms(query: str) -> list[str]:
    """The query's words worth marking: lowercased, stopwords and 1-character words left out, a plural's final
    "s" dropped (each term marks the words it starts: "cats" marks "cat" and "cats")."""
    seen: dict[str, None] = {}
    for w in _words(query.lower()):
        if len(w) > 1 and w not in _STOP:
            seen.setdefault(w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w, None)
    return list(seen)


def term_spans(text: str, terms: list[str]) -> list[tuple[int, int]]:
    """The `[start, end)` of each word of `text` that starts with one of `terms` (lowercase), in order, the whole
    word marked (its combining marks included: `_words`): what `\\b(?:terms)\\w*` matches case-insensitively,
    where neither a word character nor a combining mark comes before, found with `str.find` on the lowercased
    text (a regex alternation is tried at every character: docs/decisions.md); the regex itself where lowercasing
    changes the text's length."""
    if not terms:
        return []
    low = text.lower()
    if len(low) != len(text):
        pattern = re.compile(r"\b(?:" + "|".join(re.escape(t) for t in sorted(terms, key=len, reverse=True))
                             + r")", re.IGNORECASE | re.UNICODE)
        return [(m.start(), _word_end(text, m.end())) for m in pattern.finditer(text)
                if m.start() == 0 or not _is_mark(text[m.start() - 1])]
    ends: dict[int, int] = {}
    n = len(low)
    for t in terms:
        i = low.find(t)
        while i >= 0:
            # (`_word_end` and the word test before inlined for the common case: no combining mark, below U+0300)
            if i not in ends and (i == 0 or (not _WORD_CHAR.match(low, i - 1)
                                             and (low[i - 1] < "\u0300" or not _is_mark(low[i - 1])))):
                j = _WORD_REST.match(low, i + len(t)).end()  # type: ignore[union-attr]
                ends[i] = j if j >= n or low[j] < "\u0300" else _word_end(low, j)
            i = low.find(t, i + 1)
    return sorted(ends.items())


def snippet(text: str, query: str | list[str], width: int = SNIPPET_CHARS) -> str:
    """`text` (a passage) as safe HTML: a window of about `width` characters around its densest run of the
    query's terms, each occurrence (a word starting with a term: "index" marks "indexes") in `<mark>`, the rest
    escaped; "…" where the window cuts the text. `query` may be its `query_terms` already."""
    spans = term_spans(text, query_terms(query) if isinstance(query, str) else query)
    lo, hi = 0, len(text)
    if len(text) > width:
        centre = _densest(spans, width) if spans else 0
        lo = max(0, min(centre - width // 3, len(text) - width))
        hi = min(len(text), lo + width)
        lo, hi = _word_edge(text, lo, forward=True), _word_edge(text, hi, forward=False)
    parts = ["…" if lo > 0 else ""]
    pos = lo
    for a, b in spans:
        if b <= lo or a >= hi:
            continue
        a, b = max(a, lo), min(b, hi)
        parts.append(html.escape(text[pos:a]))
        parts.append(f"<mark>{html.escape(text[a:b])}</mark>")
        pos = b
    parts.append(html.escape(text[pos:hi]))
    parts.append("…" if hi < len(text) else "")
    return "".join(parts)


def _densest(spans: list[tuple[int, int]], width: int) -> int:
    """The start of the term occurrence whose following `width` characters hold the most occurrences."""
    best, best_n, j = spans[0][0], 0, 0
    for i, (a, _) in enumerate(spans):
        j = max(j, i)
        while j + 1 < len(spans) and spans[j + 1][1] - a <= width:
            j += 1
        if j - i + 1 > best_n:
            best, best_n = a, j - i + 1
    return best


def _word_edge(text: str, pos: int, *, forward: bool) -> int:
    """`pos` moved off the middle of a word (at most 20 characters), so the window does not cut one."""
    if pos <= 0 or pos >= len(text):
        return pos
    step = 1 if forward else -1
    for k in range(20):
        p = pos + step * k
        if 0 < p < len(text) and text[p - 1].isspace() != text[p].isspace():
            return p
    return pos


def decide(token_counts: Sequence[int], window: int, share: float = LONG_SHARE) -> tuple[bool, str]:
    """The build's default when neither --chunk nor --no-chunk is given: passages on when more than `share` of
    the documents run past the encoder's window (their ends would be invisible to dense search), with the reason
    the build logs and the manifest records."""
    n = len(token_counts)
    if n == 0:
        return False, "no documents"
    long = sum(1 for c in token_counts if c > window)
    frac = long / n
    verdict = "on" if frac > share else "off"
    return frac > share, (f"{verdict}: {long:,} of {n:,} documents ({frac:.1%}) run past the encoder's window of "
                          f"{window} tokens ({'more' if frac > share else 'not more'} than {share:.0%})")


# --- passages as rows ---------------------------------------------------------------------------------------------

ExtId = int | str


def passage_id(doc: ExtId, n: int) -> str:
    """The row id of a document's passage `n` (the document's id keeps its type: 17 and "17" stay apart)."""
    return _ID_PREFIX + json.dumps([doc, n], ensure_ascii=False, separators=(",", ":"))


def document_key(ext: ExtId) -> tuple[object, ExtId]:
    """A row's document as a key, without parsing a passage row's id (its id up to the passage number: the
    document's id as JSON, so 17 and "17" stay apart); two rows of one document have the same key."""
    if isinstance(ext, str) and ext.startswith(_ID_PREFIX):
        return Passage, ext[: ext.rindex(",")]
    return type(ext), ext


def document_of(ext: ExtId) -> ExtId:
    """The document a row stands for: a passage row's document id, any other row's own id."""
    parsed = parse_passage_id(ext)
    return ext if parsed is None else parsed[0]


def passage_rows(doc: ExtId, text: str, metadata: dict[str, Any], passages: Sequence[Passage]
                 ) -> list[tuple[str, str, dict[str, Any]]]:
    """(row id, passage text, row metadata) of each passage of one document."""
    n = len(passages)
    return [(passage_id(doc, i), text[p.start : p.end], {**metadata, PASSAGE_KEY: [p.start, p.end, n]})
            for i, p in enumerate(passages)]


def passage_count(metadata: dict[str, Any] | None) -> int:
    """The document's passage count that one of its rows records (0: not a passage row)."""
    rec = (metadata or {}).get(PASSAGE_KEY)
    return int(rec[2]) if isinstance(rec, list) and len(rec) == 3 else 0


def stale_ids(doc: ExtId, keep: int, old_count: int) -> list[str]:
    """The rows of a document's earlier passages that `keep` new ones do not overwrite."""
    return [passage_id(doc, i) for i in range(keep, old_count)]


def old_count(doc: ExtId, live_metadata: Callable[[ExtId], dict[str, Any] | None]) -> int:
    """How many passages the served index holds for `doc` now (its passage 0 records the count)."""
    return passage_count(live_metadata(passage_id(doc, 0)))


def document_hits(hits: Sequence[Hit], query: str, top_k: int, snippets: bool = True) -> list[Hit]:
    """Ranked passage hits → the top_k documents, each scored by its best passage (max), carrying that passage
    (text, offsets and, when `snippets`, its snippet: computed for the hits returned only); hits that are not
    passage rows pass through as documents. A hit may come as its passage row or already as its document's
    (`VectorIndex.hits(..., passages=True)`: then only the snippet is added)."""
    docs = [h if h.passage is not None else as_document_hit(h) for h in hits]
    # 17 and "17" apart, a passage's document apart from a whole row
    keys = [(h.passage is not None, type(h.ext_id), h.ext_id) for h in docs]
    if len(set(keys)) == len(keys):  # one hit per document already (a list collapsed by `doc_topk`)
        out = docs[:top_k]
    else:
        out, seen = [], set()
        for h, key in zip(docs, keys, strict=True):
            if key not in seen:
                seen.add(key)
                out.append(h)
                if len(out) >= top_k:
                    break
    return with_snippets(out, query) if snippets else out


def passage_hits(hits: Sequence[Hit], query: str, snippets: bool = True) -> list[Hit]:
    """`"passages": true`: every passage hit as it ranked, with its document's id, offsets and (when `snippets`)
    snippet."""
    out = [as_document_hit(h) if h.passage is None else h for h in hits]
    return with_snippets(out, query) if snippets else out


def as_document_hit(h: Hit) -> Hit:
    """A passage row's hit as its document's (`passage_rows.row_view`: the passage record taken out of the
    metadata into `passage`, no snippet yet); any other hit as it is."""
    view = row_view(h.ext_id, h.text, h.metadata)
    return h if view is None else Hit(h.faiss_id, view[0], h.text, h.score, view[1], view[2])


def with_snippets(hits: list[Hit], query: str) -> list[Hit]:
    """The hits with their passages' snippets for `query` (its terms found once); a hit without a passage (a
    whole-document row) as it is."""
    terms = query_terms(query)
    out = []
    for h in hits:
        p = h.passage
        out.append(h if p is None else Hit(h.faiss_id, h.ext_id, h.text, h.score, h.metadata,
                                           PassageRef(p.index, p.start, p.end, p.count, snippet(h.text, terms))))
    return out


def fetch_depth(top_k: int) -> int:
    """Passages to fetch for `top_k` documents: a document may fill several of the top places."""
    return top_k * OVERFETCH + 10
