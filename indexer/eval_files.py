"""Evaluation queries and relevance judgments (qrels) files: BEIR's `queries.jsonl` and `qrels/<split>.tsv`,
TSV queries, TREC qrels; and where `--queries`/`--qrels` point (`query_files`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from indexer.corpus_files import (
    BEIR_QRELS_DIR,
    BEIR_QUERIES,
    DEFAULT_SPLIT,
    base_name,
    beir_qrels,
    json_error,
    numbered_lines,
    open_binary,
)
from indexer.corpus_rows import INT_RE, CorpusFormatError, text_value, typed_ext_id


@dataclass
class Queries:
    texts: dict[str, str]  # query id (as a string: qrels files have no types) → text
    skipped_empty: int = 0


def read_queries(path: Path) -> Queries:
    """A BEIR `queries.jsonl` (`_id` or `id`, and `text`); or a TSV `id<TAB>text` with or without a header. A
    repeated id: the last text wins."""
    if base_name(path).endswith((".tsv", ".tab")):
        return _read_tsv_queries(path)
    out: dict[str, str] = {}
    skipped = 0
    for lineno, row in _json_rows(path):
        where = f"{path}:{lineno}"
        id_field = "_id" if "_id" in row else "id"
        qid = typed_ext_id(row.get(id_field), where, id_field)
        text = text_value(row.get("text"), where, "text").strip()
        if text:
            out[str(qid)] = text
        else:
            skipped += 1
    if not out:
        raise CorpusFormatError(f"{path}: no queries")
    return Queries(out, skipped)


def _json_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        fh, _ = open_binary(path)
    except OSError as exc:
        raise CorpusFormatError(f"{path}: cannot open: {exc}") from exc
    with fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise CorpusFormatError(f"{path}:{lineno}: not a JSON object: {json_error(exc)}"[:300]) from exc
            if not isinstance(row, dict):
                raise CorpusFormatError(f"{path}:{lineno}: expected one JSON object per line")
            yield lineno, row


def _tsv_lines(path: Path) -> Iterator[tuple[int, list[str]]]:
    try:
        fh, _ = open_binary(path)
    except OSError as exc:
        raise CorpusFormatError(f"{path}: cannot open: {exc}") from exc
    with fh:
        for lineno, raw in numbered_lines(path, fh):
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
        if not INT_RE.fullmatch(score):
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
