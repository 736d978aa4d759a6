"""Reading a user's own corpus, streamed row by row: JSONL, CSV/TSV with a header, Parquet (a file or a folder of
files) and the BEIR layout (`corpus.jsonl` + `queries.jsonl` + `qrels/<split>.tsv`); plus BEIR queries and qrels.

Each row becomes a `Doc`: the external id as given (a string stays a string, an integer an integer), the text to
encode and its metadata. Bad rows raise `CorpusFormatError` whose message starts with `FILE:LINE` (for Parquet,
`FILE:ROW`, counting data rows from 1). Format detection leaves the Quora question-pairs TSV to `indexer.quora`.

Conventions (docs/own-corpus.md repeats them):
- Title joining follows BEIR's `SentenceBERT.encode_corpus` (also MTEB's): `(title + " " + text).strip()` when a
  title field is set and the row has a non-empty title, else `text.strip()`. That joined string is what is
  encoded and stored as the document's text.
- Metadata is every field other than the id and text fields (the title included), unless `--metadata-fields`
  names them. A field called `metadata` holding an object (BEIR's corpus, Strata's write API) is flattened: its
  keys are metadata fields, and replace top-level fields of the same name. It must fit the metadata schema of
  `indexer.runtime.metadata` (64-bit integers, finite numbers, valid Unicode, bounded nesting and size), the
  same as `PUT /documents` takes: a row outside it is a `FILE:LINE` error.
- CSV/TSV cells have no types: a cell that is a canonical integer (`17`, `-3`; not `007`) becomes an int, a
  decimal number (`2.5`, `1e3`) a float, an empty cell is absent, anything else stays a string. The same rule
  applies to the id column, so `17` and `007` are the ids 17 and "007".
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date, datetime, time
from decimal import Decimal
from pathlib import Path
from typing import Any, BinaryIO, Literal

from indexer.runtime.metadata import INT64_MAX, INT64_MIN, MAX_DEPTH, MetadataError, check_metadata, valid_unicode

CorpusFormat = Literal["quora", "jsonl", "csv", "tsv", "parquet", "beir"]
ExtId = str | int

JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
BEIR_CORPUS = "corpus.jsonl"
BEIR_QUERIES = "queries.jsonl"
BEIR_QRELS_DIR = "qrels"
DEFAULT_SPLIT = "test"
_INT_RE = re.compile(r"-?(0|[1-9][0-9]*)")
_FLOAT_RE = re.compile(r"-?([0-9]+\.[0-9]*|\.[0-9]+|[0-9]+(\.[0-9]*)?[eE][-+]?[0-9]+)")
PARQUET_BATCH_ROWS = 4096


class CorpusFormatError(ValueError):
    """A corpus, queries or qrels file that cannot be read; the message names the file (and line or row)."""


@dataclass(frozen=True)
class Fields:
    """Which fields hold the id, the text, the title (optional) and the metadata (None: every other field)."""

    id: str = "id"
    text: str = "text"
    title: str | None = None
    metadata: tuple[str, ...] | None = None


@dataclass(slots=True)
class Doc:
    ext_id: ExtId
    text: str  # title and text joined (see the module docstring); "" for an empty text
    metadata: dict[str, Any]
    where: str  # FILE:LINE, for messages


def default_fields(fmt: CorpusFormat, *, id_field: str | None = None, text_field: str | None = None,
                   title_field: str | None = None, metadata_fields: list[str] | None = None) -> Fields:
    """The fields of a format, with the user's choices applied: BEIR defaults to `_id`, `text` and `title`; the
    other formats to `id` and `text`, no title."""
    beir = fmt == "beir"
    return Fields(id=id_field or ("_id" if beir else "id"), text=text_field or "text",
                  title=title_field if title_field is not None else ("title" if beir else None),
                  metadata=tuple(metadata_fields) if metadata_fields is not None else None)


def join_title(title: str | None, text: str) -> str:
    """BEIR's document string: `(title + " " + text).strip()` when there is a title, else `text.strip()`."""
    return (title + " " + text).strip() if title else text.strip()


# --- values ------------------------------------------------------------------------------------------------------

def _check_int(v: int, what: str, where: str) -> int:
    if not INT64_MIN <= v <= INT64_MAX:
        raise CorpusFormatError(f"{where}: {what} {v} does not fit in 64 bits")
    return v


