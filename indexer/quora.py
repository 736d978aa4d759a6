"""Quora Question Pairs: reading the TSV (plain or .gz, or downloaded from its official URL) and turning it into
a corpus plus an evaluation set under one of two protocols.

- `paper`: the semantic-search protocol of the layer-attention pooling paper (from the BERT-whitening Quora
  script): the first N data rows (100,000); corpus = `question2` keyed by `qid2`; queries = `question1` keyed by
  `qid1`; a query's gold set = the `qid2`s of its duplicate pairs; only queries with ≥ 1 gold are evaluated.
- `full`: every unique question is a document; queries = `qid1` of duplicate pairs, gold = their `qid2`s, and
  a query's own id is excluded from its results.
- `heldout`: the `full` protocol on the held-out rows only (id ≥ 300,000): an evaluation set that nothing in
  Strata trains or tunes on, for comparing trained encoders with the stock one (the stock all-MiniLM-L6-v2 saw
  Quora during its own training, so no split is unseen by it).

Rows with id ≥ 300,000 are the held-out split (`HELD_OUT_FROM`): training code must never read them.
"""

from __future__ import annotations

import csv
import gzip
import http.client
import io
import logging
import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from indexer.runtime.atomic import fsync_dir

log = logging.getLogger(__name__)

Protocol = Literal["paper", "full", "heldout"]
COLUMNS = ("id", "qid1", "qid2", "question1", "question2", "is_duplicate")
PAPER_ROWS = 100_000
HELD_OUT_FROM = 300_000


class QuoraFormatError(ValueError):
    """The file is not a Quora question-pairs TSV; the message names the file and line."""


class DownloadError(OSError):
    """The data URL could not be fetched; the message names the URL."""


@dataclass(frozen=True)
class QuoraRow:
    id: int
    qid1: int
    qid2: int
    question1: str
    question2: str
    is_duplicate: bool


@dataclass
class Corpus:
    ids: np.ndarray  # int64, unique
    texts: list[str]


@dataclass
class EvalSet:
    query_ids: np.ndarray  # int64
    query_texts: list[str]
    gold: list[set[int]]
    exclude_self: bool


@dataclass
class QuoraSplit:
    corpus: Corpus
    evalset: EvalSet
    protocol: Protocol
    source: str
    rows_read: int = 0
    skipped_empty_texts: int = 0
    stats: dict[str, int] = field(default_factory=dict)
    # question1s with no duplicate among the rows read: queries the evaluation does not judge (calibration probes)
    unjudged_queries: dict[int, str] = field(default_factory=dict)


def _open_text(path: Path) -> io.TextIOBase:
    with open(path, "rb") as fh:
        magic = fh.read(2)
    if magic == b"\x1f\x8b":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


def download(url: str, dest_dir: Path) -> Path:
    """Download `url` into `dest_dir` once (atomically: a partial download never looks complete)."""
    dest = dest_dir / Path(url.split("?")[0]).name
    if dest.is_file():
        return dest
    dest_dir.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    log.info("downloading %s -> %s", url, dest)
    from indexer.runtime.progress import Progress

    try:
        with urllib.request.urlopen(url, timeout=60) as resp, open(tmp, "wb") as out:  # noqa: S310 (fixed URL)
            total = int(resp.headers.get("Content-Length") or 0) or None
            with Progress(total or 0, dest.name, unit="B", unit_scale=True) as bar:
                while block := resp.read(1 << 20):
                    out.write(block)
                    bar.update(len(block))
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, (OSError, http.client.HTTPException)):  # URLError, HTTPError, timeouts, resets
            detail = exc.reason if type(exc) is urllib.error.URLError else exc  # HTTPError's str has the code
            raise DownloadError(f"cannot download Quora data from {url}: {detail} (point --data or STRATA_QUORA "
                                "at a local copy instead)") from exc
        raise
    shutil.move(tmp, dest)
    fsync_dir(dest_dir)
    return dest


def resolve_source(source: str, download_dir: Path) -> Path:
    if source.startswith(("http://", "https://")):
        return download(source, download_dir)
    path = Path(source).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"Quora data file {path} does not exist")
    return path


