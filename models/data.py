"""Training data: where it lives and how each source becomes a list of text tuples.

Columns per example: 1 (unsupervised sentences), 2 (positive pairs), 3 (anchor, positive, hard negative).
"""

from __future__ import annotations

import csv
import gzip
import io
import os
import random
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

Example = tuple[str, ...]

WIKI = "train/wiki1m_for_simcse.head11914.txt.gz"
SNLI = "train/snli_senteval"
QUORA = "quora_duplicate_questions.partial.tsv.gz"
# Quora protocol boundaries: rows < EVAL_ROWS are the paper's evaluation set, rows >= HELD_OUT are never used.
EVAL_ROWS, HELD_OUT = 100_000, 300_000


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


def read_sentences(path: str | Path, limit: int | None = None) -> list[Example]:
    """One sentence per line (plain or .gz); blank lines skipped."""
    out: list[Example] = []
    with _open_text(Path(path)) as f:
        for line in f:
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
    """(id, qid1, qid2, question1, question2, is_duplicate) for each well-formed row, in file order."""
    path = Path(path) if path else data_dir() / QUORA
    with _open_text(path) as f:
        reader = csv.reader(f, delimiter="\t")
        next(reader, None)
        for row in reader:
            if len(row) != 6:
                continue
            try:
                yield int(row[0]), int(row[1]), int(row[2]), row[3], row[4], int(row[5])
            except ValueError:
                continue


def quora_training(
    path: str | Path | None = None,
    start: int = EVAL_ROWS,
    stop: int = HELD_OUT,
    seed: int = 0,
    eval_rows: int = EVAL_ROWS,
) -> list[Example]:
    """In-domain examples from rows [start, stop): each duplicate pair is a positive pair, extended to a triplet
    with a hard negative taken from a non-duplicate row of the same question when one exists.

    Any row sharing a qid with the evaluation rows (< eval_rows = 100,000) is dropped, and rows >= 300,000 are
    never read past, so neither the evaluation protocol nor the held-out split leaks into training."""
    if stop > HELD_OUT:
        raise DataError(f"rows >= {HELD_OUT} are held out and never used for training")
    eval_qids: set[int] = set()
    rows = []
    for rid, q1, q2, t1, t2, dup in quora_rows(path):
        if rid >= stop:
            break
        if rid < eval_rows:
            eval_qids.update((q1, q2))
        elif rid >= start and t1.strip() and t2.strip():
            rows.append((q1, q2, t1.strip(), t2.strip(), dup))
    rows = [r for r in rows if r[0] not in eval_qids and r[1] not in eval_qids]
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


def load_training_data(source: str, limit: int | None = None, seed: int = 0) -> list[Example]:
    """`wiki` | `snli` | `quora` | a path to a one-sentence-per-line text file."""
    if source == "wiki":
        data = read_sentences(data_dir() / WIKI)
    elif source == "snli":
        data = snli_triplets()
    elif source == "quora":
        data = quora_training(seed=seed)
    else:
        data = read_sentences(source)
    if not data:
        raise DataError(f"no training examples in {source}")
    return data[:limit] if limit else data
