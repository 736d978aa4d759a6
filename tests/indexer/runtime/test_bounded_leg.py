"""Hybrid's bounded lexical leg (`indexer.runtime.bounded_leg`) on real tantivy and PISA files, under the live overlay
as the engine serves them (`LiveIndex.lexical_legs` / `complete_legs`), with the bound forced (`bounded_from=0`) and a
selective fraction at which the two rare words of the corpus are selective and its 16 common words are not.

Checked against Lucene's BM25 by hand (`reference`): every returned document carries its exact score over all
the query's terms, and the answer is the exact best k among the candidates (the selective terms' documents ∪ the
dense candidates) — so a document holding a selective term is found though the dense leg missed it, while one
holding only common terms outside the dense candidates may be lost (the approximation). Filters (as a query
clause and, past `TERM_SET_MAX`, applied to the hits), deletes and written documents keep their exact semantics.
The lexical mode and `bounded_from=None` stay exact."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from indexer.runtime import bounded_leg, lexical_pisa, lexical_tantivy
from indexer.runtime.filters import matches, parse_filter
from indexer.runtime.live_index import LiveIndex
from indexer.runtime.version import IndexVersion
from indexer.runtime.writelog import DELETE, UPSERT, LogEntry
from tests.service.engine.test_index_contract import (
    LexicalCorpus,
    N,
    assert_bm25_top_k,
    by_ext,
    lexical_answers,
    unit,
)

RARE = {"zeppelin": [3, 50, 121], "quasar": [8, 9, 200, 333, 390]}  # rows that also hold the rare word
K = 8


class RareCorpus(LexicalCorpus):
    def __init__(self) -> None:
        super().__init__()
        for word, rows in RARE.items():
            for r in rows:
                self.texts[self.ext[r]] += f" {word}"


@pytest.fixture(params=["tantivy", "pisa"])
def served(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
           ) -> Iterator[tuple[RareCorpus, LiveIndex]]:
    """Both engines serve the bounded leg (pisa's pruned to `PRUNED_DEPTH`, here past every selective holder)."""
    monkeypatch.setattr(bounded_leg, "SELECTIVE_DF", 0.02)  # df <= 8 of 400: the rare words only
    monkeypatch.setattr(lexical_pisa.Engine, "SELECTIVE_DF", 0.02)  # pisa's own fraction, the same here
    corpus = RareCorpus()
    index = LiveIndex(IndexVersion(corpus.lexical_version(tmp_path / "v", request.param)))
    yield corpus, index
    index.close()


def bounded_answer(index: LiveIndex, query: str, dense: list[Any], corpus: RareCorpus,
                   flt: dict | None = None) -> tuple[list[Any], bounded_leg.LexicalLeg]:
    """The bounded leg of `query` completed with `dense` (external ids) as the dense candidates, as hits."""
    fid_of = dict(zip(corpus.ext, corpus.fids, strict=True))
    legs = index.lexical_legs([query], K, None if flt is None else index.match(flt), bounded_from=0)
    ((scores, ids),) = index.complete_legs(legs, [np.array([fid_of[e] for e in dense] + [-1], np.int64)])
    return index.hits(scores[None, :], ids[None, :])[0], legs[0]


def candidates(corpus: RareCorpus, index: LiveIndex, query: str, dense: list[Any], leg: bounded_leg.LexicalLeg
               ) -> dict[Any, float]:
    """BM25 by hand of the bounded leg's candidates: the documents holding a selective term, and the dense ones."""
    lex = index.base.lexical
    assert lex is not None and leg.selective is not None
    holders = {e for e in corpus.ext if set(lex.analyzer.terms(corpus.texts[e])) & set(leg.selective)}
    return {e: s for e, s in by_ext(corpus, query, corpus.texts, lex).items() if e in holders or e in dense}


def test_bounded_answers_are_the_exact_best_k_of_the_candidates_with_exact_scores(
        served: tuple[RareCorpus, LiveIndex]) -> None:
    corpus, index = served
    dense = corpus.ext[100:130]  # none of them holds a rare word
    for query in ("zeppelin python java", "quasar quasar river coffee guitar", "zeppelin quasar music"):
        hits, leg = bounded_answer(index, query, dense, corpus)
        assert leg.bounded and set(leg.selective or ()) <= {"zeppelin", "quasar"} and leg.selective
        assert_bm25_top_k(hits, candidates(corpus, index, query, dense, leg), K)  # each score its exact BM25


def test_a_selective_terms_document_missed_by_the_dense_leg_is_found(served: tuple[RareCorpus, LiveIndex]) -> None:
    corpus, index = served
    dense = corpus.ext[100:130]
    hits, leg = bounded_answer(index, "zeppelin python java", dense, corpus)
    found = {h.ext_id for h in hits}
    assert {corpus.ext[r] for r in RARE["zeppelin"]} <= found  # none of them among the dense candidates
    assert found - {corpus.ext[r] for r in RARE["zeppelin"]} <= set(dense)  # the rest: the dense ones
    # the approximation: the exact answer holds common-term documents outside the dense candidates
    exact = {h.ext_id for h in lexical_answers(index, ["zeppelin python java"], K)[0]}
    assert exact - found and not (exact - found) & set(dense)
    # a query without a selective term: the dense candidates alone, rescored
    hits, leg = bounded_answer(index, "python java", dense, corpus)
    assert leg.selective == () and hits and {h.ext_id for h in hits} <= set(dense)
    assert_bm25_top_k(hits, candidates(corpus, index, "python java", dense, leg), K)


@pytest.mark.parametrize("term_set_max", [50_000, 10], ids=["filter-clause", "wide-filter"])
@pytest.mark.parametrize("flt", [{"tag": "even"}, {"n": {"gte": 100, "lt": 300}}], ids=["half", "range"])
def test_filters_are_honoured_on_the_bounded_path(served: tuple[RareCorpus, LiveIndex], flt: dict,
                                                  term_set_max: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """tantivy: the filter as a query clause or applied to the hits; pisa: those of the filter's rows holding a
    selective term, or (a filter of more rows than `PRUNED_DEPTH`) PISA's hits read deeper and filtered."""
    monkeypatch.setattr(lexical_tantivy, "TERM_SET_MAX", term_set_max)
    monkeypatch.setattr(lexical_pisa, "PRUNED_DEPTH", 1000 if term_set_max > 10 else 50)
    corpus, index = served
    node = parse_filter(flt, {"n": "int", "tag": "str"})
    dense = corpus.ext[90:140]  # some match the filter, some do not (a dense leg filters them itself: not relied on)
    for query in ("quasar river coffee", "zeppelin quasar python"):
        hits, leg = bounded_answer(index, query, dense, corpus, flt)
        assert leg.bounded and all(matches(node, h.metadata) for h in hits)
        want = {e: s for e, s in candidates(corpus, index, query, dense, leg).items() if matches(node, corpus.meta[e])}
        assert_bm25_top_k(hits, want, K)


def test_deletes_and_written_documents_on_the_bounded_path(served: tuple[RareCorpus, LiveIndex]) -> None:
    corpus, index = served
    gone = [corpus.ext[3], corpus.ext[110]]  # a zeppelin holder, and a dense candidate
    vec = unit(1, seed=5)
    index.overlay.apply([LogEntry(1, UPSERT, "w-zep", "zeppelin zeppelin garden", {"n": 7, "tag": "odd"}, vec[0],
                                  "sha"),
                         *(LogEntry(2 + i, DELETE, e, None, {}, None, "sha") for i, e in enumerate(gone))])
    dense = corpus.ext[100:130]
    hits, _ = bounded_answer(index, "zeppelin python java", dense, corpus)
    found = [h.ext_id for h in hits]
    assert "w-zep" in found and not set(gone) & set(found)
    assert {corpus.ext[50], corpus.ext[121]} <= set(found)  # the zeppelin holders still served
    hits, _ = bounded_answer(index, "zeppelin python java", dense, corpus, {"tag": "even"})
    assert "w-zep" not in {h.ext_id for h in hits} and all(h.metadata["tag"] == "even" for h in hits)


def test_the_lexical_mode_and_the_exact_setting_stay_exact(served: tuple[RareCorpus, LiveIndex]) -> None:
    corpus, index = served
    lex = index.base.lexical
    assert lex is not None
    for query in ("zeppelin python java", "python java"):
        ref = by_ext(corpus, query, corpus.texts, lex)
        assert_bm25_top_k(lexical_answers(index, [query], K)[0], ref, K)  # `lexical_search`: what mode lexical runs
        legs = index.lexical_legs([query], K, bounded_from=None)
        assert not legs[0].bounded
        ((scores, ids),) = index.complete_legs(legs, [np.array([corpus.fids[100]], np.int64)])
        assert_bm25_top_k(index.hits(scores[None, :], ids[None, :])[0], ref, K)
    # below the threshold the bounded setting answers exactly too (the cost model: postings read), but for PISA
    # unfiltered (its own `BOUNDED_FROM`: its pruned top k is cheaper than the exact certificate at every size)
    legs = index.lexical_legs(["zeppelin python java"], K, bounded_from=N * 10)
    assert legs[0].bounded == (type(lex) is lexical_pisa.Engine)
    legs = index.lexical_legs(["zeppelin python java"], K, index.match({"tag": "even"}), bounded_from=N * 10)
    assert not legs[0].bounded  # a filtered leg keeps the threshold


def test_merge_counts_a_document_once_and_breaks_ties_by_id() -> None:
    scores, ids = bounded_leg.merge(np.array([3.0, 2.0, 1.0], np.float32), np.array([7, 5, 9]),
                                    np.array([2.0, 2.5], np.float32), np.array([4, 5]), 3)
    assert ids.tolist() == [7, 5, 4] and scores.tolist() == [3.0, 2.5, 2.0]


class Counting:
    """The engine's tantivy searcher, counting the queries run through it."""

    def __init__(self, searcher: Any) -> None:
        self.searcher, self.runs = searcher, 0

    def search(self, *args: Any, **kwargs: Any) -> Any:
        self.runs += 1
        return self.searcher.search(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.searcher, name)


def test_a_tie_across_the_kth_place_costs_one_run_and_is_broken_by_row(tmp_path: Path) -> None:
    """40 documents score alike (the same terms, the same length) and only k=10 are wanted: the selective leg (an
    exhaustive query) reads deep enough at once to see every tie, where reading k+1 hits saw a tie at the k-th place
    and ran the whole query again 4x deeper (half the bounded leg's time at 10M documents). The 10 kept are the
    lowest rows, as every engine breaks ties; a filter wider than TERM_SET_MAX applied to the hits keeps that."""
    from indexer.runtime.lexical import build_lexical, lexical_info, open_lexical

    docs = [(i, "alpha beta" if i % 2 == 0 else "gamma delta") for i in range(80)]  # alpha at rows 0, 2, .., 78
    info = build_lexical(tmp_path, docs, lexical_info(engine="tantivy"))
    index = open_lexical(tmp_path, info)
    counting = Counting(index.searcher)  # type: ignore[attr-defined]
    index.searcher = counting  # type: ignore[attr-defined]
    scores, rows = index.selective_top_rows(["alpha", "beta"], ["alpha"], 10, None, None)
    assert counting.runs == 1
    assert rows.tolist() == list(range(0, 20, 2)) and len(set(scores.tolist())) == 1
    counting.runs = 0
    allowed = np.arange(10, 80, dtype=np.int64)  # wide: past TERM_SET_MAX, applied to the hits
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lexical_tantivy, "TERM_SET_MAX", 5)
        _, rows = index.selective_top_rows(["alpha", "beta"], ["alpha"], 10, allowed, np.array([12, 14]))
    assert rows.tolist() == list(range(10, 32, 2))[:1] + list(range(16, 36, 2))[:9]


def test_pisas_selective_rows_break_ties_by_row_through_either_path(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """PISA's `selective_top_rows`: 40 documents tie and k=10 are wanted; the lowest rows are kept whether the
    selective term's rows come from PISA (its pruned top, which keeps the first documents of a tie in its document
    order: here by row, the documents being alike) or a filter's rows are read from the forward index (a filter of
    at most `PRUNED_DEPTH` rows), tombstones skipped either way."""
    from indexer.runtime.lexical import build_lexical, lexical_info, open_lexical

    docs = [(i, "alpha beta" if i % 2 == 0 else "gamma delta") for i in range(80)]  # alpha at rows 0, 2, .., 78
    index = open_lexical(tmp_path, build_lexical(tmp_path, docs, lexical_info(engine="pisa")))
    scores, rows = index.selective_top_rows(["alpha", "beta"], ["alpha"], 10, None, None)
    assert rows.tolist() == list(range(0, 20, 2)) and len(set(scores.tolist())) == 1
    allowed = np.arange(10, 80, dtype=np.int64)
    for depth in (1000, 20):  # the filter's 70 rows read, or PISA's top 26 (20 + 2 tombstones, at 70 / 80)
        monkeypatch.setattr(lexical_pisa, "PRUNED_DEPTH", depth)
        got, rows = index.selective_top_rows(["alpha", "beta"], ["alpha"], 10, allowed, np.array([12, 14]))
        assert rows.tolist() == [10, *range(16, 34, 2)] and got.tolist() == scores.tolist()
        _, rows = index.selective_top_rows(["gamma"], ["gamma"], 5, np.array([3, 4, 5, 7], np.int64), None)
        assert rows.tolist() == [3, 5, 7]


def test_in_sorted_is_isin_for_an_ascending_set() -> None:
    from indexer.runtime.rowsets import in_sorted

    rng = np.random.default_rng(0)
    for n_set, n_values in ((0, 5), (5, 0), (1, 10), (1_000, 300), (50_000, 2_000)):
        ascending = np.unique(rng.integers(0, 4 * max(n_set, 1), n_set))
        values = rng.integers(-3, 4 * max(n_set, 1) + 3, n_values)
        assert in_sorted(values, ascending).tolist() == np.isin(values, ascending).tolist()
        grid = values[: n_values // 2 * 2].reshape(-1, 2)  # a search's (queries, k) ids, as the overlay tests them
        assert in_sorted(grid, ascending).tolist() == np.isin(grid, ascending).tolist()


def test_pisas_bounded_leg_is_pruned_to_its_depth_and_exact_on_the_rows_it_returns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PISA's bounded leg reads only its top `PRUNED_DEPTH` over the selective terms (pruned inside PISA, each term
    weighted by its count in the query): its answer is the exact BM25, over every term, best k of those rows. So a
    holder past the depth that the common terms would have lifted is lost (the approximation); with the depth past
    every holder it is the exact best k among the holders. The engine's own `SELECTIVE_DF` picks the terms, and
    `bounded_from=None` answers exactly."""
    from indexer.runtime.lexical import build_lexical, lexical_info, open_lexical
    from tests.indexer.runtime.test_lexical import ref_of

    rng = np.random.default_rng(5)
    docs = []
    for i in range(600):
        words = list(rng.choice(["beta", "gamma", "delta"], int(rng.integers(1, 9))))
        words += ["alpha"] * int(rng.integers(1, 4)) * (i % 3 == 0) + ["omega"] * (i % 50 == 0)
        docs.append((i, " ".join(words + [f"pad{j}" for j in range(int(rng.integers(0, 6)))])))
    index = open_lexical(tmp_path, build_lexical(tmp_path, docs, lexical_info(engine="pisa")))
    query, k = "alpha alpha beta gamma", 10
    full, sel = ref_of(index, query, docs), ref_of(index, "alpha alpha", docs)
    holders = sorted(sel, key=lambda f: (-sel[f], f))
    depth = next(d for d in range(20, len(holders)) if sel[holders[d - 1]] > sel[holders[d]] + 1e-3)

    def best(rows: set[int]) -> list[int]:
        return sorted(rows, key=lambda f: (-round(full[f], 4), f))[:k]

    terms, selective = index.analyzer.terms(query), index.analyzer.terms("alpha")
    monkeypatch.setattr(lexical_pisa, "PRUNED_DEPTH", depth)
    scores, rows = index.selective_top_rows(terms, selective, k, None, None)
    assert rows.tolist() == best(set(holders[:depth]))
    assert scores.tolist() == pytest.approx([full[f] for f in rows.tolist()], rel=1e-5)
    assert rows.tolist() != best(set(holders))  # lost: a holder past the depth, lifted by beta and gamma
    monkeypatch.setattr(lexical_pisa, "PRUNED_DEPTH", 10_000)
    scores, rows = index.selective_top_rows(terms, selective, k, None, None)
    assert rows.tolist() == best(set(holders))
    monkeypatch.setattr(lexical_pisa.Engine, "SELECTIVE_DF", 0.4)  # alpha (200 of 600), not beta or gamma
    leg = bounded_leg.begin(index, query, k, bounded_from=0)
    assert leg.selective == tuple(sorted(selective)) and leg.ids.tolist() == best(set(holders))
    exact = bounded_leg.begin(index, query, k, bounded_from=None)
    assert not exact.bounded and exact.ids.tolist() == best(set(full))
