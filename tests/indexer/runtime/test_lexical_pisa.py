"""The PISA engine's own guarantees beyond the lexical contract (tests/indexer/runtime/test_lexical.py): answers stay
exact when its quantised impacts reorder documents (PISA's hits are rescored and read deeper), wide filters and
tombstones are over-fetched until k match, PISA loads without PyTerrier or a JVM, and damaged files are refused
rather than rebuilt or crashed on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from indexer.runtime import bounded_leg, lexical, lexical_pisa
from indexer.runtime.lexical import LEXICAL_DIR, LexicalError, build_lexical, choose_engine, lexical_info, open_lexical
from tests.indexer.runtime.test_lexical import ref_of


def _zipf_docs(seed: int, n: int) -> list[tuple[int, str]]:
    rng = np.random.default_rng(seed)
    words = [f"w{i:02d}x" for i in range(40)]
    p = 1 / np.arange(1, 41)
    fids = rng.choice(10**6, n, replace=False)
    return [(int(f), " ".join(rng.choice(words, int(rng.integers(1, 7)), p=p / p.sum()))) for f in fids]


def test_coarse_impacts_wide_filters_and_tombstones_give_the_full_sort(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """At 3-bit impacts most documents tie in PISA's order: every answer still equals the full sort of Lucene's BM25
    by hand (scores to float32), because PISA's hits are rescored exactly and read deeper until the k-th is certain;
    a wide filter of the worst scorers and tombstones are read deep enough for k of them."""
    docs = _zipf_docs(3, 4000)
    monkeypatch.setattr(lexical_pisa, "QUANT_BITS", 3)
    index = open_lexical(tmp_path, build_lexical(tmp_path, docs, lexical_info(engine="pisa")))
    monkeypatch.setattr(lexical_pisa, "FORWARD_MAX", 0)  # every filter over-fetched from PISA
    reads: list[int] = []
    real = lexical_pisa.Engine._candidates
    monkeypatch.setattr(lexical_pisa.Engine, "_candidates",
                        lambda self, *a: reads.append(a[-1]) or real(self, *a))  # type: ignore[func-returns-value]
    excluded = np.array([f for f, _ in docs[::7]], np.int64)
    for q in ["w00x w01x w30x", "w00x w00x w02x w25x w39x", "w03x w01x w00x w17x w22x w35x", "w00x w05x"]:
        ref = ref_of(index, q, docs)
        low = np.sort(np.array([f for f, s in ref.items() if s < np.median(list(ref.values()))], np.int64))
        for k in (1, 10, 50):
            for allowed, drop in ((None, None), (None, excluded), (low, None), (low, excluded)):
                kept = set(ref) - set(() if drop is None else drop.tolist())
                kept &= set(ref if allowed is None else allowed.tolist())
                want = sorted(kept, key=lambda f: (-round(ref[f], 4), f))[:k]
                scores, ids = index.search(q, k, allowed=allowed, excluded=drop)
                assert ids.tolist() == want, (q, k, allowed is None, drop is None)
                assert scores.tolist() == pytest.approx([ref[f] for f in want], rel=1e-5)
    assert max(reads) > 4 * 51  # the coarse order did make it read deeper than its first limit


def test_pisa_loads_without_pyterrier_or_a_jvm() -> None:
    code = ("import sys; from indexer.runtime.lexical_pisa import pisa; pisa(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyterrier', 'jnius', 'pandas')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[3])
    assert out.stdout.strip() == "[]"


def test_a_damaged_pisa_index_is_refused_not_rebuilt(tmp_path: Path) -> None:
    info = build_lexical(tmp_path, _zipf_docs(1, 50), lexical_info(engine="pisa"))
    (tmp_path / LEXICAL_DIR / lexical_pisa.INDEX_FILE).unlink()
    with pytest.raises(LexicalError, match="is missing or empty"):
        open_lexical(tmp_path, info)
    assert not (tmp_path / LEXICAL_DIR / lexical_pisa.INDEX_FILE).exists()


def test_without_pyterrier_pisa_the_engine_is_not_installed_and_auto_falls_back(monkeypatch: pytest.MonkeyPatch
                                                                               ) -> None:
    code = ("import sys; sys.modules['pyterrier_pisa'] = None\n"  # as if the wheel were not installed
            "from indexer.runtime.lexical import LexicalError, choose_engine, engine_class\n"
            "try:\n    engine_class('pisa')\nexcept LexicalError as exc:\n    print(exc)\n"
            "print(choose_engine('auto', 2_000_000)[0], choose_engine('auto', 5_000_000)[0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[3]).stdout.splitlines()
    assert out == ["lexical engine 'pisa' is not installed (no module named 'pyterrier_pisa' (pip install "
                   "pyterrier-pisa))", "bm25s tantivy"]
    monkeypatch.setitem(lexical.ENGINES, "pisa", "indexer.runtime.no_such_engine")
    engine, why = choose_engine("auto", 10**6)
    assert engine == "bm25s" and "lexical engine 'pisa' is not installed" in why


def test_a_build_keeps_pisas_progress_lines_out_of_the_output(tmp_path: Path, capfd: pytest.CaptureFixture[str]
                                                              ) -> None:
    print("before")
    build_lexical(tmp_path, _zipf_docs(2, 200), lexical_info(engine="pisa"))
    print("after")
    out, err = capfd.readouterr()
    assert out == "before\nafter\n" and "Create index" not in err and "[info]" not in err


def test_concurrent_searches_answer_as_serial_ones(tmp_path: Path) -> None:
    """PISA releases the GIL while it searches (`THREADS`): searches from several threads at once (as the API's
    lexical workers run them) answer exactly what they answer one at a time."""
    from concurrent.futures import ThreadPoolExecutor

    docs = _zipf_docs(4, 3000)
    index = open_lexical(tmp_path, build_lexical(tmp_path, docs, lexical_info(engine="pisa")))
    queries = [text for _, text in docs[:200]]
    serial = [index.search(q, 10)[1].tolist() for q in queries]
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(lambda q: index.search(q, 10)[1].tolist(), queries * 3)) == serial * 3


def test_documents_sharing_common_terms_get_neighbouring_pisa_ids() -> None:
    """`document_order` sorts rows by their most common terms (as tuples, most common first), ties by row: rows of
    the same terms end up side by side whatever their rows, a row whose terms prefix another's comes first, and 0
    keys is row order."""
    # rows 0..6: terms by id; df: t0 in 5 rows, t1 in 4, t2 in 2, t3 in 1 (t0 the most common)
    docs = {0: [2, 3], 1: [0, 1], 2: [0], 3: [0, 1, 2], 4: [1], 5: [0, 1], 6: [0]}
    rows = np.array([r for r, ts in docs.items() for _ in ts], np.int64)
    tids = np.array([t for ts in docs.values() for t in ts], np.int32)
    df = np.bincount(tids, minlength=4)
    assert df.tolist() == [5, 4, 2, 1]
    order = lexical_pisa.document_order(rows, tids, df, 7, keys=3)
    assert order.tolist() == [2, 6, 1, 5, 3, 4, 0]  # (t0) x2 by row, (t0 t1) x2, (t0 t1 t2), (t1), (t2 t3)
    assert lexical_pisa.document_order(rows, tids, df, 7, keys=1).tolist() == [1, 2, 3, 5, 6, 4, 0]
    assert lexical_pisa.document_order(rows, tids, df, 7, keys=0).tolist() == list(range(7))
    assert lexical_pisa.document_order(rows[:0], tids[:0], df, 0).tolist() == []


def test_answers_are_the_same_in_document_order_and_row_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PISA's document ids are not the rows (its documents are named by their rows): every answer, exact or the
    bounded leg's with a depth past every holder, filtered or not, is the same as with the documents in row order."""
    docs = _zipf_docs(11, 3000)
    ordered = open_lexical(tmp_path / "ordered", build_lexical(tmp_path / "ordered", docs, lexical_info(engine="pisa")))
    monkeypatch.setattr(lexical_pisa, "ORDER_KEYS", 0)
    plain = open_lexical(tmp_path / "rows", build_lexical(tmp_path / "rows", docs, lexical_info(engine="pisa")))
    monkeypatch.setattr(lexical_pisa, "PRUNED_DEPTH", 10_000)
    # PISA itself orders a tie by its document ids: the two layouts' raw hits hold the same rows in another order
    raw = [ix._candidates(ix._query(["w00x"]), {"w00x": 1.0}, 3000)[1] for ix in (ordered, plain)]  # type: ignore[attr-defined]
    assert sorted(raw[0].tolist()) == sorted(raw[1].tolist()) and raw[0].tolist() != raw[1].tolist()
    allowed = np.sort(np.array([f for f, _ in docs[::3]], np.int64))
    for q in ["w00x w01x w30x", "w00x w00x w02x w25x w39x", "w03x w17x", "w00x"]:
        for k in (1, 10, 100):
            for flt in (None, allowed):
                a, b = ordered.search(q, k, allowed=flt), plain.search(q, k, allowed=flt)
                assert a[1].tolist() == b[1].tolist() and a[0].tolist() == b[0].tolist(), (q, k)
        terms = ordered.analyzer.terms(q)
        got = [ix.selective_top_rows(terms, terms, 50, None, None) for ix in (ordered, plain)]
        assert got[0][1].tolist() == got[1][1].tolist() and got[0][0].tolist() == got[1][0].tolist()