def typed_ext_id(v: object, where: str, field: str) -> ExtId:
    """An external id as given: a non-empty string or a 64-bit integer; anything else is a bad row."""
    if v is None:
        raise CorpusFormatError(f"{where}: id field {field!r} is null")
    if isinstance(v, bool) or not isinstance(v, (str, int)):
        raise CorpusFormatError(f"{where}: id field {field!r} must be a string or an integer, got "
                                f"{type(v).__name__} {v!r}"[:300])
    if isinstance(v, str):
        if not v.strip():
            raise CorpusFormatError(f"{where}: id field {field!r} is empty")
        if not valid_unicode(v):
            raise CorpusFormatError(f"{where}: id {v!r} is not valid Unicode (it holds a lone surrogate)"[:300])
        return v
    return _check_int(v, "id", where)


def cell_value(s: str) -> str | int | float | None:
    """A CSV cell's value: canonical integer → int, decimal number → float, empty → None, else the string."""
    if s == "":
        return None
    if _INT_RE.fullmatch(s):
        v = int(s)
        return v if INT64_MIN <= v <= INT64_MAX else s
    if _FLOAT_RE.fullmatch(s):
        return float(s)
    return s


def meta_value(v: Any, where: str, key: str, depth: int = 2) -> Any:  # noqa: ANN401
    """A metadata value as JSON can hold it: str, int, float, bool, None, lists and objects of those. NaN
    (Parquet's usual "missing") becomes None; dates and times become ISO strings (they then sort and compare as
    text); Decimals become floats. The result is then checked against the metadata schema (`make_doc`); here
    only the nesting is bounded, so that a hostile row cannot exhaust the stack (`depth`: the level of `v`, the
    metadata object being level 1)."""
    if v is None or isinstance(v, (bool, str, int)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, (datetime, date, time)):
        return v.isoformat()
    if isinstance(v, Decimal):
        return meta_value(float(v), where, key)
    if isinstance(v, (dict, list, tuple)) and depth > MAX_DEPTH:
        raise CorpusFormatError(f"{where}: metadata field {key!r} nests deeper than {MAX_DEPTH} levels")
    if isinstance(v, dict):
        return {str(k): meta_value(x, where, key, depth + 1) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [meta_value(x, where, key, depth + 1) for x in v]
    raise CorpusFormatError(f"{where}: metadata field {key!r} holds a {type(v).__name__}, which JSON cannot hold "
                            f"(leave it out with --metadata-fields)")


def _text_value(v: object, where: str, field: str) -> str:
    if v is None:
        return ""
    if not isinstance(v, str):
        raise CorpusFormatError(f"{where}: field {field!r} must be a string, got {type(v).__name__}")
    if not valid_unicode(v):
        raise CorpusFormatError(f"{where}: field {field!r} is not valid Unicode (it holds a lone surrogate)")
    return v


def make_doc(row: dict[str, Any], fields: Fields, where: str, *, typed: bool = True) -> Doc:
    """A `Doc` from one row (a JSON object, a CSV record or a Parquet row)."""
    if fields.id not in row:
        raise CorpusFormatError(f"{where}: no id field {fields.id!r} (pick one with --id-field)")
    if fields.text not in row:
        raise CorpusFormatError(f"{where}: no text field {fields.text!r} (pick one with --text-field)")
    raw_id = row[fields.id]
    if not typed and isinstance(raw_id, str) and raw_id.strip():
        raw_id = cell_value(raw_id)  # CSV: "17" is the integer id 17 (see the module docstring)
    ext_id = typed_ext_id(raw_id, where, fields.id)
    text = _text_value(row[fields.text], where, fields.text)
    title = _text_value(row.get(fields.title), where, fields.title) if fields.title else ""
    meta: dict[str, Any] = {}
    for key, value in row.items():
        if key in (fields.id, fields.text):
            continue
        if key == "metadata" and isinstance(value, dict):
            continue  # flattened below, after the top-level fields
        meta[key] = value
    nested = row.get("metadata")
    if isinstance(nested, dict):
        meta.update(nested)
    if fields.metadata is not None:
        meta = {k: meta[k] for k in fields.metadata if k in meta}
    out: dict[str, Any] = {}
    for key, value in meta.items():
        if not typed and isinstance(value, str) and key != fields.title:
            value = cell_value(value)
        value = meta_value(value, where, key)
        if value is not None:
            out[str(key)] = value
    try:
        check_metadata(out)  # the one schema, shared with PUT /documents (indexer.runtime.metadata)
    except MetadataError as exc:
        raise CorpusFormatError(f"{where}: {exc}") from None
    return Doc(ext_id, join_title(title, text), out, where)


# --- files -------------------------------------------------------------------------------------------------------

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


def _open_binary(path: Path) -> tuple[BinaryIO, _CountingReader]:
    """A binary stream of `path`, decompressed when it is gzip, and the counter of bytes read from disk."""
    counter = _CountingReader(open(path, "rb"))  # noqa: SIM115 (closed with the stream)
    buffered = io.BufferedReader(counter, 1 << 16)
    if buffered.peek(2)[:2] == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=buffered, mode="rb"), counter  # type: ignore[return-value]
    return buffered, counter


