"""Reading your own corpus (JSONL, CSV/TSV, Parquet, BEIR), the corpus store (external ids, metadata, filters),
ranking metrics and the shrink threshold: real files and real SQLite, no encoder (see test_corpus_build.py)."""

from __future__ import annotations

import gzip
import json
import math
import os
import random
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer import ingest as ingest_mod
from indexer.corpus import CorpusFormatError, detect_format, open_corpus
from indexer.corpus_rows import join_title
from indexer.eval_files import query_files, read_qrels, read_queries
from indexer.evalset import graded_eval_set
from indexer.ingest import ingest_store
from indexer.metrics import mean_metrics, per_query
from indexer.runtime.filters import (
    LIMITS,
    SQL_MAX_NESTING,
    SQL_MAX_TERMS,
    Combine,
    FilterError,
    Sql,
    check_limits,
    compile_sql,
    matches,
    parse_filter,
    plan,
)
from indexer.runtime.ids import ASSIGNED_IDS_FROM
from indexer.runtime.manifest import Manifest
from indexer.runtime.shrink_guard import DEFAULT_MAX_SHRINK, max_shrink, shrinks_too_much
from indexer.runtime.store import STORE, Store
from indexer.runtime.store_writer import write_store

ROWS: list[dict[str, Any]] = [
    {"id": 17, "text": "How do I learn Python?", "bucket": 1, "year": 2001, "lang": "en", "score": 0.5},
    {"id": "17", "text": "Why is the sky blue?", "bucket": 2, "year": 1999, "lang": "en", "score": 1.5},
    {"id": "q-abc", "text": "Wie lerne ich Deutsch?", "bucket": 1, "year": 2009, "lang": "de", "score": 2.0},
    {"id": -5, "text": "  ", "bucket": 3, "year": 2010, "lang": "fr", "score": 0.0},  # empty: skipped
    {"id": 17, "text": "What is the best way to learn Python?", "bucket": 3, "year": 2005, "lang": "en",
     "score": 2.5},  # repeats 17: replaces the first row
    {"id": 4, "text": "Comment apprendre le français ?", "bucket": 2, "year": 2010, "lang": "fr", "score": 3.0},
]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    return path


def ingest_only(path: Path, tmp_path: Path, **fields: Any) -> tuple[Store, Any, dict[str, str]]:  # noqa: ANN401
    """Read `path` into a store the way a build does, without encoding."""
    import tempfile

    stage = Path(tempfile.mkdtemp(prefix="stage-", dir=tmp_path))
    res, schema, _ = ingest_store(open_corpus(path, **fields), stage, None, batch_size=None, limit=None)
    return Store(stage / STORE), res, schema


def by_ext(store: Store) -> dict[Any, Any]:
    with store._lock:
        fids = [r[0] for r in store._con.execute("SELECT id FROM docs")]
    return {(type(d.ext_id).__name__, d.ext_id): d for d in store.documents(fids).values()}


# --- reading -----------------------------------------------------------------------------------------------------

def test_jsonl_ids_keep_their_type_duplicates_upsert_and_empty_texts_are_skipped(tmp_path: Path) -> None:
    store, res, schema = ingest_only(write_jsonl(tmp_path / "c.jsonl.gz", ROWS), tmp_path)
    try:
        docs = by_ext(store)
        assert set(docs) == {("int", 17), ("str", "17"), ("str", "q-abc"), ("int", 4)}
        # the repeated id kept the last row's text and metadata, under the same FAISS id
        assert docs[("int", 17)].text == "What is the best way to learn Python?"
        assert docs[("int", 17)].metadata == {"bucket": 3, "year": 2005, "lang": "en", "score": 2.5}
        # integer ids in [0, 2^62) are their own FAISS ids; strings get ids from 2^62 up
        assert docs[("int", 17)].id == 17 and docs[("int", 4)].id == 4
        assert docs[("str", "17")].id >= ASSIGNED_IDS_FROM and docs[("str", "q-abc")].id >= ASSIGNED_IDS_FROM
        assert (res.rows_read, res.skipped_empty, res.duplicate_ids, res.n_docs) == (6, 1, 1, 4)
        assert schema == {"bucket": "int", "lang": "str", "score": "float", "year": "int"}
        assert store.metadata_schema() == schema
        assert store.resolve_ext_ids(["17", "q-abc", "4", "-5", "nope"]) == {
            "17": docs[("str", "17")].id, "q-abc": docs[("str", "q-abc")].id, "4": 4}
    finally:
        store.close()


def test_same_corpus_as_jsonl_csv_tsv_and_parquet_gives_the_same_store(tmp_path: Path) -> None:
    rows = [r for r in ROWS if isinstance(r["id"], int)]  # CSV has no types: "17" would read as 17
    cols = list(rows[0])
    csv_lines = [",".join(cols)] + [",".join(json.dumps(r[c]) if isinstance(r[c], str) and "," in r[c] else str(r[c])
                                             for c in cols) for r in rows]
    (tmp_path / "c.csv").write_text("\n".join(csv_lines) + "\n", encoding="utf-8")
    (tmp_path / "c.tsv").write_text("\n".join(["\t".join(cols)] + ["\t".join(str(r[c]) for c in cols) for r in rows])
                                    + "\n", encoding="utf-8")
    write_jsonl(tmp_path / "c.jsonl", rows)
    pq_dir = tmp_path / "pq"
    pq_dir.mkdir()
    table = pa.Table.from_pylist(rows)
    pq.write_table(table.slice(0, 2), pq_dir / "part-0.parquet")
    pq.write_table(table.slice(2), pq_dir / "part-1.parquet")
    stores = {}
    for name in ("c.jsonl", "c.csv", "c.tsv", "pq"):
        sub = tmp_path / ("store-" + name.replace(".", "_"))
        sub.mkdir()
        store, res, schema = ingest_only(tmp_path / name, sub)
        stores[name] = (by_ext(store), schema, (res.rows_read, res.skipped_empty, res.duplicate_ids))
        store.close()
    ref = stores["c.jsonl"]
    assert ref[2] == (4, 1, 1)
    for name, got in stores.items():
        assert got == ref, name


