"""TREC run files: what `indexer eval --run-out FILE` writes and `indexer compare` reads.

A run line is `query-id Q0 doc-id rank score tag` (whitespace-separated; trec_eval's format), with the ids as the
qrels name them: a corpus build's external ids, the Quora protocol's qids. Each ranking an evaluation scores is
one run, keyed by its retrieval mode and whether it is exact search's reference (`RunKey`); `run_paths` names
the files: one mode writes FILE (the index) and FILE.exact (exact search), several write FILE.{mode} and
FILE.{mode}.exact. As trec_eval does, a reader orders a query's documents by score, not by the rank column, so
the scores are written with every digit a float32 has (9 significant digits) and never rounded into ties.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from indexer.runtime.atomic import write_bytes_atomic

QUORA_QRELS_SUFFIX = ".qrels"


class RunFormatError(ValueError):
    """A run file that cannot be read or written; the message starts with FILE:LINE where there is a line."""


@dataclass(frozen=True, order=True)
class RunKey:
    """Which ranking a run holds: the retrieval mode and whether it is exact search's reference ranking."""

    mode: str = "dense"
    exact: bool = False

    @property
    def tag(self) -> str:
        return f"strata.{self.mode}" + (".exact" if self.exact else "")

    @property
    def label(self) -> str:
        return f"{self.mode}, {'exact search' if self.exact else 'index'}"


@dataclass
class Ranking:
    """Ranked FAISS ids (-1 padding) and their scores for the evaluated queries at positions `rows`."""

    rows: np.ndarray
    ids: np.ndarray
    scores: np.ndarray


@dataclass
class RunCollector:
    """Handed to `indexer.evaluate`: receives every ranking it scores, after self-matches are dropped, with the
    evaluated queries' ids and (for the Quora protocol, which has no qrels file) their judgments."""

    query_ids: list[str] = field(default_factory=list)
    rankings: dict[RunKey, Ranking] = field(default_factory=dict)
    qrels: dict[str, dict[str, int]] | None = None
    notes: list[str] = field(default_factory=list)

    def add(self, key: RunKey, ids: np.ndarray, scores: np.ndarray, rows: np.ndarray | None = None) -> None:
        rows = np.arange(len(ids)) if rows is None else np.asarray(rows)
        if len(rows) != len(self.query_ids):  # a partial ranking (exact search on a sample) would mis-pair queries
            self.notes.append(f"no {key.label} run: it covers {len(rows)} of the {len(self.query_ids)} queries "
                              "(exact search on a sample; --exact-all covers every query)")
            return
        self.rankings[key] = Ranking(rows, ids, scores)


def run_paths(base: Path, keys: Iterable[RunKey]) -> dict[RunKey, Path]:
    """Where each run goes: FILE and FILE.exact when one mode ran, FILE.{mode} and FILE.{mode}.exact when
    several did."""
    keys = sorted(set(keys))
    several = len({k.mode for k in keys}) > 1
    return {k: Path(f"{base}{'.' + k.mode if several else ''}{'.exact' if k.exact else ''}") for k in keys}


def _check_id(value: str, what: str, path: Path) -> str:
    if not value or any(c.isspace() for c in value):
        raise RunFormatError(f"{path}: {what} {value!r} is empty or holds whitespace: a TREC run cannot hold it")
    return value


def write_run(path: Path, query_ids: Sequence[str], docs: Sequence[Sequence[tuple[str, float]]], tag: str) -> int:
    """Write `docs[i]` (ranked (doc id, score) pairs) as query `query_ids[i]`'s lines, atomically; returns the
    number of lines. Queries without results have no line (a reader counts them as retrieving nothing)."""
    lines: list[str] = []
    for qid, ranked in zip(query_ids, docs, strict=True):
        _check_id(qid, "query id", path)
        for rank, (doc, score) in enumerate(ranked, 1):
            lines.append(f"{qid} Q0 {_check_id(doc, 'document id', path)} {rank} {score:.9g} {tag}\n")
    _write_text_atomic(path, "".join(lines))
    return len(lines)


def write_qrels(path: Path, qrels: Mapping[str, Mapping[str, int]]) -> None:
    """TREC qrels (`query-id 0 doc-id grade`), atomically: the Quora protocol's judgments beside its run."""
    _write_text_atomic(path, "".join(f"{q} 0 {d} {g}\n" for q, judged in qrels.items() for d, g in judged.items()))


def _write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(Path(path), text.encode("utf-8"))


def write_runs(collector: RunCollector, base: Path, ext_ids: Callable[[Iterable[int]], dict[int, str]]
               ) -> dict[RunKey, Path]:
    """Every collected ranking as a run file (see `run_paths`), document FAISS ids named by `ext_ids`; with the
    Quora protocol's judgments also written to FILE.qrels."""
    paths = run_paths(base, collector.rankings)
    for key, path in paths.items():
        r = collector.rankings[key]
        wanted = {int(i) for i in np.unique(r.ids) if i >= 0}
        names = ext_ids(wanted)
        docs = [[(names[int(i)], float(s)) for i, s in zip(ids, scores, strict=True) if i >= 0 and int(i) in names]
                for ids, scores in zip(r.ids, r.scores, strict=True)]
        write_run(path, [collector.query_ids[i] for i in r.rows], docs, key.tag)
    if collector.qrels is not None and paths:
        write_qrels(Path(f"{base}{QUORA_QRELS_SUFFIX}"), collector.qrels)
    return paths


def _text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, decoded line) of a text file, gzipped or not; unreadable bytes name their line."""
    import gzip

    try:
        fh = gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")  # noqa: SIM115
    except OSError as exc:
        raise RunFormatError(f"{path}: cannot open: {exc.strerror or exc}") from exc
    with fh:
        lineno = 0
        while True:
            try:
                raw = fh.readline()
            except (OSError, EOFError) as exc:
                raise RunFormatError(f"{path}:{lineno + 1}: unreadable: {exc}") from exc
            if not raw:
                return
            lineno += 1
            try:
                yield lineno, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise RunFormatError(f"{path}:{lineno}: not UTF-8: {exc.reason} at byte {exc.start}") from exc


def read_run(path: Path) -> dict[str, dict[str, float]]:
    """A TREC run: query id → document id → score. Six whitespace-separated fields a line (`qid Q0 docid rank
    score tag`); a bad line, or a document twice for one query, is a `RunFormatError` naming FILE:LINE."""
    run: dict[str, dict[str, float]] = {}
    first_line: dict[tuple[str, str], int] = {}
    for lineno, line in _text_lines(Path(path)):
        parts = line.split()
        if not parts:
            continue
        where = f"{path}:{lineno}"
        if len(parts) != 6:
            raise RunFormatError(f"{where}: expected 6 fields 'query-id Q0 doc-id rank score tag', got "
                                 f"{len(parts)}")
        qid, _, doc, rank, score, _ = parts
        try:
            int(rank)
        except ValueError:
            raise RunFormatError(f"{where}: rank must be an integer, got {rank!r}") from None
        try:
            value = float(score)
        except ValueError:
            raise RunFormatError(f"{where}: score must be a number, got {score!r}") from None
        if not math.isfinite(value):
            raise RunFormatError(f"{where}: score must be finite, got {score!r}")
        seen = first_line.setdefault((qid, doc), lineno)
        if seen != lineno:
            raise RunFormatError(f"{where}: document {doc!r} is ranked twice for query {qid!r} (first on line "
                                 f"{seen})")
        run.setdefault(qid, {})[doc] = value
    if not run:
        raise RunFormatError(f"{path}: no results (an empty run)")
    return run
