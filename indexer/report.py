"""Gates before publishing, reports after: which of a build's evaluations hold its version back, and which run once
it is served.

Gates (a version is not published, or a running API does not swap to it, until they pass): the checksums, the
nprobe/ef_search calibration (it sets the served search parameters), and the dense MRR@10 of the index at those
parameters over the version's evaluation queries (`gate_figures`), which the API's quality gate compares with the
served version's (`service.engine.swap`). The gate searches every query in batches: seconds.

Reports (`run_report`, after `current` was switched): the dense evaluation in full (the exact-search reference, the
one-query-at-a-time timing, Recall@100 and the rest of `indexer.evaluate`) and each other `/search` mode the version
serves (lexical, hybrid: `indexer.eval_modes`) — minutes on a large corpus, which no one waits for. Their
figures are written into the served version's manifest (`eval`, `eval_modes`; atomically, as `indexer eval` does),
its `report` saying pending → running → done (or failed, and why); the API shows them in `/ready`, `/stats` and
the page once they are there. `indexer eval --root R` measures a report that was cut short again.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from indexer.doc_ranks import DocumentRanks
from indexer.eval_modes import evaluate_modes, served_modes
from indexer.evaluate import GRADED_DEPTH, EvalError, drop_self, eval_search_params, rank_metrics
from indexer.metrics import mean_metrics
from indexer.runtime.faiss.devices import set_threads
from indexer.runtime.layout import IndexRoot
from indexer.runtime.manifest import GateFigures, Manifest, ManifestError, ReportState
from indexer.runtime.version import IndexVersion

log = logging.getLogger(__name__)


def gate_figures(version: IndexVersion, threads: int | None = None) -> GateFigures:
    """Dense MRR@10 and Recall@10 (graded qrels: nDCG@10 too) of the index at its search parameters over every
    evaluation query, searched in batches, self-matches dropped as the full evaluation drops them."""
    t0 = time.perf_counter()
    if threads:
        set_threads(threads)
    search_params = eval_search_params(version)
    qvecs = version.query_vectors()
    graded = version.store.graded_eval_set()
    if graded is not None:
        if qvecs is None or len(qvecs) != len(graded.query_texts) or not len(qvecs):
            raise EvalError(f"{version.folder}: query vectors do not match its {len(graded.query_texts)} queries")
        self_docs = np.asarray(graded.self_docs, dtype=np.int64)
        extra = int((self_docs >= 0).any())
        ranks = DocumentRanks(version)  # a version of passages: documents by their best passage, as qrels judge
        _, ids = ranks.collapse(*version.ann.search(qvecs, ranks.depth(GRADED_DEPTH + extra),
                                                    search_params=search_params),
                                GRADED_DEPTH + extra)
        if extra:
            ids = drop_self(ids, self_docs, GRADED_DEPTH)
        got = mean_metrics(ids, graded.qrels)
        mrr, recall, ndcg = got["mrr_at_10"], got["recall_at_10"], got["ndcg_at_10"]
    else:
        qids, _, gold = version.store.eval_set()
        if not qids or qvecs is None or len(qvecs) != len(qids):
            raise EvalError(f"{version.folder} has no usable evaluation queries")
        exclude_self = version.manifest.data.protocol in ("full", "heldout")
        _, ids = version.ann.search(qvecs, 11 if exclude_self else 10, search_params=search_params)
        if exclude_self:
            ids = drop_self(ids, np.asarray(qids, dtype=np.int64), 10)
        (mrr, recall), ndcg = rank_metrics(ids, gold, 10), None
    figures = GateFigures(mrr_at_10=round(float(mrr), 6), recall_at_10=round(float(recall), 6),
                          ndcg_at_10=None if ndcg is None else round(float(ndcg), 6), n_queries=len(qvecs),
                          search_params=search_params, seconds=round(time.perf_counter() - t0, 3),
                          measured_at=datetime.now(timezone.utc))
    log.info("gate: MRR@10 %.4f over %d queries at %s (%.1fs); the report's evaluations run after publishing",
             figures.mrr_at_10, figures.n_queries, search_params, figures.seconds)
    return figures


def pending_report(version: IndexVersion) -> ReportState:
    return ReportState(state="pending", modes=served_modes(version))


def _update(folder: Path, **changes: object) -> Manifest:
    """Re-read the manifest (another writer, `indexer eval`, may have saved it meanwhile), change it, save it
    atomically."""
    manifest = Manifest.load(folder)
    for name, value in changes.items():
        setattr(manifest, name, value)
    manifest.save(folder)
    return manifest


def run_report(root: Path, version: str, threads: int | None = None) -> Manifest:
    """The report's evaluations of a published `version` of `root` (see the module docstring); returns its manifest
    with their figures. A version whose report is done is returned as it is. A failure (the version removed
    meanwhile, an interrupt) is recorded as `failed` with its reason, then raised: the version stays served."""
    folder = IndexRoot(root).version_dir(version)
    manifest = Manifest.load(folder)
    if manifest.report is None or manifest.report.state == "done":
        return manifest
    started = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    state = manifest.report.model_copy(update={"state": "running", "started_at": started})
    _update(folder, report=state)
    log.info("report of %s (served meanwhile): exact-search reference, timing, modes %s", version,
             ", ".join(state.modes))
    try:
        opened = IndexVersion(folder)
        try:
            figures = evaluate_modes(opened, state.modes, threads=threads)
        finally:
            opened.close()
    except BaseException as exc:  # an interrupt too: the manifest must not claim a report is still running
        why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        try:
            _update(folder, report=state.model_copy(update={
                "state": "failed", "finished_at": datetime.now(timezone.utc), "error": why,
                "seconds": round(time.perf_counter() - t0, 3)}))
        except (ManifestError, OSError):
            pass  # the version is gone (pruned): nothing left to record it in
        log.error("report of %s failed (%s); the version is served all the same; `indexer eval --root %s` measures "
                  "it again", version, why, root)
        raise
    done = state.model_copy(update={"state": "done", "finished_at": datetime.now(timezone.utc),
                                    "seconds": round(time.perf_counter() - t0, 3)})
    current = Manifest.load(folder)
    manifest = _update(folder, eval=figures.get("dense", current.eval), eval_modes=current.eval_modes | figures,
                       report=done)
    log.info("report of %s done in %.1fs", version, done.seconds)
    return manifest