def test_title_is_joined_like_beir_and_metadata_objects_are_flattened(tmp_path: Path) -> None:
    assert join_title("Python", "How do I learn it?") == "Python How do I learn it?"
    assert join_title("", "  text ") == "text" and join_title(None, "text") == "text"
    beir = tmp_path / "beir"
    beir.mkdir()
    write_jsonl(beir / "corpus.jsonl", [
        {"_id": "d1", "title": "Python", "text": "How do I learn it?", "metadata": {"url": "u1", "year": 2001}},
        {"_id": "d2", "title": "", "text": "No title here", "metadata": {}},
        {"_id": "d3", "title": "Only a title", "text": ""},  # the joined text is not empty: kept
    ])
    assert detect_format(beir) == "beir"
    store, res, schema = ingest_only(beir, tmp_path)
    try:
        docs = by_ext(store)
        assert docs[("str", "d1")].text == "Python How do I learn it?"
        assert docs[("str", "d1")].metadata == {"title": "Python", "url": "u1", "year": 2001}
        assert docs[("str", "d2")].text == "No title here" and docs[("str", "d3")].text == "Only a title"
        assert schema == {"title": "str", "url": "str", "year": "int"} and res.skipped_empty == 0
    finally:
        store.close()
    # chosen metadata fields only; a chosen field that is missing from a row is simply absent
    (tmp_path / "only").mkdir()
    store, _, schema = ingest_only(beir, tmp_path / "only", metadata_fields=["year"])
    try:
        assert schema == {"year": "int"} and by_ext(store)[("str", "d2")].metadata == {}
    finally:
        store.close()


def test_csv_cells_are_typed_by_a_documented_rule(tmp_path: Path) -> None:
    path = tmp_path / "c.csv"
    path.write_text('doc,body,zip,price,note\n007,"a, b",02134,2.5,\n8,"multi\nline",12345,1e3,x\n',
                    encoding="utf-8")
    (tmp_path / "s").mkdir()
    store, _, schema = ingest_only(path, tmp_path / "s", id_field="doc", text_field="body")
    try:
        docs = by_ext(store)
        assert set(docs) == {("str", "007"), ("int", 8)}  # "007" is not a canonical integer: stays a string
        assert docs[("str", "007")].metadata == {"zip": "02134", "price": 2.5}  # empty cell: absent
        assert docs[("int", 8)].metadata == {"zip": 12345, "price": 1000.0, "note": "x"}
        assert docs[("int", 8)].text == "multi\nline"
        assert schema == {"note": "str", "price": "float", "zip": "int|str"}
    finally:
        store.close()


def test_format_detection(tmp_path: Path) -> None:
    quora = tmp_path / "q.tsv"
    quora.write_text("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n0\t1\t2\ta?\tb?\t0\n")
    other = tmp_path / "o.tsv"
    other.write_text("id\ttext\n1\thello\n")
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00\xff" * 50)
    (tmp_path / "pq").mkdir()
    pq.write_table(pa.table({"id": [1], "text": ["x"]}), tmp_path / "pq" / "a.parquet")
    assert [detect_format(p) for p in (quora, other, junk, tmp_path / "pq")] == ["quora", "tsv", "quora", "parquet"]
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "notes.txt").write_text("hello\n")
    assert detect_format(tmp_path / "texts") == "files"  # a folder of documents (tests/indexer/test_file_docs.py)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.rtf").write_text("hello\n")
    with pytest.raises(CorpusFormatError, match=r"must hold corpus.jsonl .*, or documents \(\*.md, \*.html"):
        detect_format(tmp_path / "other")


