"""Quora TSV reading and the two evaluation protocols, on hand-made files and on the real data."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import pytest

from indexer.quora import QuoraFormatError, load_split, read_rows

HEADER = "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
ROWS = [
    "0\t1\t2\tHow do I learn Python?\tWhat is the best way to learn Python?\t1\n",
    '1\t3\t4\t"When do you use ""&"" instead of ""and""?"\tWhy is the sky blue?\t0\n',
    "2\t1\t5\tHow do I learn Python?\tHow can I learn Python fast?\t1\n",
    "3\t6\t7\tWhat is love?\t\t0\n",  # empty question2: skipped and counted
    "4\t8\t2\t   \tWhat is the best way to learn Python?\t1\n",  # whitespace question1
]


def write(path: Path, text: str) -> Path:
    if path.suffix == ".gz":
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            fh.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("name", ["q.tsv", "q.tsv.gz"])
def test_paper_protocol(tmp_path: Path, name: str) -> None:
    split = load_split(write(tmp_path / name, HEADER + "".join(ROWS)), "paper")
    docs = dict(zip(split.corpus.ids.tolist(), split.corpus.texts, strict=True))
    assert docs == {2: "What is the best way to learn Python?", 4: "Why is the sky blue?",
                    5: "How can I learn Python fast?"}
    assert split.evalset.query_ids.tolist() == [1]  # only queries with a gold duplicate
    assert split.evalset.gold == [{2, 5}]
    assert split.skipped_empty_texts == 2 and split.rows_read == 5
    assert not split.evalset.exclude_self


def test_quoting_is_undone(tmp_path: Path) -> None:
    rows = list(read_rows(write(tmp_path / "q.tsv", HEADER + "".join(ROWS))))
    assert rows[1].question1 == 'When do you use "&" instead of "and"?'


def test_full_protocol_indexes_every_question(tmp_path: Path) -> None:
    split = load_split(write(tmp_path / "q.tsv", HEADER + "".join(ROWS)), "full")
    assert sorted(split.corpus.ids.tolist()) == [1, 2, 3, 4, 5, 6]
    assert split.evalset.exclude_self


def test_rows_limit(tmp_path: Path) -> None:
    split = load_split(write(tmp_path / "q.tsv", HEADER + "".join(ROWS)), "paper", rows=2)
    assert split.rows_read == 2 and sorted(split.corpus.ids.tolist()) == [2, 4]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (HEADER + ROWS[0] + "1\t3\t4\tonly four fields\n", r"q\.tsv:3: expected 6 tab-separated fields, got 4"),
        (HEADER + "x\t3\t4\ta\tb\t0\n", r"q\.tsv:2: id, qid1, qid2 and is_duplicate must be integers"),
        (HEADER + "1\t3\t4\ta\tb\t7\n", r"q\.tsv:2: is_duplicate must be 0 or 1"),
        ("question1\tquestion2\n", r"q\.tsv:1: expected the tab-separated header"),
        (HEADER, r"q\.tsv: no data rows"),
    ],
)
def test_malformed_files_name_file_and_line(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(QuoraFormatError, match=message):
        load_split(write(tmp_path / "q.tsv", body), "paper")


def test_binary_junk_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "q.tsv"
    path.write_bytes(b"\xff\xfe\x00\x81" * 100)
    with pytest.raises(QuoraFormatError, match="q.tsv"):
        load_split(path, "paper")


def test_cli_error_names_file_and_line(tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.tsv", HEADER + ROWS[0] + "1\t3\n")
    model = tmp_path / "model"
    model.mkdir()
    r = subprocess.run([sys.executable, "-m", "indexer.cli", "build", "--data", str(bad), "--model", str(model),
                        "--root", str(tmp_path / "root")], capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "encoder.json is missing" in r.stderr  # the model is checked before the data is read


def test_real_file_paper_protocol(quora_file: Path) -> None:
    split = load_split(quora_file, "paper", rows=10_000)
    assert split.rows_read == 10_000
    # rows 7 ("How can I be a good geologist?" / "... a great geologist?") is a duplicate pair
    assert 16 in split.evalset.gold[split.evalset.query_ids.tolist().index(15)]
    assert len(split.corpus.texts) > 9_000


def test_downloads_from_a_url_once(tmp_path: Path) -> None:
    """The loader fetches the TSV from its URL (here a real HTTP server on 127.0.0.1) into the cache."""
    import functools
    import http.server
    import threading

    from indexer.quora import resolve_source

    served = tmp_path / "www"
    served.mkdir()
    write(served / "quora_duplicate_questions.tsv", HEADER + "".join(ROWS))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/quora_duplicate_questions.tsv"
        path = resolve_source(url, tmp_path / "cache")
        assert path == tmp_path / "cache" / "quora_duplicate_questions.tsv"
        assert load_split(path, "paper").evalset.gold == [{2, 5}]
        (served / "quora_duplicate_questions.tsv").unlink()
        assert resolve_source(url, tmp_path / "cache") == path  # cached: no second download
        assert not list((tmp_path / "cache").glob("*.part"))
    finally:
        httpd.shutdown()


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    from indexer.quora import resolve_source

    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_source(str(tmp_path / "nope.tsv"), tmp_path)


def test_heldout_protocol_reads_only_rows_from_300000(tmp_path: Path) -> None:
    rows = HEADER + "".join(ROWS) + (
        "299999\t20\t21\tNot held out\tNot held out either\t1\n"
        "300000\t30\t31\tHow do I bake bread?\tHow can I bake bread at home?\t1\n"
        "300001\t32\t33\tWhat is jazz?\tWho invented the guitar?\t0\n"
        "300002\t30\t34\tHow do I bake bread?\tWhat flour makes bread rise?\t0\n"
    )
    split = load_split(write(tmp_path / "q.tsv", rows), "heldout")
    assert sorted(split.corpus.ids.tolist()) == [30, 31, 32, 33, 34]  # every question of the held-out rows
    assert split.evalset.query_ids.tolist() == [30] and split.evalset.gold == [{31}]
    assert split.evalset.exclude_self and split.rows_read == 3
    limited = load_split(write(tmp_path / "q2.tsv", rows), "heldout", rows=1)
    assert limited.rows_read == 1 and sorted(limited.corpus.ids.tolist()) == [30, 31]
    with pytest.raises(QuoraFormatError, match="held-out"):
        load_split(write(tmp_path / "q3.tsv", HEADER + "".join(ROWS)), "heldout")


def test_real_file_heldout_protocol(quora_file: Path) -> None:
    split = load_split(quora_file, "heldout", rows=5_000)
    first = next(r for r in read_rows(quora_file, 300_001) if r.id == 300_000)
    docs = dict(zip(split.corpus.ids.tolist(), split.corpus.texts, strict=True))
    assert split.rows_read == 5_000 and split.evalset.exclude_self
    assert docs[first.qid1] == first.question1 and docs[first.qid2] == first.question2
    assert 5_000 < len(docs) <= 10_000
