"""Reading a user's own corpus, streamed row by row: JSONL, CSV/TSV with a header, Parquet (a file or a folder of
files), the BEIR layout (`corpus.jsonl` + `queries.jsonl` + `qrels/<split>.tsv`) and a folder of documents
(Markdown, HTML, PDF, text: one per file, read by `indexer.file_docs`).

Each row becomes a `Doc`: the external id as given (a string stays a string, an integer an integer), the text to
encode and its metadata. Bad rows raise `CorpusFormatError` whose message starts with `FILE:LINE` (for Parquet,
`FILE:ROW`, counting data rows from 1). Format detection leaves the Quora question-pairs TSV to `indexer.quora`.

How a row becomes a `Doc` (ids, title joining, metadata, CSV cells) is `indexer.corpus_rows`; opening files
and detecting the format, `indexer.corpus_files`; queries and qrels files, `indexer.eval_files`.
"""

from __future__ import annotations

import csv
import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from indexer.corpus_batches import DocBatch, batch_matrix, batch_of_docs, check_vector_type, columnar_batch, row_vectors
from indexer.corpus_files import (
    BEIR_CORPUS,
    BEIR_QUERIES,
    DEFAULT_SPLIT,
    JSONL_SUFFIXES,
    beir_qrels,
    corpus_files,
    detect_format,
    json_error,
    left_out,
    numbered_lines,
    open_binary,
)
from indexer.corpus_rows import CorpusFormat, CorpusFormatError, Doc, Fields, default_fields, make_doc
from indexer.doc_limits import MAX_DOC_CHARS, cut_text
from indexer.file_docs import FileReport, file_docs, finish
from indexer.folder_walk import walk_folder
from indexer.runtime.metadata import MAX_DEPTH

PARQUET_BATCH_ROWS = 4096  # rows per record batch (and per ingest chunk: a chunk is a batch)
PARQUET_HINT = "pip install 'strata[parquet]'"


class _Relay:
    """Progress heard while a sample is read, passed on to the pass that goes on from it."""

    def __init__(self) -> None:
        self.target: Callable[[int], None] | None = None
        self.pending = 0

    def __call__(self, n: int) -> None:
        if self.target is None:
            self.pending += n
        else:
            self.target(n)

    def attach(self, target: Callable[[int], None] | None) -> None:
        self.target = target
        if target is not None and self.pending:
            target(self.pending)
        self.pending = 0


@dataclass
class _Resume:
    taken: list[Doc]
    rows: Iterator[Doc]
    relay: _Relay