BAD = {
    "bad-json.jsonl": ('{"id": 1, "text": "a"}\n\n{"id": 2, "text": \n', "bad-json.jsonl:3: not a JSON object"),
    # located in its line, not at the decoder's "line 2 column 1" (the line's newline)
    "cut-json.jsonl": ('{"id": 1, "text": "a"}\n{"id": 2, "text": "b" \n{"id": 3, "text": "c"}\n',
                       "cut-json.jsonl:2: not a JSON object: Expecting ',' delimiter at column 24"),
    "float-id.jsonl": ('{"id": 1, "text": "a"}\n{"id": 2.5, "text": "b"}\n',
                       "float-id.jsonl:2: id field 'id' must be a string or an integer, got float 2.5"),
    "no-id.jsonl": ('{"id": 1, "text": "a"}\n{"text": "b"}\n', "no-id.jsonl:2: no id field 'id'"),
    "no-text.jsonl": ('{"id": 1, "body": "a"}\n', "no-text.jsonl:1: no text field 'text'"),
    "array.jsonl": ('[1, "a"]\n', "array.jsonl:1: expected one JSON object per line, got list"),
    "big-int.jsonl": ('{"id": 1, "text": "a", "n": 99999999999999999999}\n',
                      "big-int.jsonl:1: metadata field 'n': integer 99999999999999999999 does not fit in 64 bits"),
    # the metadata schema of indexer.runtime.metadata, the same PUT /documents enforces
    "two-pow-64.jsonl": ('{"id": 1, "text": "a", "m": {"x": [1, 18446744073709551616]}}\n',
                         "two-pow-64.jsonl:1: metadata field 'm.x[1]': integer 18446744073709551616 does not fit"),
    "below-int64.jsonl": ('{"id": 1, "text": "a", "n": -9223372036854775809}\n',
                          "below-int64.jsonl:1: metadata field 'n': integer -9223372036854775809 does not fit"),
    "deep.jsonl": ('{"id": 1, "text": "a"}\n{"id": 2, "text": "b", "m": ' + "[" * 300 + "]" * 300 + "}\n",
                   "deep.jsonl:2: metadata field 'm' nests deeper than 32 levels"),
    "very-deep.jsonl": ('{"id": 1, "text": "a", "m": ' + "[" * 100_000 + "]" * 100_000 + "}\n",
                        "very-deep.jsonl:1: JSON nested too deep to read"),
    "surrogate-meta.jsonl": ('{"id": 1, "text": "a", "tag": "x\\ud800"}\n',
                             "surrogate-meta.jsonl:1: metadata field 'tag': string 'x\\ud800' is not valid Unicode"),
    "surrogate-key.jsonl": ('{"id": 1, "text": "a", "m": {"\\udc00": 1}}\n',
                            "surrogate-key.jsonl:1: metadata field name '\\udc00' in 'm' is not valid Unicode"),
    "surrogate-text.jsonl": ('{"id": 1, "text": "a\\ud800"}\n',
                             "surrogate-text.jsonl:1: field 'text' is not valid Unicode"),
    "surrogate-id.jsonl": ('{"id": "\\ud800", "text": "a"}\n', "surrogate-id.jsonl:1: id '\\ud800' is not valid"),
    # a passage row's id: a version of passages would read document 1's passage 0 for it (docs/passages.md)
    "passage-id.jsonl": ('{"id": "\\u001fP[1,0]", "text": "a"}\n',
                         "passage-id.jsonl:1: id '\\x1fP[1,0]': a string id may not start with U+001F then 'P'"),
    # a passage row's record: a version of passages would drop the document's value under it
    "passage-key.jsonl": ('{"id": 1, "text": "a", "\\u001fpassage": [0, 1, 1]}\n',
                          "passage-key.jsonl:1: metadata field name '\\x1fpassage' is reserved"),
    "huge-meta.jsonl": ('{"id": 1, "text": "a", "blob": "' + "x" * 70_000 + '"}\n',
                        "huge-meta.jsonl:1: metadata is 70,011 bytes as JSON; the limit is 65,536"),
    "text-number.jsonl": ('{"id": 1, "text": 5}\n', "text-number.jsonl:1: field 'text' must be a string, got int"),
    "short.csv": ("id,text,lang\n1,a,en\n2,b\n", "short.csv:3: expected 3 comma-separated fields (the header's), "
                                                "got 2"),
    "no-text.csv": ("id,body\n1,a\n", "no-text.csv:1: no text column 'text'"),
    "dup-col.tsv": ("id\ttext\tid\n1\ta\t2\n", "dup-col.tsv:1: columns named more than once: id"),
    "empty-id.tsv": ("id\ttext\n\tb\n", "empty-id.tsv:2: id field 'id' is empty"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_rows_name_file_and_line(tmp_path: Path, name: str) -> None:
    content, expected = BAD[name]
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(CorpusFormatError) as info:
        ingest_only(path, tmp_path)
    assert str(info.value).startswith(str(tmp_path)) and expected in str(info.value)


def test_bad_bytes_and_parquet_columns(tmp_path: Path) -> None:
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"id": 1, "text": "ok"}\n{"id": 2, "text": "caf\xe9"}\n')
    with pytest.raises(CorpusFormatError, match=r"latin.jsonl:2: not UTF-8"):
        ingest_only(latin, tmp_path)
    latin_csv = tmp_path / "latin.csv"
    latin_csv.write_bytes(b"id,text\n1,ok\n2,caf\xe9\n")
    with pytest.raises(CorpusFormatError, match=r"latin.csv:3: not UTF-8"):
        ingest_only(latin_csv, tmp_path)
    double = tmp_path / "double.parquet"
    pq.write_table(pa.table({"id": [1.0, 2.0], "text": ["a", "b"]}), double)
    with pytest.raises(CorpusFormatError, match="id column 'id' has type double"):
        ingest_only(double, tmp_path)
    nulls = tmp_path / "nulls.parquet"
    pq.write_table(pa.table({"id": pa.array([1, None], pa.int64()), "text": ["a", "b"]}), nulls)
    with pytest.raises(CorpusFormatError, match=r"nulls.parquet:2: id field 'id' is null"):
        ingest_only(nulls, tmp_path)
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"PAR1 not really")
    with pytest.raises(CorpusFormatError, match="junk.parquet: not a readable Parquet file"):
        ingest_only(junk, tmp_path)