def _base_name(path: Path) -> str:
    name = path.name.lower()
    return name[:-3] if name.endswith(".gz") else name


def _first_line(path: Path) -> str | None:
    try:
        fh, _ = _open_binary(path)
        with fh:
            return fh.readline(1 << 16).decode("utf-8").rstrip("\r\n")
    except (OSError, EOFError, UnicodeDecodeError, gzip.BadGzipFile):
        return None


def _corpus_files(folder: Path, suffixes: tuple[str, ...]) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".")
                  and _base_name(p).endswith(suffixes))


def detect_format(path: Path) -> CorpusFormat:
    """What `path` holds, from its name (and for TSV files its header): a folder with `corpus.jsonl` is BEIR, a
    folder of `*.parquet` or `*.jsonl` files is that format; a TSV whose header is the Quora question-pairs
    header, or a file of no known kind, is the Quora TSV (whose reader then says what it expected)."""
    from indexer.quora import COLUMNS

    if path.is_dir():
        if (path / BEIR_CORPUS).is_file() or (path / (BEIR_CORPUS + ".gz")).is_file():
            return "beir"
        if _corpus_files(path, (".parquet",)):
            return "parquet"
        if _corpus_files(path, JSONL_SUFFIXES):
            return "jsonl"
        raise CorpusFormatError(f"{path}: a corpus folder must hold {BEIR_CORPUS} (BEIR layout), *.parquet or "
                                f"*.jsonl files")
    name = _base_name(path)
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith(JSONL_SUFFIXES):
        return "jsonl"
    if name.endswith(".csv"):
        return "csv"
    header = _first_line(path)
    if header is not None and tuple(h.strip() for h in header.split("\t")) == COLUMNS:
        return "quora"
    if name.endswith((".tsv", ".tab")):
        return "tsv"
    return "quora"


@dataclass
class CorpusSource:
    """A corpus to read: its files in order, the fields to take, and for BEIR its queries and qrels."""

    path: Path
    format: CorpusFormat
    files: list[Path]
    fields: Fields
    queries: Path | None = None
    qrels: Path | None = None

    def total_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.files)

    def docs(self, limit: int | None = None, progress: Callable[[int], None] | None = None) -> Iterator[Doc]:
        """Every row in file order (the first `limit` rows), empty texts included (the caller counts them);
        `progress(n)` is told of every n more bytes read from disk."""
        n = 0
        for f in self.files:
            if limit is not None and n >= limit:
                return
            rows = {"parquet": _parquet_docs, "csv": _csv_docs, "tsv": _csv_docs}.get(self.format, _jsonl_docs)
            for doc in rows(f, self, progress):
                yield doc
                n += 1
                if limit is not None and n >= limit:
                    return