@dataclass
class CorpusSource:
    """A corpus to read: its files in order, the fields to take, and for BEIR its queries and qrels."""

    path: Path
    format: CorpusFormat
    files: list[Path]
    fields: Fields
    queries: Path | None = None
    qrels: Path | None = None
    files_report: FileReport = field(default_factory=FileReport)  # format "files": files read and skipped

    follow_symlinks: bool = False  # format "files": follow symlinks out of the folder
    walk_skips: list[tuple[str, str]] = field(default_factory=list)  # a folder's entries left out, with reasons
    texts_cut: int = 0  # this pass's documents whose text was cut at `MAX_DOC_CHARS`
    _resume: _Resume | None = field(default=None, repr=False)

    def total_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.files)

    def sample(self, n: int, chars: int) -> list[Doc]:
        """The first rows (`n`, or fewer once they hold `chars` characters of text), read once: the next `docs()`
        yields them again and goes on from there, so that deciding on a sample reads no file twice."""
        relay = _Relay()
        rows = self._rows(relay)
        taken: list[Doc] = []
        total = 0
        for doc in rows:
            taken.append(doc)
            total += len(doc.text)
            if len(taken) >= n or total >= chars:
                break
        self._resume = _Resume(taken, rows, relay)
        return taken

    def docs(self, limit: int | None = None, progress: Callable[[int], None] | None = None) -> Iterator[Doc]:
        """Every row in file order (the first `limit` rows), empty texts included (the caller counts them), each
        text cut at `MAX_DOC_CHARS` (counted in `texts_cut`); `progress(n)` is told of every n more bytes read
        from disk. A folder of files' report is this pass's (a `sample` taken before is part of it)."""
        resume, self._resume = self._resume, None
        if resume is not None:
            resume.relay.attach(progress)
            rows: Iterator[Doc] = itertools.chain(resume.taken, resume.rows)
        else:
            rows = self._rows(progress)
        yield from itertools.islice(rows, limit)

    def _rows(self, progress: Callable[[int], None] | None) -> Iterator[Doc]:
        self.texts_cut = 0
        self.files_report = FileReport(skipped=list(self.walk_skips))
        root = self.path if self.path.is_dir() else self.path.parent  # a document's id: its path from here
        for f in self.files:
            if self.format == "files":  # a folder of documents (indexer.file_docs): one per file
                docs = file_docs(f, root, self.fields, self.files_report, progress)
            else:
                reader = {"parquet": _parquet_docs, "csv": _csv_docs, "tsv": _csv_docs}.get(self.format, _jsonl_docs)
                docs = reader(f, self, progress)
            for doc in docs:
                doc.text, cut = cut_text(doc.text)
                self.texts_cut += cut
                yield doc
        if self.format == "files":
            finish(self.path, self.files_report)

    def parquet_batches(self, limit: int | None = None, progress: Callable[[int], None] | None = None
                        ) -> Iterator[DocBatch]:
        """A Parquet corpus's rows (the first `limit`) a record batch at a time (`indexer.corpus_batches`)."""
        assert self.format == "parquet"
        n = 0
        self._resume, self.texts_cut = None, 0
        for f in self.files:
            for batch in _parquet_batches(f, self, progress):
                if any(len(t) > MAX_DOC_CHARS for t in batch.texts):
                    for i, t in enumerate(batch.texts):
                        batch.texts[i], cut = cut_text(t)
                        self.texts_cut += cut
                if limit is not None and n + len(batch) >= limit:
                    yield batch.head(limit - n)
                    return
                n += len(batch)
                yield batch


def open_corpus(path: Path, *, id_field: str | None = None, text_field: str | None = None,
                title_field: str | None = None, metadata_fields: list[str] | None = None,
                queries: Path | None = None, qrels: Path | None = None, split: str = DEFAULT_SPLIT,
                vector_field: str | None = None, follow_symlinks: bool = False) -> CorpusSource:
    """A non-Quora corpus at `path` (see `detect_format`); BEIR's queries and qrels are found unless given. A
    folder of files is walked once here (`indexer.folder_walk`): symlinks out of it followed only when asked."""
    fmt = detect_format(path)
    if fmt == "quora":
        raise CorpusFormatError(f"{path} is a Quora question-pairs TSV (read it with indexer.quora)")
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise CorpusFormatError(f"{path}: reading Parquet needs the pyarrow package, which is not installed: "
                                    f"{PARQUET_HINT}") from None
    skips: list[tuple[str, str]] = []
    fields = default_fields(fmt, id_field=id_field, text_field=text_field, title_field=title_field,
                            metadata_fields=metadata_fields, vector_field=vector_field)
    if fmt == "beir":
        corpus = path / BEIR_CORPUS if (path / BEIR_CORPUS).is_file() else path / (BEIR_CORPUS + ".gz")
        files = [corpus]
        if queries is None:
            queries = next((q for q in (path / BEIR_QUERIES, path / (BEIR_QUERIES + ".gz")) if q.is_file()), None)
        if qrels is None:
            qrels = beir_qrels(path, split)
    elif fmt == "files" and path.is_file():
        files = [path]
    elif fmt == "files":
        files, skipped = walk_folder(path, follow_symlinks=follow_symlinks)
        skips = [(s.path, s.reason) for s in skipped]
    elif path.is_dir():
        suffixes = (".parquet",) if fmt == "parquet" else JSONL_SUFFIXES
        files = corpus_files(path, suffixes)
        skips = left_out(path, files, fmt, suffixes)
    else:
        files = [path]
    return CorpusSource(path, fmt, files, fields, queries, qrels, files_report=FileReport(skipped=list(skips)),
                        follow_symlinks=follow_symlinks, walk_skips=skips)