def test_ingest_streams_memory_bounded_by_a_chunk_not_the_file(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Python-side memory while ingesting a 12 MB file stays near one chunk of rows (the texts go to SQLite)."""
    monkeypatch.setattr(ingest_mod, "INGEST_CHUNK", 256)
    path = tmp_path / "big.jsonl"
    filler = "lorem ipsum dolor sit amet " * 74  # 2 kB per text
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(6000):
            fh.write(json.dumps({"id": f"doc-{i}", "text": f"{i} {filler}", "n": i}) + "\n")
    size = path.stat().st_size
    tracemalloc.start()
    try:
        store, res, _ = ingest_only(path, tmp_path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    try:
        assert res.n_docs == 6000 and store.count() == 6000
        assert size > 12e6 and peak < size / 5, (size, peak)
    finally:
        store.close()


def test_queries_and_qrels_readers(tmp_path: Path) -> None:
    q = write_jsonl(tmp_path / "queries.jsonl", [{"_id": "q1", "text": "first?"}, {"_id": 2, "text": "second?"},
                                                 {"_id": "q3", "text": " "}])
    got = read_queries(q)
    assert got.texts == {"q1": "first?", "2": "second?"} and got.skipped_empty == 1
    r = tmp_path / "qrels.tsv"
    r.write_text("query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td2\t0\n2\t17\t1\n")
    assert read_qrels(r) == {"q1": {"d1": 2, "d2": 0}, "2": {"17": 1}}
    trec = tmp_path / "qrels.trec"
    trec.write_text("q1 0 d1 1\nq1 0 d3 2\n")
    assert read_qrels(trec) == {"q1": {"d1": 1, "d3": 2}}
    bad = tmp_path / "bad.tsv"
    bad.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\thigh\n")
    with pytest.raises(CorpusFormatError, match="bad.tsv:3: score must be an integer, got 'high'"):
        read_qrels(bad)
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    with pytest.raises(CorpusFormatError, match="no qrels/test.tsv"):
        query_files(beir, None)
    (beir / "qrels" / "dev.tsv").write_text("q\td\t1\n")
    (beir / "queries.jsonl").write_text('{"_id": "q", "text": "x"}\n')
    assert query_files(beir, None) == (beir / "queries.jsonl", beir / "qrels" / "dev.tsv")  # the only qrels file


def test_eval_set_maps_judgments_to_faiss_ids(tmp_path: Path) -> None:
    from indexer.eval_files import Queries

    resolve = {"d1": 1, "d2": 2, "q1": 7}.get
    ev, stats = graded_eval_set(
        Queries({"q1": "a?", "q2": "b?", "q3": "c?"}),
        {"q1": {"d1": 2, "gone": 1, "d2": 0}, "q2": {"d2": 0}, "q9": {"d1": 1}, "q3": {"gone": 1}},
        lambda keys: {k: v for k in keys if (v := resolve(k)) is not None})
    assert ev.query_ext_ids == ["q1", "q3"] and ev.self_docs == [7, -1]
    assert ev.qrels == [{1: 2, -2: 1, 2: 0}, {-2: 1}]  # one id per missing document, shared across queries
    assert (stats.unknown_queries, stats.without_relevant, stats.missing_docs) == (1, 1, 1)


# --- store and filters -------------------------------------------------------------------------------------------

LANGS = ("en", "fr", "de", "es")


def random_rows(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        row: dict[str, Any] = {"id": f"d{i}" if i % 3 else i, "text": f"document {i}"}
        if rng.random() < 0.9:
            row["bucket"] = rng.randrange(10)
        row["year"] = rng.randrange(1990, 2021)
        row["lang"] = rng.choice(LANGS)
        row["score"] = round(rng.uniform(-1, 1), 3) if rng.random() < 0.8 else rng.randrange(-1, 2)
        row["flag"] = rng.random() < 0.3
        row["code"] = rng.choice([1, 2, "1", "a", "b"])  # mixed: int|str
        row["tags"] = [rng.choice(LANGS)]
        rows.append(row)
    return rows


@pytest.fixture(scope="module")
def meta_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, list[dict[str, Any]]]:
    tmp = tmp_path_factory.mktemp("meta")
    rows = random_rows(3000)
    store, _, _ = ingest_only(write_jsonl(tmp / "c.jsonl", rows), tmp)
    return store, rows


@pytest.fixture(scope="module")
def small_meta_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, list[dict[str, Any]]]:
    """300 rows: for filters of 1,000 conditions, which brute force evaluates in Python per row."""
    tmp = tmp_path_factory.mktemp("meta-small")
    rows = random_rows(300)
    store, _, _ = ingest_only(write_jsonl(tmp / "c.jsonl", rows), tmp)
    return store, rows


def brute_force(flt: dict[str, Any], row: dict[str, Any]) -> bool:
    """The filter semantics written out independently of indexer.runtime.filters."""
    out = True
    for key, cond in flt.items():
        if key == "and":
            ok = all(brute_force(f, row) for f in cond)
        elif key == "or":
            ok = any(brute_force(f, row) for f in cond)
        elif key not in row:
            ok = False
        else:
            v = row[key]
            same = lambda a, b: type(a) is type(b) and a == b or (  # noqa: E731
                not isinstance(a, (str, bool)) and not isinstance(b, (str, bool)) and a == b)
            if not isinstance(cond, dict):
                ok = same(v, cond)
            else:
                ok = True
                if "eq" in cond:
                    ok &= same(v, cond["eq"])
                if "in" in cond:
                    ok &= any(same(v, x) for x in cond["in"])
                bounds = {k: cond[k] for k in ("gt", "gte", "lt", "lte") if k in cond}
                if bounds:
                    numeric = not isinstance(next(iter(bounds.values())), str)
                    if isinstance(v, str) == numeric or isinstance(v, bool):
                        ok = False
                    else:
                        ok &= all({"gt": v > b, "gte": v >= b, "lt": v < b, "lte": v <= b}[op]
                                  for op, b in bounds.items())
        out = out and ok
    return out


def random_filter(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    if depth < 2 and rng.random() < 0.35:
        return {rng.choice(["and", "or"]): [random_filter(rng, depth + 1) for _ in range(rng.randrange(1, 4))]}
    kind = rng.randrange(9)
    if kind == 0:
        return {"bucket": rng.randrange(12)}
    if kind == 1:
        return {"bucket": {"in": rng.sample(range(12), rng.randrange(1, 5))}}
    if kind == 2:
        lo = rng.randrange(1985, 2025)
        return {"year": {"gte": lo, "lt": lo + rng.randrange(1, 10)}}
    if kind == 3:
        return {"year": {rng.choice(["gt", "gte", "lt", "lte"]): rng.randrange(1985, 2025)}}
    if kind == 4:
        return {"lang": rng.choice([*LANGS, "xx"])} if rng.random() < 0.5 else {"lang": {"gte": "e", "lt": "f"}}
    if kind == 5:
        return {"score": {rng.choice(["gt", "lte"]): round(rng.uniform(-1, 1), 2)}}
    if kind == 6:
        return {"flag": rng.random() < 0.5}
    if kind == 7:
        return {"code": rng.choice([1, 2, "1", "a", "z"])} if rng.random() < 0.6 else {"code": {"gte": "a"}}
    return {"bucket": rng.randrange(10), "lang": rng.choice(LANGS)}  # two fields: and


def test_filters_match_brute_force_over_the_metadata(meta_store: tuple[Store, list[dict[str, Any]]]) -> None:
    store, rows = meta_store
    fid = {(type(d.ext_id), d.ext_id): d.id for d in store.documents(
        [r[0] for r in store._con.execute("SELECT id FROM docs")]).values()}
    rng = random.Random(7)
    sizes = []
    for _ in range(300):
        flt = random_filter(rng)
        want = np.array(sorted(fid[(type(r["id"]), r["id"])] for r in rows if brute_force(flt, r)), dtype=np.int64)
        got = store.filter_ids(flt)
        assert got.dtype == np.int64 and np.array_equal(got, want), flt
        node = parse_filter(flt, store.metadata_schema())
        # the pure-Python evaluator (for documents not in a built index) picks the very same documents
        assert sorted(fid[(type(r["id"]), r["id"])] for r in rows if matches(node, r)) == want.tolist(), flt
        sizes.append(len(want))
    assert min(sizes) == 0 and max(sizes) > 1000 and len(set(sizes)) > 50  # the filters cover many selectivities


def test_filter_request_shapes(meta_store: tuple[Store, list[dict[str, Any]]]) -> None:
    store, rows = meta_store
    schema = store.metadata_schema()
    assert schema == {"bucket": "int", "code": "int|str", "flag": "bool", "lang": "str", "score": "float",
                      "tags": "json", "year": "int"}

    def count(pred: Any) -> int:  # noqa: ANN401
        return sum(1 for r in rows if pred(r))

    assert len(store.filter_ids({"bucket": 1})) == count(lambda r: r.get("bucket") == 1)
    assert len(store.filter_ids({"bucket": {"in": [1, 2]}})) == count(lambda r: r.get("bucket") in (1, 2))
    assert len(store.filter_ids({"year": {"gte": 2000, "lt": 2010}})) == count(lambda r: 2000 <= r["year"] < 2010)
    assert len(store.filter_ids({"and": [{"lang": "en"}, {"or": [{"bucket": 1}, {"year": {"lt": 1995}}]}]})) == \
        count(lambda r: r["lang"] == "en" and (r.get("bucket") == 1 or r["year"] < 1995))
    # an int|str field keeps 1 and "1" apart; a numeric range never reaches the strings
    assert len(store.filter_ids({"code": 1})) == count(lambda r: r["code"] == 1 and not isinstance(r["code"], str))
    assert len(store.filter_ids({"code": "1"})) == count(lambda r: r["code"] == "1")
    assert len(store.filter_ids({"code": {"gt": 0}})) == count(lambda r: isinstance(r["code"], int))
    assert len(store.filter_ids({"flag": True})) == count(lambda r: r["flag"])


@pytest.mark.parametrize(("flt", "reason"), [
    ({"bucket": "1"}, "bucket: equality '1' is a str but the field holds int"),
    ({"lang": 3}, "lang: equality 3 is an int but the field holds str"),
    ({"bucket": True}, "bucket: equality True is a bool but the field holds int"),
    ({"year": {"between": [1, 2]}}, "year: unknown operator 'between'"),
    ({"year": {"gte": 2000, "lt": "2010"}}, "year: lt '2010' is a str but the field holds int"),
    ({"flag": {"gt": False}}, "flag: bools have no order"),
    ({"bucket": {"in": []}}, "bucket: 'in' needs a non-empty list"),
    ({"bucket": {"in": 1}}, "bucket: 'in' needs a non-empty list, got 1"),
    ({"bucket": {}}, "bucket: empty condition"),
    ({"bucket": None}, "bucket: equality needs a string, number or bool, got null"),
    ({"score": float("nan")}, "score: equality value: nan is not a finite number"),
    ({"score": {"lt": float("inf")}}, "score: lt value: inf is not a finite number"),
    # the metadata schema's rules (indexer.runtime.metadata): each of these must be a 4xx, never a 500
    ({"year": 1180591620717411303424}, "year: equality value: integer 1180591620717411303424 does not fit in 64"),
    ({"year": {"lt": 2**64}}, "year: lt value: integer 18446744073709551616 does not fit in 64 bits"),
    ({"year": {"gt": -2**80}}, "year: gt value: integer -1208925819614629174706176 does not fit in 64 bits"),
    ({"year": {"lte": 2**63}}, "year: lte value: integer 9223372036854775808 does not fit in 64 bits"),
    ({"bucket": {"in": [1, 2**65]}}, "bucket: in value: integer 36893488147419103232 does not fit in 64 bits"),
    ({"lang": "\ud800"}, "lang: equality value: string '\\ud800' is not valid Unicode (it holds a lone surrogate)"),
    ({"lang": {"in": ["en", "x\udfff"]}}, "lang: in value: string 'x\\udfff' is not valid Unicode"),
    ({"a\udfffb": 1}, "field name: string 'a\\udfffb' is not valid Unicode"),  # no document holds it: still refused
    ({"a\x00b": 1}, "field name: string 'a\\x00b' holds a NUL character"),
    ({"tags": "en"}, "field 'tags' holds json values (lists or objects), which cannot be filtered"),
    ({"or": []}, "'or' needs a non-empty list of filters"),
    ({"and": {"bucket": 1}}, "'and' needs a non-empty list of filters"),
    ({}, "a filter is a non-empty object"),
    ([{"bucket": 1}], "a filter is a non-empty object"),
    ({"bucket": {"in": list(range(10_001))}}, "more than 10000 values"),
])
def test_bad_filters_say_why(meta_store: tuple[Store, list[dict[str, Any]]], flt: Any, reason: str) -> None:  # noqa: ANN401
    store, _ = meta_store
    with pytest.raises(FilterError) as info:
        store.filter_ids(flt)
    assert reason in str(info.value)


@pytest.mark.parametrize("flt", [{"buckt": 1}, {"buckt": "1"}, {"buckt": True}, {"buckt": {"gte": 0}},
                                 {"buckt": {"in": [1, "a", False]}}, {"or": [{"buckt": 1}, {"nope": "x"}]}])
def test_a_field_no_document_holds_matches_nothing(meta_store: tuple[Store, list[dict[str, Any]]],
                                                    flt: Any) -> None:  # noqa: ANN401
    """As in Elasticsearch, Qdrant and Chroma: no error, no document; beside a field that matches, it narrows
    nothing away in an `or` and everything in an `and`."""
    store, rows = meta_store
    assert len(store.filter_ids(flt)) == 0
    assert len(store.filter_ids({"or": [flt, {"lang": "en"}]})) == sum(r["lang"] == "en" for r in rows)
    assert len(store.filter_ids({"and": [flt, {"lang": "en"}]})) == 0


def test_a_field_holding_only_nulls_matches_nothing() -> None:
    """A field written over HTTP only as null (`PUT /documents` keeps nulls; the overlay's and a compacted store's
    schema type it "null") has no value to match: like a field no document holds, it matches nothing, whatever
    the value's type; a field holding nulls beside numbers filters by its numbers."""
    from indexer.runtime.metadata import FieldTypes

    written = FieldTypes()
    written.add({"gone": None, "opt": 3})
    written.add({"gone": None, "opt": None})
    schema = written.schema({})
    assert schema == {"gone": "null", "opt": "int"}
    for value in (1, "x", True):
        node = parse_filter({"gone": value}, schema)
        assert not matches(node, {"gone": None}) and not matches(node, {})
    assert matches(parse_filter({"opt": 3}, schema), {"opt": 3})
    with pytest.raises(FilterError, match="is a str but the field holds int"):
        parse_filter({"opt": "3"}, schema)


def test_deep_filters_are_refused_and_sql_has_one_parameter_per_value() -> None:
    deep: dict[str, Any] = {"bucket": 1}
    for _ in range(20):
        deep = {"and": [deep]}
    with pytest.raises(FilterError, match="deeper than 16"):
        parse_filter(deep, {"bucket": "int"})
    sql, params = compile_sql(parse_filter({"or": [{"a": {"in": [1, 2, 3]}}, {"b": {"gte": "x"}}]},
                                           {"a": "int", "b": "str"}))
    assert sql.count("?") == len(params) == 6 and "UNION" in sql


def nest(depth: int, leaf: dict[str, Any], sibling: dict[str, Any]) -> dict[str, Any]:
    """`leaf` under `depth` and/or lists (alternating), each with `sibling` beside it."""
    flt = leaf
    for level in range(depth):
        flt = {("and", "or")[level % 2]: [flt, sibling]}
    return flt


def assert_brute_force(store: Store, rows: list[dict[str, Any]], flt: dict[str, Any]) -> int:
    fid = {(type(d.ext_id), d.ext_id): d.id for d in store.documents(
        [r[0] for r in store._con.execute("SELECT id FROM docs")]).values()}
    want = sorted(fid[(type(r["id"]), r["id"])] for r in rows if brute_force(flt, r))
    assert store.filter_ids(flt).tolist() == want
    return len(want)


def test_filters_wider_or_deeper_than_one_sqlite_statement(
        small_meta_store: tuple[Store, list[dict[str, Any]]]) -> None:
    """501 or-terms were `too many terms in compound SELECT` and 15-16 levels `parser stack overflow` (500s): now
    every filter within `FilterLimits` runs (split into statements SQLite takes) and the rest is refused."""
    store, rows = small_meta_store
    schema = store.metadata_schema()
    for n in (500, 501, LIMITS.width):
        wide = {"or": [{"bucket": 100 + i} if i % 2 else {"year": {"lt": 1985 + i % 3}} for i in range(n - 1)]
                + [{"lang": "en"}]}
        assert 0 < assert_brute_force(store, rows, wide) < len(rows)
        assert isinstance(plan(parse_filter(wide, schema)), Combine if n > SQL_MAX_TERMS else Sql)
    for depth in (8, 14, 15, 16):
        deep = nest(depth, {"bucket": 3}, {"lang": {"gte": "e", "lt": "f"}})
        assert assert_brute_force(store, rows, deep) > 0
        assert isinstance(plan(parse_filter(deep, schema)), Combine if depth > SQL_MAX_NESTING else Sql)
    too_wide = {"and": [{"bucket": 1}] * (LIMITS.width + 1)}
    refusals = [
        (nest(17, {"bucket": 3}, {"lang": "en"}), "deeper than 16 levels"),
        (too_wide, "'and' has 1025 filters; the limit is 1024"),
        ({f"f{i}": 1 for i in range(LIMITS.width + 1)}, "has 1025 fields; the limit is 1024"),
        ({"or": [{"and": [{"bucket": 1}] * 600}, {"and": [{"bucket": 2}] * 600}]}, "more than 1024 field conditions"),
        ({"bucket": {"in": list(range(LIMITS.values + 1))}}, "more than 10000 values"),
        ({"or": [{"bucket": {"in": list(range(900))}}] * 12}, "more than 10000 values"),
    ]
    for flt, reason in refusals:
        with pytest.raises(FilterError, match=reason):
            store.filter_ids(flt)
        with pytest.raises(FilterError, match=reason):  # the same check, without a schema: the API's edge
            check_limits(flt)


def shaped_filter(rng: random.Random, depth: int, width: int) -> dict[str, Any]:
    """A random filter `depth` and/or levels deep whose top list holds `width` filters (random_filter's leaves)."""
    flt = random_filter(rng, 2)
    for level in range(depth):
        n = width if level == depth - 1 else rng.randrange(1, 4)
        items = [flt] + [random_filter(rng, 2) for _ in range(n - 1)]
        rng.shuffle(items)
        flt = {rng.choice(["and", "or"]): items}
    return flt


def conditions(flt: dict[str, Any]) -> int:
    return sum(sum(map(conditions, v)) if k in ("and", "or") else 1 for k, v in flt.items())


# STRATA_HYPOTHESIS_PROFILE=long (tests/conftest.py): 2,000 randomized examples
FILTERS = settings.get_profile("long") if os.environ.get("STRATA_HYPOTHESIS_PROFILE") == "long" else settings(
    max_examples=25, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))