def read_rows(path: Path, limit: int | None = None) -> Iterator[QuoraRow]:
    """Yield data rows in file order; raise `QuoraFormatError` naming file and line on a malformed row."""
    try:
        fh = _open_text(path)
        reader = csv.reader(fh, delimiter="\t")
        header = next(reader, None)
    except (UnicodeDecodeError, OSError, csv.Error, EOFError) as exc:
        raise QuoraFormatError(f"{path}: cannot read as UTF-8 TSV: {exc}") from exc
    with fh:
        if header is None or tuple(h.strip() for h in header) != COLUMNS:
            raise QuoraFormatError(f"{path}:1: expected the tab-separated header {' '.join(COLUMNS)}, "
                                   f"got {header!r}")
        n = 0
        while limit is None or n < limit:
            try:
                fields = next(reader)
            except StopIteration:
                break
            except (UnicodeDecodeError, csv.Error, EOFError, OSError) as exc:
                raise QuoraFormatError(f"{path}:{reader.line_num + 1}: unreadable row: {exc}") from exc
            if not fields:
                continue
            if len(fields) != 6:
                raise QuoraFormatError(
                    f"{path}:{reader.line_num}: expected 6 tab-separated fields, got {len(fields)}"
                )
            try:
                rid, q1, q2, dup = int(fields[0]), int(fields[1]), int(fields[2]), int(fields[5])
            except ValueError as exc:
                raise QuoraFormatError(f"{path}:{reader.line_num}: id, qid1, qid2 and is_duplicate must be "
                                       f"integers: {exc}") from exc
            if dup not in (0, 1):
                raise QuoraFormatError(f"{path}:{reader.line_num}: is_duplicate must be 0 or 1, got {dup}")
            yield QuoraRow(rid, q1, q2, fields[3].strip(), fields[4].strip(), dup == 1)
            n += 1


def _protocol_rows(path: Path, protocol: Protocol, rows: int | None) -> Iterator[QuoraRow]:
    """The rows a protocol reads: the first `rows` of the file, or for `heldout` the first `rows` held-out ones."""
    if protocol != "heldout":
        yield from read_rows(path, rows)
        return
    n = 0
    for row in read_rows(path):
        if rows is not None and n >= rows:
            return
        if row.id >= HELD_OUT_FROM:
            n += 1
            yield row


def load_split(path: Path, protocol: Protocol = "paper", rows: int | None = None) -> QuoraSplit:
    """Read the first `rows` data rows (default: 100,000 for `paper`, all for `full` and `heldout`) into corpus +
    eval set."""
    if protocol not in ("paper", "full", "heldout"):
        raise ValueError(f"unknown protocol {protocol!r}: paper, full or heldout")
    if rows is None and protocol == "paper":
        rows = PAPER_ROWS
    every_question = protocol in ("full", "heldout")
    docs: dict[int, str] = {}
    queries: dict[int, str] = {}
    gold: dict[int, set[int]] = {}
    n_rows = skipped = 0
    for row in _protocol_rows(path, protocol, rows):
        n_rows += 1
        q1_ok, q2_ok = bool(row.question1), bool(row.question2)
        skipped += (not q1_ok) + (not q2_ok)
        if q2_ok:
            docs.setdefault(row.qid2, row.question2)
        if every_question and q1_ok:
            docs.setdefault(row.qid1, row.question1)
        if q1_ok:
            queries.setdefault(row.qid1, row.question1)
            if row.is_duplicate and q2_ok:
                gold.setdefault(row.qid1, set()).add(row.qid2)
    if n_rows == 0:
        where = f" with id >= {HELD_OUT_FROM} (the held-out rows)" if protocol == "heldout" else ""
        raise QuoraFormatError(f"{path}: no data rows{where}")
    qids = sorted(gold)
    split = QuoraSplit(
        unjudged_queries={q: t for q, t in queries.items() if q not in gold},
        corpus=Corpus(np.fromiter(docs.keys(), dtype=np.int64, count=len(docs)), list(docs.values())),
        evalset=EvalSet(np.asarray(qids, dtype=np.int64), [queries[q] for q in qids], [gold[q] for q in qids],
                        exclude_self=every_question),
        protocol=protocol,
        source=str(path),
        rows_read=n_rows,
        skipped_empty_texts=skipped,
    )
    log.info("read %d rows from %s (%s protocol): %d documents, %d queries with gold, %d empty texts skipped",
             n_rows, path, protocol, len(docs), len(qids), skipped)
    return split