def open_corpus(path: Path, *, id_field: str | None = None, text_field: str | None = None,
                title_field: str | None = None, metadata_fields: list[str] | None = None,
                queries: Path | None = None, qrels: Path | None = None, split: str = DEFAULT_SPLIT
                ) -> CorpusSource:
    """A non-Quora corpus at `path` (see `detect_format`); BEIR's queries and qrels are found unless given."""
    fmt = detect_format(path)
    if fmt == "quora":
        raise CorpusFormatError(f"{path} is a Quora question-pairs TSV (read it with indexer.quora)")
    fields = default_fields(fmt, id_field=id_field, text_field=text_field, title_field=title_field,
                            metadata_fields=metadata_fields)
    if fmt == "beir":
        corpus = path / BEIR_CORPUS if (path / BEIR_CORPUS).is_file() else path / (BEIR_CORPUS + ".gz")
        files = [corpus]
        if queries is None:
            queries = next((q for q in (path / BEIR_QUERIES, path / (BEIR_QUERIES + ".gz")) if q.is_file()), None)
        if qrels is None:
            qrels = beir_qrels(path, split)
    elif path.is_dir():
        files = _corpus_files(path, (".parquet",) if fmt == "parquet" else JSONL_SUFFIXES)
    else:
        files = [path]
    return CorpusSource(path, fmt, files, fields, queries, qrels)


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