@FILTERS
@given(seed=st.integers(0, 2**32), depth=st.integers(0, LIMITS.depth + 1),
       width=st.sampled_from([1, 2, 3, 499, 500, 501, 700, LIMITS.width, LIMITS.width + 1]))
def test_filters_of_every_width_and_depth_match_brute_force_or_are_refused(
        small_meta_store: tuple[Store, list[dict[str, Any]]], seed: int, depth: int, width: int) -> None:
    store, rows = small_meta_store
    flt = shaped_filter(random.Random(seed), depth, width)
    try:
        check_limits(flt)
    except FilterError:
        with pytest.raises(FilterError, match="limit"):
            store.filter_ids(flt)
        assert depth > LIMITS.depth or width > LIMITS.width or conditions(flt) > LIMITS.conditions
        return
    assert_brute_force(store, rows, flt)


def test_a_bool_is_never_a_number_even_in_a_field_holding_both(tmp_path: Path) -> None:
    """A bool stored in a numeric field matched numeric filters (the store keeps bools as 1/0). Now
    types stay apart, as in PostgreSQL's jsonb and MongoDB: the docs say bools match by equality only."""
    values = [True, False, 1, 0, 2, 1.0, 0.5, "1", "a"]
    rows = [{"id": f"m{i}", "text": f"mixed {i}", "m": v} for i, v in enumerate(values)]
    store, _, _ = ingest_only(write_jsonl(tmp_path / "m.jsonl", rows), tmp_path)
    assert store.metadata_schema()["m"] == "bool|float|str"
    ext = {d.id: d.ext_id for d in store.documents([r[0] for r in store._con.execute("SELECT id FROM docs")]).values()}
    cases = [({"m": True}, [True]), ({"m": 1}, [1, 1.0]), ({"m": {"in": [True, 2]}}, [True, 2]),
             ({"m": {"gt": 0}}, [1, 2, 1.0, 0.5]), ({"m": {"lte": 1}}, [1, 0, 1.0, 0.5]),
             ({"m": {"in": [False, 0, "a"]}}, [False, 0, "a"]), ({"m": False}, [False])]
    for flt, want in cases:
        got = [values[int(ext[i][1:])] for i in store.filter_ids(flt)]
        assert got == want and [type(v) for v in got] == [type(v) for v in want], (flt, got)
        node = parse_filter(flt, store.metadata_schema())
        assert [v for v in values if matches(node, {"m": v})] == want  # the overlay's evaluator agrees
        assert [v for v in values if brute_force(flt, {"m": v})] == want


