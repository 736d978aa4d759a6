"""Passages (`indexer.runtime.passages`) with the default encoder's real tokenizer: sentence boundaries, character
offsets, token budgets and overlap; the documents' ranking from passages; snippets that mark and escape; the
build's default from the corpus's lengths."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.runtime.encoder import OnnxEncoder
from indexer.runtime.passages import (
    PASSAGE_KEY,
    Passage,
    PassageError,
    Splitter,
    decide,
    document_hits,
    document_of,
    parse_passage_id,
    passage_hits,
    passage_id,
    passage_rows,
    snippet,
)
from indexer.runtime.version import Hit

SENTENCES = [f"Sentence number {i} talks about {w} and nothing else." for i, w in
             enumerate("rivers mountains bridges guitars horses kites comets bread".split())]
TEXT = " ".join(SENTENCES)


@pytest.fixture(scope="module")
def tokenizer(minilm_mean: Path):  # noqa: ANN201 - tokenizers.Tokenizer
    return OnnxEncoder(minilm_mean, threads=1).tokenizer


def test_passages_end_on_sentence_boundaries_and_their_offsets_are_the_documents(tokenizer) -> None:  # noqa: ANN001
    splitter = Splitter(tokenizer, 30, 12, max_tokens=256)
    counts = splitter.token_counts(SENTENCES)
    assert all(c <= 15 for c in counts)  # two sentences fit a passage, three do not
    passages = splitter.split(TEXT)
    assert len(passages) > 1
    for p in passages:
        piece = TEXT[p.start : p.end]
        assert p.tokens <= 30 and splitter.token_counts([piece])[0] == p.tokens
        assert piece in SENTENCES or piece.endswith(".") and piece.startswith("Sentence")  # whole sentences
        assert all(s in SENTENCES for s in piece.replace(". ", ".\n").split("\n"))
    assert passages[0].start == 0 and passages[-1].end == len(TEXT)
    # the overlap: each passage after the first starts with the last sentence of the one before (<= 12 tokens)
    for a, b in zip(passages, passages[1:], strict=False):
        assert b.start < a.end and TEXT[b.start : a.end] in SENTENCES
    # every sentence is in some passage
    assert all(any(s in TEXT[p.start : p.end] for p in passages) for s in SENTENCES)


def test_a_sentence_longer_than_the_chunk_is_cut_at_token_boundaries(tokenizer) -> None:  # noqa: ANN001
    long = "word " * 100 + "end."
    passages = Splitter(tokenizer, 16, 4).split(long)
    assert len(passages) >= 100 // 16
    assert all(p.tokens <= 16 for p in passages)
    assert passages[-1].end == len(long) and long[passages[0].start : passages[0].end].startswith("word")
    # consecutive windows share their overlap's tokens, and nothing is skipped
    assert all(b.start < a.end for a, b in zip(passages, passages[1:], strict=False))


def test_a_short_document_is_one_passage_and_blank_text_none(tokenizer) -> None:  # noqa: ANN001
    s = Splitter(tokenizer, 64, 8)
    assert [(p.start, p.end) for p in s.split("Short text.")] == [(0, 11)]
    assert s.split("   ") == []


@pytest.mark.parametrize(("chunk", "overlap", "why"), [(4, 0, "at least 8"), (300, 10, "window of 256"),
                                                       (32, 17, "half the chunk"), (32, -1, "half the chunk")])
def test_bad_sizes_are_refused_with_the_reason(tokenizer, chunk: int, overlap: int, why: str) -> None:  # noqa: ANN001
    with pytest.raises(PassageError, match=why):
        Splitter(tokenizer, chunk, overlap, max_tokens=256)


def test_documents_are_ranked_by_their_best_passage_and_top_k_counts_documents() -> None:
    def row(doc: int | str, n: int, score: float) -> Hit:
        meta = {"lang": "en", PASSAGE_KEY: [n * 10, n * 10 + 9, 3]}
        return Hit(n, passage_id(doc, n), f"text {doc} {n}", score, meta)

    ranked = [row(1, 2, 0.9), row(1, 0, 0.8), row("1", 1, 0.7), row(2, 0, 0.6), row(3, 1, 0.5)]
    docs = document_hits(ranked, "text", 2)
    assert [(h.ext_id, h.score) for h in docs] == [(1, 0.9), ("1", 0.7)]  # 1 and "1" are two documents
    assert docs[0].passage is not None and (docs[0].passage.index, docs[0].passage.start, docs[0].passage.end) == \
        (2, 20, 29)
    assert docs[0].metadata == {"lang": "en"}  # the passage record is not the user's metadata
    assert "<mark>text</mark>" in docs[0].passage.snippet
    assert len(document_hits(ranked, "text", 10)) == 4
    assert [h.ext_id for h in passage_hits(ranked, "text")] == [1, 1, "1", 2, 3]
    # without snippets: the same hits, snippets empty
    bare = document_hits(ranked, "text", 10, snippets=False)
    assert [(h.ext_id, h.score, h.passage.index) for h in bare] == [(1, 0.9, 2), ("1", 0.7, 1), (2, 0.6, 0),
                                                                     (3, 0.5, 1)]
    assert all(h.passage.snippet == "" for h in bare + passage_hits(ranked, "text", snippets=False))
    # ids a document's key must not confuse: commas, quotes, backslashes, brackets; a whole-document row beside
    odd = ["a,b", 'say "hi"', "back\\slash", "[1, 2]", "", -3, 17]
    mixed = [row(d, n, 1.0 - i / 20) for i, (d, n) in enumerate((d, n) for n in (1, 0) for d in odd)]
    whole = [Hit(90, 17, "whole", 0.1, {}), Hit(91, "17", "whole", 0.05, {}), Hit(92, 17, "again", 0.01, {})]
    got = document_hits(mixed + whole, "text", 100, snippets=False)
    assert [(type(h.ext_id), h.ext_id, h.passage and h.passage.index) for h in got] == \
        [(type(d), d, 1) for d in odd] + [(int, 17, None), (str, "17", None)]


def test_passage_ids_keep_the_documents_id_type() -> None:
    for doc in (17, "17", "a\x1fb", 2**62, -3, "", "a,b,4", 'say "hi"', "back\\slash", "é,\u2028", "[1, 2]"):
        assert parse_passage_id(passage_id(doc, 3)) == (doc, 3)
    assert parse_passage_id("17") is None and parse_passage_id(17) is None
    rows = passage_rows("d", "One. Two.", {"k": 1}, [Passage(0, 4, 2), Passage(5, 9, 2)])
    assert rows == [(passage_id("d", 0), "One.", {"k": 1, PASSAGE_KEY: [0, 4, 2]}),
                    (passage_id("d", 1), "Two.", {"k": 1, PASSAGE_KEY: [5, 9, 2]})]


@pytest.mark.parametrize(("step", "whole"), [(7, True), (1, False), (7, False)])
def test_a_stores_rows_map_to_their_documents_ordinals(tmp_path: Path, step: int, whole: bool) -> None:
    """`Store.doc_rows`: rows of one document (its passages) share an ordinal, found in SQLite; 17 and "17", 12
    and 120, ids holding commas, quotes, backslashes and digits stay apart; a whole-document row is its own; unknown
    ids and padding get -1, in any order and shape — looked up in the sorted ids (FAISS ids far apart: whole rows'
    own integer ids beside passages' from 2^62) or in a table by id (a build's passages, dense or with gaps)."""
    import numpy as np

    from indexer.runtime.store import Store
    from indexer.runtime.store_writer import CorpusStoreWriter

    docs = [17, "17", 12, 120, "a,b,4", 'say "hi"', "back\\slash", "é,\u2028", "[1, 2]", "x]9"]
    rows, fid = [], 1 << 62
    for d in docs:
        for n in range(3):
            rows.append((fid, passage_id(d, n), f"text {fid}", "{}"))
            fid += step
    if whole:  # whole documents beside passages
        rows += [(5, 5, "whole five", "{}"), (6, "whole", "whole", "{}")]
    writer = CorpusStoreWriter(tmp_path / "store.sqlite")
    writer.put(rows[::-1])
    writer.finish()
    store = Store(tmp_path / "store.sqlite")
    try:
        ids = np.array([r[0] for r in rows], np.int64)
        got = store.doc_rows(ids).tolist()
        want = [(type(document_of(r[1])), document_of(r[1]), parse_passage_id(r[1]) is None) for r in rows]
        assert all((got[a] == got[b]) == (want[a] == want[b]) for a in range(len(rows)) for b in range(len(rows)))
        assert min(got) >= 0 and len(set(got)) == len(docs) + 2 * whole
        assert (store._doc_table is None) == whole  # which lookup ran
        probe = np.array([[-1, ids[4]], [3, ids[0] + 1 if step > 1 else ids[-1] + 1], [2**63 - 1, -(2**63)]],
                         np.int64)
        assert store.doc_rows(probe).tolist() == [[-1, got[4]], [-1, -1], [-1, -1]]
    finally:
        store.close()


def test_a_stores_passage_rows_come_back_as_their_documents_hits_built_once(tmp_path: Path) -> None:
    """`hits_from_store(..., passages=True)` (what a search of a version of passages looks up): each passage row's
    hit is already its document's — the same hit `as_document_hit` makes of the row's hit — read once per row and
    kept with the row; `document_hits` and `passage_hits` give the same answers from either form, snippets
    included; a whole-document row and a missing id come back as rows."""
    import numpy as np

    from indexer.runtime.passages import as_document_hit
    from indexer.runtime.store import Store
    from indexer.runtime.store_writer import CorpusStoreWriter
    from indexer.runtime.version import hits_from_store

    rows = [(10 + i, passage_id(d, n), f"text of {d} part {n} <b>", json_meta(n))
            for i, (d, n) in enumerate([(17, 0), (17, 1), ("17", 0), ("a,b", 2), (5, 0)])]
    rows.append((3, "whole", "a whole text", '{"lang": "de"}'))
    writer = CorpusStoreWriter(tmp_path / "store.sqlite")
    writer.put(rows)
    writer.finish()
    store = Store(tmp_path / "store.sqlite")
    try:
        ids = np.array([[11, 3, 12, 10, 99, 13, 14, -1]], np.int64)
        scores = np.linspace(1.0, 0.3, ids.shape[1], dtype=np.float32)[None, :]
        as_rows = hits_from_store(store, scores, ids)[0]
        as_docs = hits_from_store(store, scores, ids, passages=True)[0]
        assert as_docs == [as_document_hit(h) for h in as_rows] and len(as_docs) == 7
        assert [(h.ext_id, h.passage and h.passage.index) for h in as_docs] == \
            [(17, 1), ("whole", None), ("17", 0), (17, 0), (99, None), ("a,b", 2), (5, 0)]
        assert as_docs[0].metadata == {"lang": "en"} and as_docs[0].passage.count == 2
        again = hits_from_store(store, scores, ids, passages=True)[0]
        assert again[0].passage is as_docs[0].passage  # the row's view, kept: not read again
        for query, snip in (("text part", True), ("text part", False)):
            assert document_hits(as_docs, query, 4, snip) == document_hits(as_rows, query, 4, snip)
            assert passage_hits(as_docs, query, snip) == passage_hits(as_rows, query, snip)
        marked = document_hits(as_docs, "text part", 4)
        assert [h.ext_id for h in marked] == [17, "whole", "17", 99]
        assert "<mark>part</mark>" in marked[0].passage.snippet and "&lt;b&gt;" in marked[0].passage.snippet
    finally:
        store.close()


def json_meta(n: int) -> str:
    import json

    return json.dumps({"lang": "en", PASSAGE_KEY: [n * 5, n * 5 + 4, 2]})


def test_snippets_mark_the_query_terms_and_escape_the_rest() -> None:
    html = snippet("Use <script>alert(1)</script> & see the Comets' tails.", "comets tail script")
    assert "<script>" not in html and "&lt;<mark>script</mark>&gt;" in html and "&amp;" in html
    assert "<mark>Comets</mark>" in html and "<mark>tails</mark>" in html
    assert snippet("nothing matches here", "zebra") == "nothing matches here"
    long = "filler words only. " * 40 + "The geologist studies rocks. " + "more filler text. " * 40
    cut = snippet(long, "geologist rocks", width=120)
    assert cut.startswith("…") and cut.endswith("…") and "<mark>geologist</mark>" in cut
    assert len(cut.replace("<mark>", "").replace("</mark>", "")) <= 125


def test_snippets_mark_whole_words_with_their_combining_marks_never_inside_one() -> None:
    """A combining mark (decomposed Latin accents, Devanagari's vowel signs and virama) is part of its word, as the
    letters around it are: a query's word is found whole, a term is marked from a word's start to its end
    (its marks included), and never where it starts after a mark inside another word ("me" in "crème")."""
    from indexer.runtime.passages import query_terms

    nfd = "Cafe\u0301 serves cre\u0300me bru\u0302le\u0301e daily."  # Café serves crème brûlée, decomposed
    assert snippet(nfd, "cafe") == "<mark>Cafe\u0301</mark> serves cre\u0300me bru\u0302le\u0301e daily."
    assert snippet(nfd, "me le daily") == "Cafe\u0301 serves cre\u0300me bru\u0302le\u0301e <mark>daily</mark>."
    assert snippet("I\u0307stanbul İx", "stanbul x") == "I\u0307stanbul İx"  # lowercasing changes the length
    hindi = "मुझे हिन्दी भाषा सीखना पसंद है"  # "I like learning the Hindi language"
    assert query_terms("हिन्दी भाषा सीखना") == ["हिन्दी", "भाषा", "सीखना"]
    assert snippet(hindi, "हिन्दी भाषा सीखना") == \
        "मुझे <mark>हिन्दी</mark> <mark>भाषा</mark> <mark>सीखना</mark> पसंद है"
    assert snippet(hindi, "खन") == hindi  # inside "सीखना", after a vowel sign: not a word's start


def test_the_default_follows_the_share_of_long_documents() -> None:
    on, why = decide([300] * 20 + [100] * 80, 254)
    assert on and "20 of 100" in why and "more than 10%" in why
    off, why = decide([300] * 5 + [100] * 95, 254)
    assert not off and "5.0%" in why


def test_the_build_default_is_auto_off_for_quora_questions_on_for_long_documents(
        tmp_path: Path, minilm_mean: Path, quora_file: Path) -> None:
    """No --chunk is `auto`: real Quora questions (none past the window) stay whole; a corpus where 3 of 20
    documents run past it (15 %) is split at the window; rows that bring vectors are never split. Each decision
    carries its reason (what the build logs and the manifest records)."""
    import gzip
    import json

    from indexer.build_config import BuildConfig
    from indexer.chunking import AUTO_CHUNK, resolve
    from indexer.corpus import open_corpus

    assert BuildConfig(model_dir=minilm_mean, data="x", root=tmp_path).chunk == "auto"
    encoder = OnnxEncoder(minilm_mean, threads=1)

    def decided(name: str, rows: list[dict]) -> tuple[bool, object]:
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        splitter, info = resolve("auto", None, open_corpus(path), encoder)
        assert info.enabled is (splitter is not None) and info.reason.startswith("--chunk auto")
        return info.enabled, info

    with gzip.open(quora_file, "rt", encoding="utf-8") as fh:
        next(fh)
        questions = [line.split("\t")[3] for line, _ in zip(fh, range(2000), strict=False)]
    on, info = decided("quora", [{"id": i, "text": q} for i, q in enumerate(questions) if q.strip()])
    assert not on and "(0.0%)" in info.reason and "not more than 10%" in info.reason
    long = [{"id": i, "text": TEXT * (12 if i < 3 else 1)} for i in range(20)]
    on, info = decided("long", long)
    assert on and (info.chunk, info.overlap) == (AUTO_CHUNK, AUTO_CHUNK // 8) and "3 of 20" in info.reason
    on, info = decided("vectors", [{**r, "vector": [0.1] * 384} for r in long])
    assert not on and "bring their vectors" in info.reason


def test_term_spans_find_what_the_case_insensitive_regex_finds() -> None:
    import random
    import re

    from indexer.runtime.passages import query_terms, term_spans

    rng = random.Random(5)
    words = ["Index", "indexes", "reindex", "cat", "Cats", "CAT_x", "ÉCOLE", "école", "naïve", "x", "_index", "İndex",
             "learn", "learning", "earn", "straße", "STRASSE"]
    for _ in range(300):
        text = "".join(rng.choice(words) + rng.choice([" ", ", ", "-", "\n", "'", ""])
                       for _ in range(rng.randint(0, 30)))
        query = " ".join(rng.choice(words) for _ in range(rng.randint(1, 4)))
        terms = query_terms(query)
        want = [] if not terms else [m.span() for m in re.finditer(
            r"\b(?:" + "|".join(re.escape(t) for t in sorted(terms, key=len, reverse=True)) + r")\w*", text,
            re.IGNORECASE | re.UNICODE)]
        assert term_spans(text, terms) == want, (text, query)


def test_a_rows_document_key_parts_documents_as_their_ids_do() -> None:
    from indexer.runtime.passages import document_key, passage_id

    rows = [passage_id(17, 0), passage_id(17, 3), passage_id("17", 0), passage_id("a,b", 2), passage_id("a,b", 0),
            passage_id("[1]", 0), 17, "17"]
    keys = [document_key(r) for r in rows]
    assert keys[0] == keys[1] and keys[3] == keys[4]
    assert len({keys[0], keys[2], keys[3], keys[5], keys[6], keys[7]}) == 6


def test_a_build_of_passages_logs_its_rows_as_passages(tmp_path: Path, tiny_exported: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """The build's lines count passages apart from documents: the lexical index (built over the rows) and the
    documents bar name its rows passages, the summary both (3 documents, more passages)."""
    import json
    import logging

    from indexer.build import BuildConfig, build

    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps({"id": i, "text": TEXT * (i + 1)}) + "\n" for i in range(3)))
    with caplog.at_level(logging.INFO):
        manifest = build(BuildConfig(model_dir=tiny_exported, data=str(data), root=tmp_path / "root", index="flat",
                                     evaluate=False, chunk=24, overlap=0, threads=1))
    rows = manifest.index.ntotal
    assert manifest.data.n_docs == 3 and rows > 3
    lexical = [r.getMessage() for r in caplog.records if r.getMessage().startswith("lexical index (bm25s, auto")]
    assert lexical and f": {rows} passages," in lexical[0] and f"auto: {rows} passages <" in lexical[0], lexical
    assert manifest.lexical is not None and f"{rows} passages" in manifest.lexical.engine_reason
    bar = [r.getMessage() for r in caplog.records if r.getMessage().startswith("documents:")]
    assert bar and f"[passages={rows}]" in bar[-1] and "docs=" not in bar[-1], bar