def _numbered_lines(path: Path, fh: BinaryIO) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, raw line) read one line at a time; a read failure (truncated gzip, I/O error) names
    the line it happened on."""
    lineno = 0
    while True:
        try:
            raw = fh.readline()
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise CorpusFormatError(f"{path}:{lineno + 1}: unreadable: {exc}") from exc
        if not raw:
            return
        lineno += 1
        yield lineno, raw


def _jsonl_docs(path: Path, src: CorpusSource, progress: Callable[[int], None] | None) -> Iterator[Doc]:
    try:
        fh, counter = _open_binary(path)
    except OSError as exc:
        raise CorpusFormatError(f"{path}: cannot open: {exc}") from exc
    seen = 0
    with fh:
        for line_no, line in _numbered_lines(path, fh):
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
                raise CorpusFormatError(f"{where}: not a JSON object: {exc}"[:300]) from exc
            except RecursionError:
                raise CorpusFormatError(f"{where}: JSON nested too deep to read (metadata may nest "
                                        f"{MAX_DEPTH} levels)") from None
            if not isinstance(row, dict):
                raise CorpusFormatError(f"{where}: expected one JSON object per line, got {type(row).__name__}")
            yield make_doc(row, src.fields, where)


def _utf8_lines(path: Path, fh: BinaryIO) -> Iterator[str]:
    """Lines decoded one at a time, so that a bad byte is reported on its own line (a text wrapper decodes
    8 kB blocks ahead of the CSV reader)."""
    for lineno, raw in _numbered_lines(path, fh):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorpusFormatError(f"{path}:{lineno}: not UTF-8: {exc.reason} at byte {exc.start}") from exc


def _csv_docs(path: Path, src: CorpusSource, progress: Callable[[int], None] | None) -> Iterator[Doc]:
    delimiter = "," if src.format == "csv" else "\t"
    try:
        raw, counter = _open_binary(path)
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


def _parquet_docs(path: Path, src: CorpusSource, progress: Callable[[int], None] | None) -> Iterator[Doc]:
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
    wanted = {fields.id, fields.text} | ({fields.title} if fields.title else set())
    columns = [n for n in names if n in wanted or fields.metadata is None or n in fields.metadata
               or n == "metadata"]
    size = path.stat().st_size
    n_rows = max(pf.metadata.num_rows, 1)
    row_no = 0
    reported = 0
    try:
        for batch in pf.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=columns):
            cols = {name: batch.column(name).to_pylist() for name in batch.schema.names}
            for i in range(batch.num_rows):
                row_no += 1
                yield make_doc({k: v[i] for k, v in cols.items()}, fields, f"{path}:{row_no}")
            if progress is not None:
                done = size * row_no // n_rows
                progress(done - reported)
                reported = done
    except (OSError, pa.ArrowException) as exc:
        raise CorpusFormatError(f"{path}:{row_no + 1}: unreadable: {str(exc).splitlines()[0]}") from exc


# --- queries and qrels -------------------------------------------------------------------------------------------

@dataclass
class Queries:
    texts: dict[str, str]  # query id (as a string: qrels files have no types) → text
    skipped_empty: int = 0


def read_queries(path: Path) -> Queries:
    """A BEIR `queries.jsonl` (`_id` or `id`, and `text`); or a TSV `id<TAB>text` with or without a header. A
    repeated id: the last text wins."""
    if _base_name(path).endswith((".tsv", ".tab")):
        return _read_tsv_queries(path)
    out: dict[str, str] = {}
    skipped = 0
    for lineno, row in _json_rows(path):
        where = f"{path}:{lineno}"
        id_field = "_id" if "_id" in row else "id"
        qid = typed_ext_id(row.get(id_field), where, id_field)
        text = _text_value(row.get("text"), where, "text").strip()
        if text:
            out[str(qid)] = text
        else:
            skipped += 1
    if not out:
        raise CorpusFormatError(f"{path}: no queries")
    return Queries(out, skipped)


def _json_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        fh, _ = _open_binary(path)
    except OSError as exc:
        raise CorpusFormatError(f"{path}: cannot open: {exc}") from exc
    with fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise CorpusFormatError(f"{path}:{lineno}: not a JSON object: {exc}"[:300]) from exc
            if not isinstance(row, dict):
                raise CorpusFormatError(f"{path}:{lineno}: expected one JSON object per line")
            yield lineno, row


def _tsv_lines(path: Path) -> Iterator[tuple[int, list[str]]]:
    try:
        fh, _ = _open_binary(path)
    except OSError as exc:
        raise CorpusFormatError(f"{path}: cannot open: {exc}") from exc
    with fh:
        for lineno, raw in _numbered_lines(path, fh):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                raise CorpusFormatError(f"{path}:{lineno}: not UTF-8: {exc.reason}") from exc
            if line.strip():
                yield lineno, line.split("\t") if "\t" in line else line.split()


def _read_tsv_queries(path: Path) -> Queries:
    out: dict[str, str] = {}
    skipped = 0
    for lineno, parts in _tsv_lines(path):
        if lineno == 1 and [p.strip().lower() for p in parts[:2]] in (["id", "text"], ["_id", "text"],
                                                                         ["query-id", "text"]):
            continue
        if len(parts) < 2:
            raise CorpusFormatError(f"{path}:{lineno}: expected 'id<TAB>text'")
        text = "\t".join(parts[1:]).strip()
        if text:
            out[parts[0].strip()] = text
        else:
            skipped += 1
    if not out:
        raise CorpusFormatError(f"{path}: no queries")
    return Queries(out, skipped)


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """Relevance judgments: BEIR's `query-id<TAB>corpus-id<TAB>score` (header optional), or TREC's
    `query-id iteration corpus-id score`. Scores are integers; > 0 is relevant, and nDCG uses them as gains. A
    repeated pair: the last score wins."""
    out: dict[str, dict[str, int]] = {}
    for lineno, parts in _tsv_lines(path):
        parts = [p.strip() for p in parts]
        if len(parts) == 3:
            q, d, score = parts
        elif len(parts) == 4:
            q, _, d, score = parts
        else:
            raise CorpusFormatError(f"{path}:{lineno}: expected 'query-id<TAB>corpus-id<TAB>score' (or TREC's 4 "
                                    f"columns), got {len(parts)} fields")
        if not _INT_RE.fullmatch(score):
            if lineno == 1:
                continue  # the header row, e.g. "query-id corpus-id score"
            raise CorpusFormatError(f"{path}:{lineno}: score must be an integer, got {score!r}")
        if not q or not d:
            raise CorpusFormatError(f"{path}:{lineno}: empty query or document id")
        out.setdefault(q, {})[d] = int(score)
    if not out:
        raise CorpusFormatError(f"{path}: no judgments")
    return out


def query_files(queries: Path, qrels: Path | None, split: str = DEFAULT_SPLIT) -> tuple[Path, Path]:
    """(queries file, qrels file) from `--queries FILE --qrels FILE`, or from a BEIR folder given as `--queries`
    (its `queries.jsonl` and `qrels/<split>.tsv`, unless `--qrels` names another)."""
    if queries.is_dir():
        folder = queries
        queries = next((q for q in (folder / BEIR_QUERIES, folder / (BEIR_QUERIES + ".gz")) if q.is_file()),
                       folder / BEIR_QUERIES)
        qrels = qrels or beir_qrels(folder, split)
        if qrels is None:
            raise CorpusFormatError(f"{folder}: no {BEIR_QRELS_DIR}/{split}.tsv (name the qrels file with --qrels)")
    if qrels is None:
        raise CorpusFormatError(f"{queries}: --qrels is needed with a queries file")
    for p in (queries, qrels):
        if not p.is_file():
            raise FileNotFoundError(f"{p} does not exist")
    return queries, qrels
