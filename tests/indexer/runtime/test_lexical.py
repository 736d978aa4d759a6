"""The lexical engines' contract, run against every engine of `lexical.ENGINES` (bm25s, tantivy, pisa) on real files:
scores equal Lucene's BM25 computed by hand at the recorded k1/b (times the engine's `SCORE_SCALE`), filters and
tombstones are exact, ties go by FAISS id, written documents are scored as the base would score them, a reopened
or rebuilt index answers the same, and bad settings or damaged files are refused with a reason."""

from __future__ import annotations

import math
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from indexer.runtime import lexical_pisa, lexical_tantivy
from indexer.runtime.lexical import (
    ENGINES,
    LEXICAL_DIR,
    Analyzer,
    LexicalError,
    LexicalIndex,
    build_lexical,
    choose_engine,
    lexical_info,
    open_lexical,
)
from indexer.runtime.lexical_overlay import LexicalOverlay
from indexer.runtime.rowsets import ascending_unique

DOCS = [
    (10, "How do I learn Python programming quickly?"),
    (3, "What is the best way to cook rice?"),
    (42, "Is Python better than Java for new programmers?"),
    (7, "the and of"),  # stopwords only: no terms
    (8, "Which programming language should I learn first: Python, Java or C?"),
    (1 << 62, "How do I cook brown rice in a rice cooker?"),  # an assigned FAISS id
    (5, "Why do cats purr?"),
]


def reference(query: str, docs: list[tuple[int, str]], k1: float, b: float, an: Analyzer) -> dict[int, float]:
    """Lucene BM25 by hand: idf = ln(1 + (N - df + 0.5) / (df + 0.5)), tf / (tf + k1 (1 - b + b dl / avgdl))."""
    terms = {fid: an.terms(t) for fid, t in docs}
    n = len(docs)
    avgdl = sum(map(len, terms.values())) / n
    qterms = an.terms(query)
    dfs = {q: sum(q in t for t in terms.values()) for q in set(qterms)}
    out = {}
    for fid, dt in terms.items():
        s = 0.0
        for q in qterms:
            tf = dt.count(q)
            if tf:
                df = dfs[q]
                s += math.log(1 + (n - df + 0.5) / (df + 0.5)) * tf / (tf + k1 * (1 - b + b * len(dt) / avgdl))
        if s > 0:
            out[fid] = s
    return out


@pytest.fixture(params=list(ENGINES))
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def ref_of(index: LexicalIndex, query: str, docs: list[tuple[int, str]] = DOCS) -> dict[int, float]:
    """`reference` at the index's recorded k1/b, on its engine's scale."""
    return {f: s * index.SCORE_SCALE for f, s in reference(query, docs, index.info.k1, index.info.b,
                                                             index.analyzer).items()}


@pytest.fixture()
def built(tmp_path: Path, engine: str) -> tuple[Path, LexicalIndex]:
    info = build_lexical(tmp_path, DOCS, lexical_info(engine=engine))
    assert info.n_docs == len(DOCS) and info.stemmer == "english" and info.engine == engine and info.engine_version
    assert (info.k1, info.b) == (0.9, 0.4) if engine == "bm25s" else True
    return tmp_path, open_lexical(tmp_path, info)


@pytest.mark.parametrize("query", ["learn python programming", "cooking rice", "java programmers python python",
                                   "purring cats", "the of"])
def test_scores_equal_lucene_bm25_by_hand(built: tuple[Path, LexicalIndex], query: str) -> None:
    _, index = built
    ref = ref_of(index, query)
    scores, ids = index.search(query, 10)
    assert dict(zip(ids.tolist(), scores.tolist(), strict=True)) == pytest.approx(ref, rel=1e-5)
    assert list(scores) == sorted(scores, reverse=True)


def test_reopened_and_rebuilt_indexes_answer_the_same(built: tuple[Path, LexicalIndex], tmp_path_factory:
                                                      pytest.TempPathFactory) -> None:
    """Save/open and determinism: the files reopened (memory-mapped as served) and a second build of the same
    documents in another order give the same answers, scores included."""
    folder, index = built
    again = tmp_path_factory.mktemp("again")
    other = open_lexical(again, build_lexical(again, DOCS[::-1], lexical_info(engine=index.info.engine)))
    for q in ["learn python programming", "rice", "java programmers python python"]:
        want = index.search(q, 3)
        for got in (open_lexical(folder, index.info, mmap=True).search(q, 3), other.search(q, 3)):
            assert got[1].tolist() == want[1].tolist() and got[0].tolist() == want[0].tolist()