def _jsonl_docs(path: Path, src: CorpusSource, progress: Callable[[int], None] | None) -> Iterator[Doc]:
    try:
        fh, counter = open_binary(path)
    except OSError as exc:
        raise CorpusFormatError(f"{path}: cannot open: {exc}") from exc
    seen = 0
    with fh:
        for line_no, line in numbered_lines(path, fh):
            if progress is not None and counter.count != seen:
                progress(counter.count - seen)
                seen = counter.count
            if not line.strip():
                continue
            where = f"{path}:{line_no}"
            try:
                row = json.loads(line)
            except UnicodeDecodeError as exc:
                raise CorpusFormatError(f"{where}: not UTF-8: {exc.reason} at byte {exc.start}") from exc
            except ValueError as exc:
                raise CorpusFormatError(f"{where}: not a JSON object: {json_error(exc)}"[:300]) from exc
            except RecursionError:
                raise CorpusFormatError(f"{where}: JSON nested too deep to read (metadata may nest "
                                        f"{MAX_DEPTH} levels)") from None
            if not isinstance(row, dict):
                raise CorpusFormatError(f"{where}: expected one JSON object per line, got {type(row).__name__}")
            yield make_doc(row, src.fields, where)


def _utf8_lines(path: Path, fh: BinaryIO) -> Iterator[str]:
    """Lines decoded one at a time, so that a bad byte is reported on its own line (a text wrapper decodes
    8 kB blocks ahead of the CSV reader)."""
    for lineno, raw in numbered_lines(path, fh):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorpusFormatError(f"{path}:{lineno}: not UTF-8: {exc.reason} at byte {exc.start}") from exc


def _csv_docs(path: Path, src: CorpusSource, progress: Callable[[int], None] | None) -> Iterator[Doc]:
    delimiter = "," if src.format == "csv" else "\t"
    try:
        raw, counter = open_binary(path)
    except OSError as exc:
        raise CorpusFormatError(f"{path}: cannot open: {exc}") from exc
    reader = csv.reader(_utf8_lines(path, raw), delimiter=delimiter)
    seen = 0

    def next_record() -> list[str] | None:
        try:
            return next(reader)
        except StopIteration:
            return None
        except csv.Error as exc:
            raise CorpusFormatError(f"{path}:{reader.line_num + 1}: unreadable: {exc}") from exc

    with raw:
        header = next_record()
        if header is None:
            raise CorpusFormatError(f"{path}:1: empty file (expected a header row)")
        names = [h.strip() for h in header]
        if names and names[0].startswith("\ufeff"):
            names[0] = names[0][1:]  # a BOM written by spreadsheet tools
        _check_header(path, names, src.fields, "column")
        while (record := next_record()) is not None:
            if progress is not None and counter.count != seen:
                progress(counter.count - seen)
                seen = counter.count
            if not record or (len(record) == 1 and not record[0].strip() and len(names) > 1):
                continue
            where = f"{path}:{reader.line_num}"
            if len(record) != len(names):
                sep = "comma" if delimiter == "," else "tab"
                raise CorpusFormatError(f"{where}: expected {len(names)} {sep}-separated fields (the header's), "
                                        f"got {len(record)}")
            yield make_doc(dict(zip(names, record, strict=True)), src.fields, where, typed=False)


def _check_header(path: Path, names: list[str], fields: Fields, what: str) -> None:
    where = f"{path}:1" if what == "column" else str(path)
    if any(not n for n in names):
        raise CorpusFormatError(f"{where}: the header has an empty {what} name")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise CorpusFormatError(f"{where}: {what}s named more than once: {', '.join(dup)}")
    shown = ", ".join(names[:20]) + (", …" if len(names) > 20 else "")
    hints = {"id": " (pick one with --id-field)", "text": " (pick one with --text-field)", "title": ""}
    for role, name in (("id", fields.id), ("text", fields.text), ("title", fields.title)):
        if name is not None and name not in names:
            raise CorpusFormatError(f"{where}: no {role} {what} {name!r}{hints[role]}; {what}s: {shown}")
    missing = [m for m in fields.metadata or () if m not in names]
    if missing:
        raise CorpusFormatError(f"{where}: no {what} {', '.join(map(repr, missing))} for --metadata-fields; "
                                f"{what}s: {shown}")


