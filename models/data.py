"""Training data: where it lives and how each source becomes a list of text tuples.

Columns per example: 1 (unsupervised sentences), 2 (positive pairs), 3 (anchor, positive, hard negative).
"""

from __future__ import annotations

import csv
import gzip
import io
import os
import random
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import numpy as np

Example = tuple[str, ...]

WIKI = "train/wiki1m_for_simcse.head11914.txt.gz"
SNLI = "train/snli_senteval"
QUORA = "quora_duplicate_questions.partial.tsv.gz"
# Quora protocol boundaries: rows < EVAL_ROWS are the paper's evaluation set, rows >= HELD_OUT are never used.
EVAL_ROWS, HELD_OUT = 100_000, 300_000
# The dev split for checkpoint selection, drawn from the training range: rows [DEV_ROWS) never train, and no
# training row shares a qid with them.
DEV_ROWS = (296_000, 300_000)
MINED_HEADER = ("anchor", "positive", "negative")
QUORA_HEADER = ("id", "qid1", "qid2", "question1", "question2", "is_duplicate")


class DataError(RuntimeError):
    """Training or evaluation data is missing or malformed."""


def data_dir() -> Path:
    """`$STRATA_DATA_DIR`, else `<repo>/../shared/data`."""
    env = os.environ.get("STRATA_DATA_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _open_text(path: Path) -> io.TextIOBase:
    if not path.is_file():
        raise DataError(f"{path} not found (set STRATA_DATA_DIR to the shared data folder)")
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")


def _text_lines(path: Path) -> Iterator[str]:
    """The lines of a UTF-8 text file (plain or .gz), line endings kept; `DataError` naming the file (and the line,
    for bytes that are not UTF-8) instead of a bare decoding or gzip error."""
    if not path.is_file():
        _open_text(path)  # the same "not found" error
    opener = gzip.open if path.suffix == ".gz" else open
    lineno = 0
    try:
        with opener(path, "rb") as f:
            for lineno, raw in enumerate(f, 1):
                try:
                    yield raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise DataError(f"{path}:{lineno}: not UTF-8 text ({exc.reason} at byte {exc.start} of the line)"
                                    ) from exc
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        where = f"{path}:{lineno + 1}" if lineno else str(path)
        raise DataError(f"{where}: unreadable: {exc}") from exc


def read_sentences(path: str | Path, limit: int | None = None) -> list[Example]:
    """One sentence per line (plain or .gz); blank lines skipped."""
    out: list[Example] = []
    for line in _text_lines(Path(path)):
        if line.strip():
            out.append((line.strip(),))
            if limit and len(out) >= limit:
                break
    return out


def snli_triplets(folder: str | Path | None = None, splits: tuple[str, ...] = ("dev", "test")) -> list[Example]:
    """SimCSE-style triplets (premise, entailment, contradiction) from SentEval's SNLI files: every premise with
    both an entailment and a contradiction hypothesis; all combinations of the two are used."""
    folder = Path(folder) if folder else data_dir() / SNLI
    out: list[Example] = []
    for split in splits:
        with (
            _open_text(folder / f"s1.{split}") as f1,
            _open_text(folder / f"s2.{split}") as f2,
            _open_text(folder / f"labels.{split}") as fl,
        ):
            by_premise: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
            for s1, s2, label in zip(f1, f2, fl, strict=True):
                by_premise[s1.strip()][label.strip()].append(s2.strip())
        for premise, hyps in by_premise.items():
            for pos in hyps.get("entailment", []):
                for neg in hyps.get("contradiction", []):
                    out.append((premise, pos, neg))
    return out


def quora_rows(path: str | Path | None = None) -> Iterator[tuple[int, int, int, str, str, int]]:
    """(id, qid1, qid2, question1, question2, is_duplicate) for each row, in file order; a malformed row is a
    `DataError` naming the file and line (skipping it would train on less than the file says, silently)."""
    path = Path(path) if path else data_dir() / QUORA
    with _open_text(path) as f:
        reader = csv.reader(f, delimiter="\t")
        try:
            next(reader, None)
            for row in reader:
                if len(row) != len(QUORA_HEADER):
                    raise DataError(f"{path}:{reader.line_num}: expected {len(QUORA_HEADER)} tab-separated fields "
                                    f"({' '.join(QUORA_HEADER)}), got {len(row)}")
                try:
                    yield int(row[0]), int(row[1]), int(row[2]), row[3], row[4], int(row[5])
                except ValueError as exc:
                    raise DataError(f"{path}:{reader.line_num}: id, qid1, qid2 and is_duplicate must be integers: "
                                    f"{exc}") from exc
        except (UnicodeDecodeError, csv.Error, OSError, EOFError, zlib.error) as exc:
            raise DataError(f"{path}:{reader.line_num + 1}: unreadable: {exc}") from exc


def _quora_rows_before_held_out(path: str | Path | None, stop: int) -> Iterator[tuple[int, int, int, str, str, int]]:
    if stop > HELD_OUT:
        raise DataError(f"rows >= {HELD_OUT} are held out and never used for training or tuning")
    for row in quora_rows(path):
        if row[0] >= stop:
            break
        yield row


def _kept_training_rows(
    path: str | Path | None, start: int, stop: int, eval_rows: int, dev_rows: tuple[int, int] | None
) -> list[tuple[int, int, str, str, int]]:
    """(qid1, qid2, question1, question2, is_duplicate) of the rows in [start, stop) outside the dev rows, with both
    texts non-empty, sharing no qid with the evaluation rows (< eval_rows) or the dev rows."""
    dev_lo, dev_hi = dev_rows or (stop, stop)
    blocked: set[int] = set()
    rows = []
    for rid, q1, q2, t1, t2, dup in _quora_rows_before_held_out(path, max(stop, dev_hi if dev_rows else stop)):
        if rid < eval_rows or dev_lo <= rid < dev_hi:
            blocked.update((q1, q2))
        elif start <= rid < stop and t1.strip() and t2.strip():
            rows.append((q1, q2, t1.strip(), t2.strip(), dup))
    return [r for r in rows if r[0] not in blocked and r[1] not in blocked]


def quora_training(
    path: str | Path | None = None,
    start: int = EVAL_ROWS,
    stop: int = HELD_OUT,
    seed: int = 0,
    eval_rows: int = EVAL_ROWS,
    dev_rows: tuple[int, int] | None = DEV_ROWS,
) -> list[Example]:
    """In-domain examples from rows [start, stop) outside `dev_rows`: each duplicate pair is a positive pair,
    extended to a triplet with a hard negative taken from a non-duplicate row of the same question when one exists
    (Quora's own labelled non-duplicates; `encoder mine` writes index-mined negatives instead).

    Any row sharing a qid with the evaluation rows (< eval_rows = 100,000) or with the dev rows is dropped, and
    rows >= 300,000 are never read, so neither the evaluation protocols, the dev split nor the held-out split
    leaks into training."""
    rows = _kept_training_rows(path, start, stop, eval_rows, dev_rows)
    negatives: dict[int, list[str]] = defaultdict(list)
    for q1, q2, t1, t2, dup in rows:
        if not dup:
            negatives[q1].append(t2)
            negatives[q2].append(t1)
    rng = random.Random(seed)
    out: list[Example] = []
    for q1, _q2, t1, t2, dup in rows:
        if dup:
            negs = negatives.get(q1)
            out.append((t1, t2, rng.choice(negs)) if negs else (t1, t2))
    return out


@dataclass
class TrainingQuestions:
    """The training split as questions and labelled duplicate pairs (what `encoder mine` indexes)."""

    texts: dict[int, str]  # qid → question, every question of a kept training row
    pairs: list[tuple[int, int]]  # (qid1, qid2) of the kept duplicate rows, in file order


def quora_training_questions(
    path: str | Path | None = None,
    start: int = EVAL_ROWS,
    stop: int = HELD_OUT,
    eval_rows: int = EVAL_ROWS,
    dev_rows: tuple[int, int] | None = DEV_ROWS,
) -> TrainingQuestions:
    """The same rows as `quora_training` (same exclusions), keyed by qid."""
    texts: dict[int, str] = {}
    pairs: list[tuple[int, int]] = []
    for q1, q2, t1, t2, dup in _kept_training_rows(path, start, stop, eval_rows, dev_rows):
        texts.setdefault(q1, t1)
        texts.setdefault(q2, t2)
        if dup:
            pairs.append((q1, q2))
    return TrainingQuestions(texts, pairs)


@dataclass
class QuoraDev:
    """A small retrieval set for checkpoint selection, built from the dev rows like the held-out protocol:
    every unique question is a document, queries are the `qid1`s of duplicate pairs, gold their `qid2`s, and a
    query's own id is excluded from its results."""

    doc_ids: np.ndarray
    doc_texts: list[str]
    query_ids: np.ndarray
    query_texts: list[str]
    gold: list[set[int]]

    def mrr_at_10(self, encode: Callable[[list[str]], np.ndarray]) -> float:
        """MRR@10 × 100 of exact inner-product search with `encode`'s (normalised) vectors."""
        docs = encode(self.doc_texts)
        queries = encode(self.query_texts)
        scores = queries @ docs.T
        own = self.doc_ids[None, :] == self.query_ids[:, None]
        scores[own] = -np.inf
        top = np.argsort(-scores, axis=1, kind="stable")[:, :10]
        total = 0.0
        for row, gold in zip(self.doc_ids[top], self.gold, strict=True):
            for rank, doc in enumerate(row, 1):
                if int(doc) in gold:
                    total += 1.0 / rank
                    break
        return 100.0 * total / max(1, len(self.gold))


def quora_dev(path: str | Path | None = None, dev_rows: tuple[int, int] = DEV_ROWS) -> QuoraDev:
    lo, hi = dev_rows
    if hi > HELD_OUT:
        raise DataError(f"the dev split must lie below the held-out rows (< {HELD_OUT})")
    docs: dict[int, str] = {}
    gold: dict[int, set[int]] = defaultdict(set)
    queries: dict[int, str] = {}
    for rid, q1, q2, t1, t2, dup in _quora_rows_before_held_out(path, hi):
        if rid < lo:
            continue
        t1, t2 = t1.strip(), t2.strip()
        if t1:
            docs.setdefault(q1, t1)
        if t2:
            docs.setdefault(q2, t2)
        if dup and t1 and t2:
            queries.setdefault(q1, t1)
            gold[q1].add(q2)
    if not queries:
        raise DataError(f"no duplicate pairs in Quora rows {lo}..{hi - 1}")
    qids = sorted(queries)
    return QuoraDev(
        np.fromiter(docs, dtype=np.int64, count=len(docs)),
        list(docs.values()),
        np.asarray(qids, dtype=np.int64),
        [queries[q] for q in qids],
        [gold[q] for q in qids],
    )


def read_mined(path: str | Path) -> list[Example]:
    """A triplet file written by `encoder mine`: TSV with the header anchor, positive, negative (extra columns
    ignored). Bad lines raise `DataError` naming the file and line."""
    path = Path(path)
    out: list[Example] = []
    reader = csv.reader(_text_lines(path), delimiter="\t", quoting=csv.QUOTE_NONE)
    header = next(reader, None)
    if header is None or tuple(header[:3]) != MINED_HEADER:
        raise DataError(f"{path}:1: expected a tab-separated header starting with {' '.join(MINED_HEADER)}")
    for row in reader:
        if len(row) < 3 or not all(c.strip() for c in row[:3]):
            raise DataError(f"{path}:{reader.line_num}: expected three non-empty tab-separated texts")
        out.append((row[0], row[1], row[2]))
    return out


def _first_line(path: Path) -> list[str] | None:
    """The first line's tab-separated fields (line ending stripped), or None for a missing or empty file."""
    if not path.is_file():
        return None
    with closing(_text_lines(path)) as lines:
        line = next(lines, None)
    return None if line is None else line.rstrip("\r\n").split("\t")


def is_mined_file(path: str | Path) -> bool:
    first = _first_line(Path(path))
    return first is not None and tuple(first[:3]) == MINED_HEADER


def is_quora_file(path: str | Path) -> bool:
    """Whether `path` is a Quora question-pairs TSV (its header: id, qid1, qid2, question1, question2,
    is_duplicate)."""
    first = _first_line(Path(path))
    return first is not None and tuple(first) == QUORA_HEADER


def load_training_data(source: str, limit: int | None = None, seed: int = 0) -> list[Example]:
    """`wiki` | `snli` | `quora` | a Quora question-pairs TSV (read as `quora`: the same training rows, never the
    held-out ones) | a triplet file from `encoder mine` | a one-sentence-per-line text file."""
    if source == "wiki":
        data = read_sentences(data_dir() / WIKI)
    elif source == "snli":
        data = snli_triplets()
    elif source == "quora":
        data = quora_training(seed=seed)
    elif is_quora_file(source):  # a Quora TSV read line by line would train on its held-out rows, ids and all
        data = quora_training(source, seed=seed)
    elif is_mined_file(source):
        data = read_mined(source)
    else:
        data = read_sentences(source)
    if not data:
        raise DataError(f"no training examples in {source}")
    return data[:limit] if limit else data