def test_auto_chooses_by_size_and_says_why(engine: str) -> None:
    assert choose_engine(engine, 10) == (engine, "asked for")
    small, why = choose_engine("auto", 10)
    assert small == "bm25s" and "auto: 10 documents <" in why
    assert choose_engine("auto", 10**6 - 1)[0] == "bm25s" and choose_engine("auto", 10**6)[0] == "pisa"
    assert choose_engine("auto", 10**9) == ("pisa", "auto: 1,000,000,000 documents >= 1,000,000 (docs/scaling.md)")
    with pytest.raises(LexicalError, match="unknown lexical engine 'lucy': one of bm25s, tantivy, pisa"):
        lexical_info(engine="lucy")
    with pytest.raises(LexicalError, match="tantivy engine scores with BM25 k1=1.2, b=0.75 only"):
        lexical_info(k1=2.0, engine="tantivy")


def test_english_analysis_stems_and_drops_stopwords() -> None:
    an = Analyzer("english", "english")
    assert an.terms("The Programmers are programming in the Cities") == ["programm", "program", "citi"]
    assert Analyzer("none", "none").terms("The Cities") == ["the", "cities"]


def test_filters_and_tombstones_are_exact(built: tuple[Path, LexicalIndex]) -> None:
    _, index = built
    ref = ref_of(index, "python java programming learn")
    allowed = np.array([42, 8, 3, 999], np.int64)  # 999: not in the index; 3 shares no term
    scores, ids = index.search("python java programming learn", 10, allowed=allowed)
    assert sorted(ids.tolist()) == [8, 42] and dict(zip(ids.tolist(), scores.tolist(), strict=True)) == \
        pytest.approx({i: ref[i] for i in (8, 42)})
    # top 1 among the allowed: the best allowed one, not "none" because the global best (10) is filtered out
    assert index.search("python java programming learn", 1, allowed=allowed)[1].tolist() == [max((8, 42),
                                                                                             key=ref.get)]
    _, ids = index.search("python java programming learn", 10, excluded=np.array([42, 10], np.int64))
    assert ids.tolist() == [8]
    assert index.search("python", 10, allowed=np.zeros(0, np.int64))[1].size == 0


def test_written_documents_score_as_the_base_would(built: tuple[Path, LexicalIndex]) -> None:
    """A written copy of a base document gets the base document's score (same statistics); a term the base never
    saw counts as in one document; replacing and dropping take effect."""
    _, index = built
    overlay = LexicalOverlay(index)
    overlay.put(100, DOCS[0][1])
    base_scores = dict(zip(*reversed(index.search("learn python programming", 10)), strict=True))
    assert overlay.scores("learn python programming")[100] == pytest.approx(float(base_scores[10]), rel=1e-5)
    overlay.put(101, "zyzzyva beetles")
    n, k1, b = len(DOCS), index.info.k1, index.info.b
    assert overlay.scores("zyzzyva")[101] == pytest.approx(index.SCORE_SCALE * math.log(1 + (n - 1 + 0.5) / 1.5) / (
        1 + k1 * (1 - b + b * 2 / index.stats.avgdl)), rel=1e-6)
    overlay.put(101, "plain text")
    assert 101 not in overlay.scores("zyzzyva") and 101 in overlay.scores("plain")
    overlay.drop(100)
    assert overlay.scores("python") == {} and len(overlay) == 1