def _parquet_open(path: Path, src: CorpusSource) -> tuple[Any, list[str], bool]:
    """(the Parquet file, the columns to read, whether it has the vector column), its schema checked."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as exc:
        raise CorpusFormatError(f"{path}: not a readable Parquet file: {str(exc).splitlines()[0]}") from exc
    schema = pf.schema_arrow
    names = list(schema.names)
    fields = src.fields
    _check_header(path, names, fields, "column")
    id_type = schema.field(fields.id).type
    if not (pa.types.is_integer(id_type) or pa.types.is_string(id_type) or pa.types.is_large_string(id_type)):
        raise CorpusFormatError(f"{path}: id column {fields.id!r} has type {id_type}; ids must be strings or "
                                f"integers")
    for role, name in (("text", fields.text), ("title", fields.title)):
        t = schema.field(name).type if name else None
        if t is not None and not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t)):
            raise CorpusFormatError(f"{path}: {role} column {name!r} has type {t}; it must hold strings")
    has_vectors = fields.vector in names
    if has_vectors:
        check_vector_type(path, fields.vector, schema.field(fields.vector).type)
    wanted = {fields.id, fields.text, fields.vector} | ({fields.title} if fields.title else set())
    columns = [n for n in names if n in wanted or fields.metadata is None or n in fields.metadata
               or n == "metadata"]
    return pf, columns, has_vectors


def _record_batches(path: Path, src: CorpusSource, batch_rows: int
                    ) -> Iterator[tuple[Any, int, tuple[np.ndarray, np.ndarray] | None, int]]:
    """(record batch, rows before it, its vectors (`_batch_matrix`) or None, bytes of the file read up to its
    end, pro rata) for each record batch of a Parquet file."""
    import pyarrow as pa

    pf, columns, has_vectors = _parquet_open(path, src)
    size = path.stat().st_size
    n_rows = max(pf.metadata.num_rows, 1)
    row_no = 0
    try:
        for batch in pf.iter_batches(batch_size=batch_rows, columns=columns):
            matrix = batch_matrix(path, row_no, batch.column(src.fields.vector)) if has_vectors else None
            yield batch, row_no, matrix, size * (row_no + batch.num_rows) // n_rows
            row_no += batch.num_rows
    except (OSError, pa.ArrowException) as exc:
        raise CorpusFormatError(f"{path}:{row_no + 1}: unreadable: {str(exc).splitlines()[0]}") from exc


def _batch_docs(batch: Any, src: CorpusSource, path: Path, rows_before: int,  # noqa: ANN401
                matrix: tuple[np.ndarray, np.ndarray] | None) -> Iterator[Doc]:
    fields = src.fields
    cols = {name: batch.column(name).to_pylist() for name in batch.schema.names if name != fields.vector}
    vecs = row_vectors(*matrix) if matrix is not None else None
    for i in range(batch.num_rows):
        yield make_doc({k: v[i] for k, v in cols.items()}, fields, f"{path}:{rows_before + i + 1}",
                       vector=None if vecs is None else vecs[i])


def _parquet_docs(path: Path, src: CorpusSource, progress: Callable[[int], None] | None) -> Iterator[Doc]:
    reported = 0
    for batch, rows_before, matrix, done in _record_batches(path, src, PARQUET_BATCH_ROWS):
        yield from _batch_docs(batch, src, path, rows_before, matrix)
        if progress is not None:
            progress(done - reported)
            reported = done


def _parquet_batches(path: Path, src: CorpusSource, progress: Callable[[int], None] | None) -> Iterator[DocBatch]:
    """The file's rows a record batch at a time: column-wise where the batch allows it (`columnar_batch`), else
    row by row (`make_doc`)."""
    reported = 0
    for batch, rows_before, matrix, done in _record_batches(path, src, PARQUET_BATCH_ROWS):
        out = columnar_batch(batch, src.fields, path, rows_before, matrix)
        if out is None:
            out = batch_of_docs(list(_batch_docs(batch, src, path, rows_before, matrix)))
        if progress is not None:
            progress(done - reported)
            reported = done
        yield out
