"""Training data files (`models.data`): a file that is not UTF-8 text or not gzip is a one-line error naming the
file and line, through the `encoder train` command too."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from models.data import DataError, load_training_data, read_sentences


def test_bytes_that_are_not_utf8_name_the_file_and_line(tmp_path: Path) -> None:
    plain = tmp_path / "sentences.txt"
    plain.write_bytes(b"a man is playing a guitar\n\n\xff\xfe not utf-8\nthe dog runs\n")
    with pytest.raises(DataError, match=r"sentences\.txt:3: not UTF-8 text"):
        read_sentences(plain)
    packed = tmp_path / "sentences.txt.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    with pytest.raises(DataError, match=r"sentences\.txt\.gz:3: not UTF-8 text"):
        read_sentences(packed)
    mined = tmp_path / "mined.tsv"
    mined.write_bytes(b"anchor\tpositive\tnegative\na\tb\tc\n\xffx\ty\tz\n")
    with pytest.raises(DataError, match=r"mined\.tsv:3: not UTF-8 text"):
        load_training_data(str(mined))


def test_a_file_named_gz_that_is_not_gzip_names_the_file(tmp_path: Path) -> None:
    f = tmp_path / "sentences.txt.gz"
    f.write_bytes(b"not gzip at all\n")
    with pytest.raises(DataError, match=r"sentences\.txt\.gz: unreadable: Not a gzipped file"):
        load_training_data(str(f))


def test_encoder_train_prints_one_line_naming_file_and_line(tiny_bert: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from models.cli import main

    data = tmp_path / "sentences.txt"
    data.write_bytes(b"a man is playing a guitar\n\xff\n")
    rc = main(["train", "--model", str(tiny_bert), "--out", str(tmp_path / "run"), "--data", str(data),
               "--max-steps", "1", "--batch-size", "2", "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc == 2 and f"encoder train: error: {data}:2: not UTF-8 text" in err and "Traceback" not in err