def test_bad_settings_and_damaged_files_are_refused(built: tuple[Path, LexicalIndex]) -> None:  # noqa: PLR0915
    folder, index = built
    with pytest.raises(LexicalError, match="unknown stemmer 'klingon'"):
        lexical_info(stemmer="klingon")
    with pytest.raises(LexicalError, match="stopword list"):
        lexical_info(stopwords="french")
    with pytest.raises(LexicalError, match="b must be in"):
        lexical_info(b=1.5)
    wrong = index.info.model_copy(update={"n_docs": 3})
    with pytest.raises(LexicalError, match="holds 7 documents but the manifest says 3"):
        open_lexical(folder, wrong)
    with pytest.raises(LexicalError, match="unknown lexical engine"):
        open_lexical(folder, index.info.model_copy(update={"engine": "lucy"}))
    shutil.rmtree(folder / LEXICAL_DIR)
    with pytest.raises(LexicalError, match="not a readable lexical index"):
        open_lexical(folder, index.info)


def test_an_empty_corpus_builds_and_finds_nothing(tmp_path: Path, engine: str) -> None:
    info = build_lexical(tmp_path, [], lexical_info(engine=engine))
    assert open_lexical(tmp_path, info).search("anything", 5)[1].size == 0


def test_a_corpus_whose_texts_hold_no_terms_builds_and_finds_nothing(tmp_path: Path, engine: str) -> None:
    """Stopwords, punctuation and emoji only (a compaction of such a collection must not fail for it); a later
    build with terms still finds them."""
    info = build_lexical(tmp_path / "none", [(1, "the of and"), (2, "?!"), (3, "🙂")], lexical_info(engine=engine))
    assert info.n_docs == 3
    assert open_lexical(tmp_path / "none", info).search("the rice", 5)[1].size == 0
    info = build_lexical(tmp_path / "some", [(1, "the of and"), (2, "rice")], lexical_info(engine=engine))
    assert open_lexical(tmp_path / "some", info).search("the rice", 5)[1].tolist() == [2]


def test_bm25s_built_by_arrays_is_bm25s_built_by_itself_to_the_bit() -> None:
    """`ArrayBuiltBM25` (the build by array operations) against bm25s's own build: the same vocabulary and the
    same CSC arrays, bit for bit, on texts of every length with repeated terms, empty documents among them."""
    import bm25s

    from indexer.runtime.lexical_bm25s import ArrayBuiltBM25

    rng = np.random.default_rng(7)
    words = [f"w{i}" for i in range(300)]
    docs = [[words[j] for j in rng.zipf(1.3, size=int(rng.integers(0, 40))) % 300] for _ in range(3000)]
    for k1, b in ((0.9, 0.4), (1.2, 0.75)):
        theirs, ours = bm25s.BM25(method="lucene", k1=k1, b=b), ArrayBuiltBM25(method="lucene", k1=k1, b=b)
        theirs.index(docs, show_progress=False)
        ours.index(docs, show_progress=False)
        assert ours.vocab_dict == theirs.vocab_dict and ours.scores["num_docs"] == theirs.scores["num_docs"] == 3000
        for key in ("data", "indices", "indptr"):
            assert ours.scores[key].dtype == theirs.scores[key].dtype
            assert np.array_equal(ours.scores[key], theirs.scores[key]), key
    with pytest.raises(ValueError, match="lucene"):
        ArrayBuiltBM25(method="robertson").index(docs, show_progress=False)


def test_a_bm25s_build_pauses_the_garbage_collector_and_gives_it_back_even_when_it_fails(tmp_path: Path) -> None:
    """The term lists of a bm25s build are made with the collector off (`collector_paused`), and it is on again
    after the build, and after a build whose documents fail halfway."""
    import gc

    seen: list[bool] = []

    def texts(fail_at: int | None = None) -> Iterator[tuple[int, str]]:
        for fid, text in DOCS_SORTED:
            seen.append(gc.isenabled())
            if fid == fail_at:
                raise ValueError("a store that breaks halfway")
            yield fid, text

    assert gc.isenabled()
    build_lexical(tmp_path / "ok", texts(), lexical_info(engine="bm25s"), n_docs=len(DOCS))
    assert seen and not any(seen) and gc.isenabled()
    with pytest.raises(ValueError, match="breaks halfway"):
        build_lexical(tmp_path / "broken", texts(DOCS_SORTED[3][0]), lexical_info(engine="bm25s"), n_docs=len(DOCS))
    assert gc.isenabled()


DOCS_SORTED = sorted(DOCS)


