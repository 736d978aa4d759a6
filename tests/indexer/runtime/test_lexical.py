"""The lexical index on real files (bm25s + PyStemmer): its scores equal Lucene's BM25 computed by hand at the
recorded k1/b, filters and tombstones are exact, written documents are scored with the base's statistics, and bad
settings or damaged files are refused with a reason."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from indexer.runtime.lexical import (
    LEXICAL_DIR,
    Analyzer,
    LexicalError,
    LexicalIndex,
    LexicalOverlay,
    build_lexical,
    lexical_info,
)

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
    out = {}
    for fid, dt in terms.items():
        s = 0.0
        for q in an.terms(query):
            tf = dt.count(q)
            if tf:
                df = sum(q in t for t in terms.values())
                s += math.log(1 + (n - df + 0.5) / (df + 0.5)) * tf / (tf + k1 * (1 - b + b * len(dt) / avgdl))
        if s > 0:
            out[fid] = s
    return out


@pytest.fixture()
def built(tmp_path: Path) -> tuple[Path, LexicalIndex]:
    info = build_lexical(tmp_path, DOCS, lexical_info())
    assert info.n_docs == len(DOCS) and info.stemmer == "english" and (info.k1, info.b) == (0.9, 0.4)
    return tmp_path, LexicalIndex(tmp_path, info)


@pytest.mark.parametrize("query", ["learn python programming", "cooking rice", "java programmers python python",
                                   "purring cats", "the of"])
def test_scores_equal_lucene_bm25_by_hand(built: tuple[Path, LexicalIndex], query: str) -> None:
    _, index = built
    ref = reference(query, DOCS, 0.9, 0.4, index.analyzer)
    scores, ids = index.search(query, 10)
    assert dict(zip(ids.tolist(), scores.tolist(), strict=True)) == pytest.approx(ref, rel=1e-5)
    assert list(scores) == sorted(scores, reverse=True)


def test_english_analysis_stems_and_drops_stopwords() -> None:
    an = Analyzer("english", "english")
    assert an.terms("The Programmers are programming in the Cities") == ["programm", "program", "citi"]
    assert Analyzer("none", "none").terms("The Cities") == ["the", "cities"]


def test_filters_and_tombstones_are_exact(built: tuple[Path, LexicalIndex]) -> None:
    _, index = built
    ref = reference("python java programming learn", DOCS, 0.9, 0.4, index.analyzer)
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
    n = len(DOCS)
    assert overlay.scores("zyzzyva")[101] == pytest.approx(math.log(1 + (n - 1 + 0.5) / 1.5) * 1 / (
        1 + 0.9 * (1 - 0.4 + 0.4 * 2 / index.stats.avgdl)), rel=1e-6)
    overlay.put(101, "plain text")
    assert 101 not in overlay.scores("zyzzyva") and 101 in overlay.scores("plain")
    overlay.drop(100)
    assert overlay.scores("python") == {} and len(overlay) == 1


def test_bad_settings_and_damaged_files_are_refused(built: tuple[Path, LexicalIndex]) -> None:
    folder, index = built
    with pytest.raises(LexicalError, match="unknown stemmer 'klingon'"):
        lexical_info(stemmer="klingon")
    with pytest.raises(LexicalError, match="stopword list"):
        lexical_info(stopwords="french")
    with pytest.raises(LexicalError, match="b must be in"):
        lexical_info(b=1.5)
    wrong = index.info.model_copy(update={"n_docs": 3})
    with pytest.raises(LexicalError, match="holds 7 documents but the manifest says 3"):
        LexicalIndex(folder, wrong)
    shutil.rmtree(folder / LEXICAL_DIR)
    with pytest.raises(LexicalError, match="not a readable lexical index"):
        LexicalIndex(folder, index.info)


def test_an_empty_corpus_builds_and_finds_nothing(tmp_path: Path) -> None:
    info = build_lexical(tmp_path, [], lexical_info())
    assert LexicalIndex(tmp_path, info).search("anything", 5)[1].size == 0


def test_top_k_is_the_full_sort_ties_by_id_on_a_corpus_with_many_ties(tmp_path: Path) -> None:
    """Large enough for the sampled threshold (`LexicalIndex._candidates`) to be used, with a small vocabulary so
    that many scores tie: every answer equals a full sort by (score, FAISS id), filtered or not."""
    rng = np.random.default_rng(7)
    words = ["alpha", "beta", "gamma", "delta", "omega", "kappa", "sigma", "theta"]
    fids = rng.choice(10**6, 6000, replace=False)
    docs = [(int(f), " ".join(rng.choice(words, int(rng.integers(1, 4))))) for f in fids]
    info = build_lexical(tmp_path, docs, lexical_info())
    index = LexicalIndex(tmp_path, info)
    allowed = np.sort(rng.choice(fids, 2000, replace=False))
    for q in ["alpha", "beta gamma", "omega omega kappa", "theta sigma alpha delta"]:
        full = index.scores(q)
        for k in (1, 10, 100, 500):
            for keep in (None, allowed):
                rows = np.arange(len(index.fids)) if keep is None else index.rows_of(keep)
                cand = full[rows]
                nz = np.flatnonzero(cand > 0)
                want = rows[nz[np.lexsort((nz, -cand[nz]))][:k]]
                scores, ids = index.search(q, k, allowed=keep)
                assert ids.tolist() == index.fids[want].tolist(), (q, k, keep is None)
                assert scores.tolist() == full[want].tolist()
