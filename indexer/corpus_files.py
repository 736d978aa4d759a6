"""A corpus's files: opened as binary streams (gzip or not) that count the bytes read from disk, read line by
line with line numbers, and told apart by name and header (`detect_format`); the BEIR layout's names.
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from indexer.corpus_rows import CorpusFormat, CorpusFormatError
from indexer.doc_limits import MAX_DOC_CHARS, MAX_ROW_BYTES
from indexer.file_docs import doc_files
from indexer.folder_walk import KINDS

JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
BEIR_CORPUS = "corpus.jsonl"
BEIR_QUERIES = "queries.jsonl"
BEIR_QRELS_DIR = "qrels"
DEFAULT_SPLIT = "test"


class _CountingReader(io.RawIOBase):
    """Counts the (compressed) bytes read from a file, for a progress bar over file size."""

    def __init__(self, raw: io.BufferedReader) -> None:
        self._raw = raw
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:  # noqa: ANN401 (a writable buffer)
        n = self._raw.readinto(b) or 0
        self.count += n
        return n

    def close(self) -> None:
        self._raw.close()
        super().close()


def open_binary(path: Path) -> tuple[BinaryIO, _CountingReader]:
    """A binary stream of `path`, decompressed when it is gzip, and the counter of bytes read from disk."""
    counter = _CountingReader(open(path, "rb"))  # noqa: SIM115 (closed with the stream)
    buffered = io.BufferedReader(counter, 1 << 16)
    if buffered.peek(2)[:2] == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=buffered, mode="rb"), counter  # type: ignore[return-value]
    return buffered, counter


def base_name(path: Path) -> str:
    name = path.name.lower()
    return name[:-3] if name.endswith(".gz") else name


def first_line(path: Path) -> str | None:
    try:
        fh, _ = open_binary(path)
        with fh:
            return fh.readline(1 << 16).decode("utf-8").rstrip("\r\n")
    except (OSError, EOFError, UnicodeDecodeError, gzip.BadGzipFile):
        return None


def _visible_files(folder: Path) -> list[Path]:
    """The folder's files, recursively, in path order; none hidden nor under a hidden folder (`.git`, `.vscode`:
    an editor's settings.json is no corpus file), as a folder of documents leaves them out."""
    return sorted(p for p in folder.rglob("*")
                  if not any(part.startswith(".") for part in p.relative_to(folder).parts) and p.is_file())


def corpus_files(folder: Path, suffixes: tuple[str, ...]) -> list[Path]:
    """The folder's visible files with these suffixes, recursively, in path order."""
    return [p for p in _visible_files(folder) if base_name(p).endswith(suffixes)]


def left_out(folder: Path, files: list[Path], fmt: str, suffixes: tuple[str, ...]) -> list[tuple[str, str]]:
    """(path, reason) of each file of a JSONL or Parquet folder that is not read: a CSV, a JSONL beside Parquet
    files, a README: named, so that no file of rows is left out unnoticed."""
    read = set(files)
    reason = f"this folder is read as {fmt} (its {', '.join('*' + s for s in suffixes)} files)"
    return [(p.relative_to(folder).as_posix(), reason) for p in _visible_files(folder) if p not in read]


def _rows_of_json(path: Path) -> bool:
    """Whether a `.json` file beside documents holds rows (its first line one JSON object), not a document site's
    own settings (`package.json`, `_meta.json`: one object over many lines)."""
    line = first_line(path)
    try:
        return line is not None and isinstance(json.loads(line), dict)
    except ValueError:
        return False


def detect_format(path: Path) -> CorpusFormat:
    """What `path` holds, from its name (and for TSV files its header): a folder with `corpus.jsonl` is BEIR, a
    folder of `*.parquet` or `*.jsonl` files is that format (`*.json` files beside documents only when they hold
    rows: `_rows_of_json`), else a folder of documents (Markdown, HTML, PDF, text:
    `indexer.file_docs`) is "files", as is one such file; a TSV whose header is the Quora question-pairs
    header, or a file of no known kind, is the Quora TSV (whose reader then says what it expected)."""
    from indexer.quora import COLUMNS

    if path.is_dir():
        if (path / BEIR_CORPUS).is_file() or (path / (BEIR_CORPUS + ".gz")).is_file():
            return "beir"
        if corpus_files(path, (".parquet",)):
            return "parquet"
        rows = corpus_files(path, JSONL_SUFFIXES)
        if rows and (any(not base_name(f).endswith(".json") for f in rows) or not doc_files(path, follow_symlinks=True)
                     or any(_rows_of_json(f) for f in rows)):
            return "jsonl"
        if doc_files(path, follow_symlinks=True):  # one out of the folder is then named with its reason
            return "files"
        raise CorpusFormatError(f"{path}: a corpus folder must hold {BEIR_CORPUS} (BEIR layout), *.parquet or "
                                f"*.jsonl files, or documents (*.md, *.html, *.pdf, *.txt)")
    name = base_name(path)
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith(JSONL_SUFFIXES):
        return "jsonl"
    if name.endswith(".csv"):
        return "csv"
    header = first_line(path)
    if header is not None and tuple(h.strip() for h in header.split("\t")) == COLUMNS:
        return "quora"
    if path.suffix.lower() in KINDS:  # one Markdown, HTML, PDF or text file: a folder of one document
        return "files"
    if name.endswith((".tsv", ".tab")):
        return "tsv"
    return "quora"


def beir_qrels(folder: Path, split: str = DEFAULT_SPLIT) -> Path | None:
    """`qrels/<split>.tsv` of a BEIR folder, else its only qrels file, else None."""
    qdir = folder / BEIR_QRELS_DIR
    if not qdir.is_dir():
        return None
    wanted = qdir / f"{split}.tsv"
    if wanted.is_file():
        return wanted
    found = sorted(qdir.glob("*.tsv"))
    return found[0] if len(found) == 1 else None


def json_error(exc: ValueError) -> str:
    """Why one line is not JSON, located in that line ("at column 25"): the decoder's own "line 2 column 1"
    counts the line's newline as a second line of the file when the line ends too early."""
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at column {exc.pos + 1}"
    return str(exc)


def numbered_lines(path: Path, fh: BinaryIO) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, raw line) read one line at a time; a read failure (truncated gzip, I/O error) or a
    line past `MAX_ROW_BYTES` names the line it happened on."""
    lineno = 0
    while True:
        try:
            raw = fh.readline(MAX_ROW_BYTES + 1)  # never more than one row's limit in memory
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise CorpusFormatError(f"{path}:{lineno + 1}: unreadable: {exc}") from exc
        if not raw:
            return
        lineno += 1
        if len(raw) > MAX_ROW_BYTES:
            raise CorpusFormatError(f"{path}:{lineno}: a row longer than {MAX_ROW_BYTES // 2**20} MiB, the limit of "
                                    f"one row (a document keeps {MAX_DOC_CHARS:,} characters: docs/own-corpus.md"
                                    f"#limits)")
        yield lineno, raw