def test_top_k_is_the_full_sort_ties_by_id_on_a_corpus_with_many_ties(tmp_path: Path, engine: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Large enough for bm25s's sampled threshold (`lexical_bm25s._candidates`) to be used, with a small vocabulary
    so that many scores tie: every answer equals a full sort by (score, FAISS id) of the scores by hand, filtered
    (tantivy: as a query clause, and read deeper past `TERM_SET_MAX` matches; pisa: scored from its forward index, or
    over-fetched (`OVERFETCH_SHARE`), or through its own postings once prepared) or not, tombstones skipped."""
    rng = np.random.default_rng(7)
    words = ["alpha", "beta", "gamma", "delta", "omega", "kappa", "sigma", "theta"]
    fids = rng.choice(10**6, 6000, replace=False)
    docs = [(int(f), " ".join(rng.choice(words, int(rng.integers(1, 4))))) for f in fids]
    index = open_lexical(tmp_path, build_lexical(tmp_path, docs, lexical_info(engine=engine)))
    allowed = np.sort(rng.choice(fids, 2000, replace=False))
    excluded = rng.choice(fids, 300, replace=False)
    monkeypatch.setattr(lexical_pisa, "POSTINGS_SHARE", 1.0)  # a third of the documents: prepared all the same
    prepared = 0
    for q in ["alpha", "beta gamma", "omega omega kappa", "theta sigma alpha delta"]:
        ref = ref_of(index, q, docs)
        # tantivy: the filter as a query clause, then read deeper; pisa: scored from its forward index, or over-fetched
        module, knob, values = {"tantivy": (lexical_tantivy, "TERM_SET_MAX", (50_000, 100)),
                                "pisa": (lexical_pisa, "OVERFETCH_SHARE", (0.0, math.inf))
                                }.get(engine, (None, "", (0,)))
        for value in values:
            if module is not None:
                monkeypatch.setattr(module, knob, value)
            for k in (1, 10, 100, 500):
                for keep, drop in ((None, None), (allowed, None), (allowed, excluded)):
                    kept = set(fids.tolist() if keep is None else keep.tolist()) - set(() if drop is None else
                                                                                    drop.tolist())
                    cand = {f: s for f, s in ref.items() if f in kept}
                    want = sorted(cand, key=lambda f: (-round(cand[f], 4), f))[:k]
                    scores, ids = index.search(q, k, allowed=keep, excluded=drop)
                    assert ids.tolist() == want, (q, k, keep is None, drop is None)
                    assert scores.tolist() == pytest.approx([cand[f] for f in want], rel=1e-5)
                    if keep is not None and index.prepare_rows(rows := index.rows_of(keep)):
                        prepared += 1  # pisa: the filter's own postings (`lexical_pisa.Engine.prepare_rows`)
                        again = index.search(q, k, allowed_rows=rows, excluded=drop)
                        assert again[1].tolist() == ids.tolist() and again[0].tolist() == scores.tolist()
    assert prepared > 0 if engine == "pisa" else prepared == 0


def test_tantivy_pruning_and_wide_filters_give_the_full_sort(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """tantivy's own pruning (`Engine._plan`: optional terms read by seeks once a first pass bounds the k-th score)
    and its reading of wide filters (deep enough at their selectivity, deeper when the filter keeps only low
    scorers) answer like a full sort of the scores by hand, on a Zipf-like vocabulary where the plan applies."""
    rng = np.random.default_rng(3)
    words = [f"w{i:02d}x" for i in range(40)]
    p = 1 / np.arange(1, 41)
    fids = rng.choice(10**6, 4000, replace=False)
    docs = [(int(f), " ".join(rng.choice(words, int(rng.integers(1, 7)), p=p / p.sum()))) for f in fids]
    index = open_lexical(tmp_path, build_lexical(tmp_path, docs, lexical_info(engine="tantivy")))
    queries = ["w00x w01x w30x", "w00x w00x w02x w25x w39x", "w03x w01x w00x w17x w22x w35x", "w00x w05x"]
    flat = {(q, k): index.search(q, k) for q in queries for k in (1, 10, 50)}  # no pruning below PRUNE_FROM
    monkeypatch.setattr(lexical_tantivy, "PRUNE_FROM", 0)
    monkeypatch.setattr(lexical_tantivy, "PASS1_POSTINGS", 200)
    monkeypatch.setattr(lexical_tantivy, "SEEK_COST", 0)  # take any plan the bound allows
    planned = 0
    for q in queries:
        ref = ref_of(index, q, docs)
        low = np.sort(np.array([f for f, s in ref.items() if s < np.median(list(ref.values()))], np.int64))
        for k in (1, 10, 50):
            planned += bool(index._plan(index.analyzer.terms(q), k + 1))  # type: ignore[attr-defined]
            scores, ids = index.search(q, k)
            want = sorted(ref, key=lambda f: (-round(ref[f], 4), f))[:k]
            assert ids.tolist() == want == flat[(q, k)][1].tolist(), (q, k)
            assert scores.tolist() == pytest.approx([ref[f] for f in want], rel=1e-5)
            monkeypatch.setattr(lexical_tantivy, "TERM_SET_MAX", 10)  # `low`: a wide filter of the worst scorers
            _, ids = index.search(q, k, allowed=low)
            monkeypatch.setattr(lexical_tantivy, "TERM_SET_MAX", 50_000)
            assert ids.tolist() == sorted(low.tolist(), key=lambda f: (-round(ref[f], 4), f))[:k], (q, k)
    assert planned >= 4  # the pruned path did run


WORDS = ("python", "rice", "learn", "cook", "java", "best", "language", "question", "market", "river", "music",
         "garden", "travel", "money", "health", "phone", "engine", "winter", "coffee", "paper", "school", "doctor",
         "planet", "salary", "guitar", "camera", "forest", "bridge", "silver", "window", "rocket")


def _quora_like(i: int) -> str:
    """A question of 8 words of a 31-word vocabulary (a real corpus's vocabulary grows much slower than its size)."""
    return "how " + " ".join(WORDS[(i * p) % len(WORDS)] for p in (1, 3, 7, 11, 13, 17, 19, 23)) + "?"


def test_a_store_streamed_build_equals_the_list_build(tmp_path: Path, engine: str) -> None:
    """The build's path (`Store.iter_texts`, paged by id, with `n_docs`) indexes the same rows, statistics and
    answers as a list in any order; the ids come ascending whatever order they were written in."""
    from indexer.runtime.store import Store
    from indexer.runtime.store_writer import write_store

    n = 2_345
    fids = [i * 3 + (1 if i % 2 else 0) for i in range(n)][::-1]  # written in descending order
    write_store(tmp_path / "store.sqlite", fids, [_quora_like(i) for i in range(n)], [], [], [])
    store = Store(tmp_path / "store.sqlite")
    try:
        streamed = list(store.iter_texts(batch=100))
        assert [f for f, _ in streamed] == sorted(fids) and len(streamed) == n
        (tmp_path / "s").mkdir()
        (tmp_path / "l").mkdir()
        a = build_lexical(tmp_path / "s", store.iter_texts(batch=100), lexical_info(engine=engine), n_docs=n)
    finally:
        store.close()
    b = build_lexical(tmp_path / "l", [(f, _quora_like(i)) for i, f in enumerate(fids)], lexical_info(engine=engine))
    assert a.model_dump(exclude={"seconds"}) == b.model_dump(exclude={"seconds"})
    assert np.array_equal(np.load(tmp_path / "s" / LEXICAL_DIR / "rows.npy"),
                          np.load(tmp_path / "l" / LEXICAL_DIR / "rows.npy"))
    sa, sb = open_lexical(tmp_path / "s", a), open_lexical(tmp_path / "l", b)
    for q in ("learn python", "cook rice garden", "music market money"):
        (xa, ia), (xb, ib) = sa.search(q, 10), sb.search(q, 10)
        assert np.array_equal(ia, ib) and np.allclose(xa, xb) and len(ia) == 10


def test_a_streamed_build_does_not_hold_the_documents_terms(tmp_path: Path) -> None:
    """tantivy's build takes each document as it is read: its Python allocations stay at the 8 bytes per document
    of the row map, far under what holding every document's analysed terms takes (what the build did before:
    several GB at 10M documents), so a corpus's texts are never all in memory."""
    import sys
    import tracemalloc

    n = 40_000
    an = Analyzer("english", "english")
    terms_held = sum(sys.getsizeof(an.terms(_quora_like(i))) for i in range(n))  # the lists alone
    tracemalloc.start()
    try:
        build_lexical(tmp_path, ((i, _quora_like(i)) for i in range(n)), lexical_info(engine="tantivy"), n_docs=n)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 24 * n < terms_held / 4, (peak, terms_held)


@pytest.mark.parametrize(("docs", "n_docs", "why"), [
    ([(5, "a cat"), (3, "a dog")], 2, "not ascending: 3 after 5"),
    ([(5, "a cat")], 2, "1 documents where 2 were announced"),
    ([(5, "a cat"), (6, "a dog")], 1, "more documents than the 1 announced"),
])
def test_a_stream_that_breaks_its_promise_is_refused(tmp_path: Path, engine: str, docs: list[tuple[int, str]],
                                                     n_docs: int, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        build_lexical(tmp_path, iter(docs), lexical_info(engine=engine), n_docs=n_docs)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_top_k_rows_is_the_best_k_by_score_then_row_whatever_the_ties(dtype: type) -> None:
    """`top_k_rows` (every engine's last step): the k best rows with a score > 0, best first, ties by the lower row —
    the order a plain sort by (-score, row) gives, with many ties, zeros and negatives, k below, at and above the
    scored count, rows in any order; float32 scores take one packed key per row, float64 the two-key sort."""
    from indexer.runtime.topk import top_k_rows

    rng = np.random.default_rng(7)
    for it in range(400):
        n = int(rng.integers(0, 200))
        scores = (rng.choice(np.array([0, 0.5, 1.0, 2.25, -1.0]), n) if it % 2 else
                  rng.random(n) * (rng.random(n) > 0.3)).astype(dtype)
        rows = rng.permutation(np.arange(n, dtype=np.int64) * 3 + int(rng.integers(0, 2**33)) * (it % 3 == 0))
        k = int(rng.integers(1, 220))
        got_s, got_r = top_k_rows(scores, rows, k)
        want = sorted(((-float(s), int(r)) for s, r in zip(scores, rows, strict=True) if s > 0))[:k]
        assert got_r.tolist() == [r for _, r in want] and got_s.tolist() == [-s for s, _ in want]
        assert got_s.dtype == dtype and got_r.dtype == np.int64


@pytest.mark.parametrize("ids", ["run", "gaps"])
def test_rows_of_finds_the_rows_of_held_ids_whatever_is_asked(tmp_path: Path, ids: str) -> None:
    """`rows_of` gives the ascending, unique rows of the asked FAISS ids that the index holds, with ids asked
    unsorted, twice, or not held (below, inside the gaps, above), whether the index's ids are one run (a row is its
    id's offset) or not (a binary search)."""
    gappy = np.sort(np.random.default_rng(4).choice(10**6, 300, replace=False))
    fids = np.arange(1000, 1300) if ids == "run" else gappy
    index = open_lexical(tmp_path, build_lexical(tmp_path, [(int(f), f"word{f % 7}") for f in fids], lexical_info()))
    assert index.fids.tolist() == fids.tolist()
    rng = np.random.default_rng(5)
    for asked in (fids[::3], fids[::-5], np.concatenate([fids[10:20], fids[10:20]]), np.array([-1, 0, 999, 10**7]),
                  rng.integers(0, 10**6, 500), rng.integers(990, 1310, 200), np.zeros(0, np.int64), fids):
        want = np.flatnonzero(np.isin(fids, asked))
        assert index.rows_of(np.asarray(asked)).tolist() == want.tolist(), asked[:5]


def test_ascending_unique_is_np_unique() -> None:
    rng = np.random.default_rng(6)
    for values in (np.zeros(0, np.int64), np.array([3]), np.array([1, 1, 2, 5, 5, 5, 9]), np.array([4, 2, 2, 7]),
                   np.sort(rng.integers(0, 50, 400)), rng.integers(0, 50, 400)):
        assert ascending_unique(values).tolist() == np.unique(values).tolist()