def test_quora_store_answers_documents_and_matches_no_filter(tmp_path: Path) -> None:
    write_store(tmp_path / STORE, [16, 23], ["What should I do to be a great geologist?", "Why?"], [], [], [])
    store = Store(tmp_path / STORE)
    try:
        docs = store.documents([16, 23, 99, -1])
        assert set(docs) == {16, 23} and docs[16].ext_id == 16 and docs[16].metadata == {}
        assert store.metadata_schema() == {} and store.graded_eval_set() is None
        assert store.resolve_ext_ids(["16", "x", "99"]) == {"16": 16}
        assert len(store.filter_ids({"bucket": 1})) == 0  # no metadata: a field no document holds
        with pytest.raises(FilterError, match="unknown operator"):
            store.filter_ids({"bucket": {"near": 1}})
    finally:
        store.close()


# --- metrics -----------------------------------------------------------------------------------------------------

def test_metrics_by_hand() -> None:
    ranked = np.full((3, 100), -1, dtype=np.int64)
    ranked[0, :4] = [5, 3, 9, 8]
    ranked[0, 49] = 7  # the third relevant document, past the top 10
    ranked[1, :2] = [4, 6]  # a query whose relevant document is not retrieved at all
    ranked[2, :3] = [1, 2, 3]  # only grade-0 judgments: not evaluated
    qrels = [{3: 2, 9: 1, 7: 1, 8: 0}, {11: 1}, {1: 0}]
    got = per_query(ranked, qrels)
    idcg = 2 + 1 / math.log2(3) + 1 / math.log2(4)
    assert got["mrr_at_10"][0] == pytest.approx(1 / 2)
    assert got["ndcg_at_10"][0] == pytest.approx((2 / math.log2(3) + 1 / math.log2(4)) / idcg)  # 0.5627
    assert got["recall_at_10"][0] == pytest.approx(2 / 3) and got["recall_at_100"][0] == 1.0
    assert [got[m][1] for m in ("mrr_at_10", "ndcg_at_10", "recall_at_10", "recall_at_100")] == [0, 0, 0, 0]
    assert all(math.isnan(got[m][2]) for m in got)
    mean = mean_metrics(ranked, qrels)
    assert mean["mrr_at_10"] == pytest.approx(0.25) and mean["recall_at_100"] == pytest.approx(0.5)
    # a judged document missing from the corpus (id -2) stays in the denominators
    solo = np.array([[3] + [-1] * 99])
    assert mean_metrics(solo, [{3: 1, -2: 1}])["recall_at_10"] == pytest.approx(0.5)
    assert mean_metrics(solo, [{3: 1, -2: 1}])["ndcg_at_10"] == pytest.approx(1 / (1 + 1 / math.log2(3)))
    # graded: the better document first scores higher than the reverse order
    hi_lo = mean_metrics(np.array([[1, 2] + [-1] * 98]), [{1: 3, 2: 1}])["ndcg_at_10"]
    lo_hi = mean_metrics(np.array([[2, 1] + [-1] * 98]), [{1: 3, 2: 1}])["ndcg_at_10"]
    assert hi_lo == pytest.approx(1.0) and lo_hi == pytest.approx((1 + 3 / math.log2(3)) / (3 + 1 / math.log2(3)))


