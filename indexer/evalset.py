"""Evaluation sets from files: a queries file and its qrels (BEIR's or TREC's) turned into a `GradedEvalSet` whose
judgments name FAISS ids, with counts of what could not be used. Shared by the build (`indexer.ingest`, which
stores the set in a version) and `indexer eval --queries --qrels` (`indexer.evaluate`), so that neither imports
the other."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from indexer.corpus_rows import CorpusFormatError
from indexer.eval_files import Queries, read_qrels, read_queries
from indexer.runtime.store import GradedEvalSet

log = logging.getLogger(__name__)


@dataclass
class EvalSetStats:
    queries_read: int = 0
    unknown_queries: int = 0  # judged in qrels but absent from the queries file
    without_relevant: int = 0  # no judgment with grade > 0
    missing_docs: int = 0  # judged documents absent from the corpus


@dataclass
class LoadedEvalSet:
    evalset: GradedEvalSet
    stats: EvalSetStats = field(default_factory=EvalSetStats)
    source: str = ""


def graded_eval_set(queries: Queries, qrels: dict[str, dict[str, int]],
                    resolve: Callable[[Iterable[str]], dict[str, int]]) -> tuple[GradedEvalSet, EvalSetStats]:
    """The queries that qrels judge with at least one relevant document, in qrels order, with judgments in FAISS
    ids: a judged document missing from the corpus gets its own id ≤ -2 (it is never retrieved, and counts).
    A query's own external id, if it is also a document's, names its `self_doc` (BEIR drops it from results)."""
    keys = {d for judged in qrels.values() for d in judged} | set(qrels)
    found = resolve(keys)
    placeholder: dict[str, int] = {}
    stats = EvalSetStats(queries_read=len(queries.texts))
    ev = GradedEvalSet([], [], [], [])
    for q, judged in qrels.items():
        if q not in queries.texts:
            stats.unknown_queries += 1
            continue
        grades: dict[int, int] = {}
        for d, g in judged.items():
            fid = found.get(d)
            if fid is None:
                fid = placeholder.setdefault(d, -2 - len(placeholder))
            grades[fid] = g
        if not any(g > 0 for g in grades.values()):
            stats.without_relevant += 1
            continue
        ev.query_ext_ids.append(q)
        ev.query_texts.append(queries.texts[q])
        ev.qrels.append(grades)
        ev.self_docs.append(found.get(q, -1))
    stats.missing_docs = len(placeholder)
    if stats.unknown_queries:
        log.warning("%d judged queries are not in the queries file: ignored", stats.unknown_queries)
    if stats.missing_docs:
        log.warning("%d judged documents are not in the corpus: they count as relevant documents nobody finds",
                    stats.missing_docs)
    return ev, stats


def load_eval_set(queries_path: Path, qrels_path: Path,
                  resolve: Callable[[Iterable[str]], dict[str, int]]) -> LoadedEvalSet:
    queries = read_queries(queries_path)
    ev, stats = graded_eval_set(queries, read_qrels(qrels_path), resolve)
    if not ev.query_texts:
        raise CorpusFormatError(f"{qrels_path}: no query of {queries_path} has a relevant document (grade > 0) "
                                f"among its judgments")
    return LoadedEvalSet(ev, stats, f"{queries_path} + {qrels_path}")