def test_the_query_algorithm_is_read_when_a_query_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PISA runs `ALGORITHM` as it is when a query runs (WAND by default), so a bench that sets it measures
    what it set, and the answers are the same under each algorithm."""
    docs = _zipf_docs(5, 800)
    index = open_lexical(tmp_path, build_lexical(tmp_path, docs, lexical_info(engine="pisa")))
    real, asked = lexical_pisa.pisa(), []

    class Recording:
        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        def retrieve(self, context: object, algorithm: str, *args: object, **kwargs: object) -> object:
            asked.append(algorithm)
            return real.retrieve(context, algorithm, *args, **kwargs)

    monkeypatch.setattr(lexical_pisa, "pisa", lambda: Recording())
    assert lexical_pisa.ALGORITHM == "wand"
    answers = {}
    for algorithm in ("wand", "block_max_wand", "maxscore", "block_max_maxscore"):
        monkeypatch.setattr(lexical_pisa, "ALGORITHM", algorithm)
        asked.clear()
        answers[algorithm] = index.search("w00x w03x w17x", 10)
        assert asked and set(asked) == {algorithm}
    first = answers["wand"]
    for got in answers.values():
        assert got[1].tolist() == first[1].tolist() and got[0].tolist() == first[0].tolist()


def test_a_filter_used_again_is_searched_through_its_own_postings_with_the_same_answers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`prepare_rows` gives a filter of at most `POSTINGS_SHARE` of the documents its own postings, held for that
    very rows array (an equal copy is not prepared); its searches then read neither PISA nor the forward index's
    rows, exact and hybrid's leg alike (the leg exact: `bounded_leg.begin`), with tombstones, and answer exactly as
    before. A wider filter and an index of no documents are not prepared."""
    docs = _zipf_docs(8, 3000)
    index = open_lexical(tmp_path, build_lexical(tmp_path, docs, lexical_info(engine="pisa")))
    fids = np.array(sorted(f for f, _ in docs), np.int64)
    rows = index.rows_of(fids[::25])  # 120 of 3,000: 4 %
    assert not index.prepare_rows(index.rows_of(fids[::19]))  # 158: over 5 %
    excluded = fids[1::50]
    queries = ["w00x w01x w30x", "w00x w00x w02x w25x w39x", "w03x w17x", "w00x", "nothing here"]
    before = {(q, k, drop is None): index.search(q, k, allowed_rows=rows, excluded=drop)
              for q in queries for k in (1, 10, 200) for drop in (None, excluded)}
    legs = {q: bounded_leg.begin(index, q, 10, allowed_rows=rows, excluded=excluded, bounded_from=0)
            for q in queries}
    assert any(leg.bounded for leg in legs.values())
    assert index.prepare_rows(rows) and index.prepared(rows) and not index.prepared(rows.copy())

    def not_read(*args: object) -> None:
        raise AssertionError("a prepared filter's search read PISA or the forward index's rows")

    monkeypatch.setattr(lexical_pisa.Engine, "_candidates", not_read)
    monkeypatch.setattr(index.forward, "score_rows", not_read)
    for (q, k, unexcluded), (scores, ids) in before.items():
        got = index.search(q, k, allowed_rows=rows, excluded=None if unexcluded else excluded)
        assert got[1].tolist() == ids.tolist() and got[0].tolist() == scores.tolist(), (q, k)
    for q, leg in legs.items():
        exact = bounded_leg.begin(index, q, 10, allowed_rows=rows, excluded=excluded, bounded_from=0)
        want = index.search(q, 10, allowed_rows=rows, excluded=excluded)
        assert not exact.bounded and exact.ids.tolist() == want[1].tolist()
        if leg.bounded:
            monkeypatch.undo()  # completing the bounded leg scores the dense candidates from the forward index
            done = bounded_leg.complete(index, leg, want[1])
            assert done[1].tolist() == want[1].tolist() and done[0].tolist() == want[0].tolist(), q
            monkeypatch.setattr(lexical_pisa.Engine, "_candidates", not_read)
            monkeypatch.setattr(index.forward, "score_rows", not_read)
    empty = open_lexical(tmp_path / "e", build_lexical(tmp_path / "e", [], lexical_info(engine="pisa")))
    assert not empty.prepare_rows(np.zeros(0, np.int64))


def test_a_filter_whose_postings_would_take_over_a_quarter_of_the_cache_is_not_prepared(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`prepare_rows` bounds one filter's postings to a quarter of `POSTINGS_BYTES` (8 bytes an entry): a filter
    within the share of documents but over that size keeps the paths it had."""
    docs = _zipf_docs(9, 3000)
    index = open_lexical(tmp_path, build_lexical(tmp_path, docs, lexical_info(engine="pisa")))
    rows = index.rows_of(np.array(sorted(f for f, _ in docs), np.int64)[::25])
    entries = index.forward.n_entries(rows)  # type: ignore[attr-defined]
    monkeypatch.setattr(lexical_pisa, "POSTINGS_BYTES", 4 * 8 * entries - 1)
    assert not index.prepare_rows(rows) and not index.prepared(rows)
    monkeypatch.setattr(lexical_pisa, "POSTINGS_BYTES", 4 * 8 * entries + 4096)
    fresh = open_lexical(tmp_path, index.info)  # its cache sized by the setting when it was opened
    rows = fresh.rows_of(np.array(sorted(f for f, _ in docs), np.int64)[::25])
    assert fresh.prepare_rows(rows) and fresh.prepared(rows)