# --- shrink threshold and manifests ------------------------------------------------------------------------------

def test_shrink_threshold() -> None:
    assert DEFAULT_MAX_SHRINK == 0.1 and max_shrink({}) == 0.1 and max_shrink({"STRATA_MAX_SHRINK": "0.5"}) == 0.5
    for bad in ("-0.1", "2", "ten", "nan"):
        with pytest.raises(ValueError, match="STRATA_MAX_SHRINK"):
            max_shrink({"STRATA_MAX_SHRINK": bad})
    assert shrinks_too_much(87_249, 3_000) and not shrinks_too_much(1000, 900) and shrinks_too_much(1000, 899)
    assert not shrinks_too_much(0, 0) and not shrinks_too_much(1000, 2000)


def test_manifests_without_the_new_fields_still_load() -> None:
    old = {"format_version": 1, "version": "20261101T000000Z-abcdef", "created_at": "2026-11-01T00:00:00Z",
           "model": {"dir": "/m", "onnx_sha256": "0" * 64, "pooling": "mean", "dim": 384, "max_length": 256,
                     "source": "x"},
           "index": {"factory": "IVF64,Flat", "nlist": 64, "nlist_requested": 1024, "nprobe": 20, "ntotal": 2982},
           "data": {"source": "q.tsv", "protocol": "paper", "rows_read": 3000, "skipped_empty_texts": 0,
                    "n_docs": 2982, "n_queries": 1127},
           "build_seconds": {"total_s": 1.0},
           "eval": {"mrr_at_10": 0.9, "recall_at_10": 0.95, "exact_mrr_at_10": 0.91, "ann_recall_at_10": 0.99,
                    "avg_retrieval_ms": 0.1, "batch_size": 1, "threads": 2, "nprobe": 20, "memory_gb": 0.01,
                    "n_queries": 1127, "n_docs": 2982, "measured_at": "2026-11-01T00:00:00Z"}}
    manifest = Manifest.model_validate(old)
    assert manifest.data.format is None and manifest.data.metadata_schema == {} and manifest.data.duplicate_ids == 0
    assert manifest.eval is not None and manifest.eval.ndcg_at_10 is None and manifest.query_evals == {}
    assert Manifest.model_validate_json(manifest.model_dump_json()) == manifest
