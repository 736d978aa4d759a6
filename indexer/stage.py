"""The steps every build takes in its staging folder, whatever fed it (`indexer.build`, `indexer.ingest`,
`indexer.ray_build`, `indexer.add`, `indexer.compact`): build the vector index the config asks for, describe the
encoder in the manifest, then save the manifest, calibrate the search parameter and evaluate the version — all
before it can become current, or, with `report_after`, only its gate's figure (`indexer.report`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from indexer.build_config import BuildConfig, index_params
from indexer.calibrate import calibrate_index
from indexer.eval_modes import evaluate_modes
from indexer.probes import Probes, load_probes, save_probes
from indexer.report import gate_figures, pending_report
from indexer.runtime.ann import AnnIndex
from indexer.runtime.encoder import EncoderMeta
from indexer.runtime.faiss.files import INDEX_FILE
from indexer.runtime.faiss.kinds import build_index
from indexer.runtime.lexical import LEXICAL_DIR, build_lexical
from indexer.runtime.manifest import IndexInfo, Manifest, ModelInfo, Timings
from indexer.runtime.progress import Working
from indexer.runtime.storage import storage_errors
from indexer.runtime.store import STORE, Store
from indexer.runtime.version import IndexVersion

log = logging.getLogger(__name__)


def build_version_index(cfg: BuildConfig, vectors: np.ndarray, ids: np.ndarray, stage: Path, timings: Timings
                        ) -> IndexInfo:
    """Build the index `cfg` asks for over `vectors`, write it into `stage`; returns the manifest's section."""
    params = index_params(cfg, len(vectors), vectors.shape[1])
    index: AnnIndex
    with Working(f"building a {params.kind} index of {len(vectors):,} vectors ({params.model_dump()})", logger=log):
        index, timings.train_s, timings.add_s = build_index(params, vectors, ids, cfg.seed)
    index.save(stage / INDEX_FILE)
    return IndexInfo.for_params(index.params, index.ntotal)


def model_info(model_dir: Path, meta: EncoderMeta) -> ModelInfo:
    return ModelInfo(dir=str(Path(model_dir).resolve()), onnx_sha256=meta.onnx_sha256, pooling=meta.pooling,
                     dim=meta.dim, max_length=meta.max_length, source=meta.source)


def _stage_lexical(stage: Path, manifest: Manifest, parent: tuple[Path, set[int]] | None = None) -> None:
    """The staged version's lexical index, when its manifest asks for one, built from the staged store (a
    compacted or grown version indexes its writes too); ValueError for a lexical default mode without one.
    `parent`: a parent version's folder and the FAISS ids written since, whose other documents' analysed terms are
    taken from it (`lexical.build_lexical`)."""
    if manifest.lexical is None:
        if manifest.default_mode in ("lexical", "hybrid"):
            raise ValueError(f"--default-mode {manifest.default_mode} needs a lexical index (drop --no-lexical)")
        return
    store = Store(stage / STORE)
    try:
        with storage_errors(stage / LEXICAL_DIR, "writing the lexical index"):
            manifest.lexical = build_lexical(stage, store.iter_texts(), manifest.lexical, n_docs=store.count(),
                                             unit="documents" if manifest.chunking() is None else "passages",
                                             parent=parent)
    finally:
        store.close()
    manifest.build_seconds.lexical_s = manifest.lexical.seconds


def save_and_evaluate(stage: Path, manifest: Manifest, t_start: float, *, evaluate_it: bool,
                      threads: int | None, target_recall: float | None = None,
                      probe_maker: Callable[[IndexVersion], Probes] | None = None, report_after: bool = False,
                      lexical_parent: tuple[Path, set[int]] | None = None) -> None:
    """Write the manifest of a staged version, calibrate its search parameter (IVF's nprobe, HNSW's ef_search)
    when asked, then evaluate it there — before it can become current, so a swap gate can compare its MRR@10
    with the served one's.

    `target_recall` None keeps the manifest's parameters, unless the manifest already carries a calibration (a
    version grown by `--add` or compacted from a calibrated one): that target is met again on the new vectors.
    `probe_maker` gives the query-like probes to calibrate on (kept in the version as `PROBES_FILE`); None: those
    in `stage` (a version grown from a calibrated one), else the version's own documents.
    `report_after`: measure only the gate's figure here, and leave the report's evaluations pending, for
    `indexer.report.run_report` once the version is published. `lexical_parent`: `_stage_lexical`'s `parent`."""
    _stage_lexical(stage, manifest, lexical_parent)
    calibration = manifest.index.nprobe_calibration or manifest.index.calibration
    if target_recall is None and calibration is not None:
        target_recall = calibration.target_recall
    manifest.build_seconds.total_s = time.perf_counter() - t_start
    manifest.save(stage)
    if target_recall is None and not evaluate_it:
        return
    opened = IndexVersion(stage)
    try:
        if target_recall is not None and opened.ann.knob() is not None:
            t0 = time.perf_counter()
            if probe_maker is not None:
                probes = probe_maker(opened)
                save_probes(stage, probes)
            else:  # --add, compact: the probes the version grown from was calibrated on, when it kept them
                probes = load_probes(stage, calibration.probes if calibration is not None else None)
            with Working(f"calibrating the {opened.kind} index for recall@10 >= {target_recall}", logger=log):
                cal = calibrate_index(opened.ann, target_recall, probes=None if probes is None else
                                      (probes.vectors, probes.self_ids, probes.info))
            cal.seconds = round(time.perf_counter() - t0, 3)  # encoding the probes included
            manifest.index.set_calibration(opened.ann.params.model_copy(), cal)  # in the kind's own field
            manifest.build_seconds.calibrate_s = cal.seconds
            manifest.build_seconds.total_s = time.perf_counter() - t_start
            manifest.save(stage)
        elif target_recall is not None:
            log.info("a %s index searches exactly: nothing to calibrate for --target-recall", opened.kind)
        if evaluate_it:
            what = "the gate's evaluation (dense MRR@10)" if report_after else "evaluating every search mode"
            with Working(f"{what} on the version's queries", logger=log) as step:
                _evaluate(opened, manifest, threads, report_after)
            manifest.build_seconds.evaluate_s = round(step.elapsed, 3)
            manifest.build_seconds.total_s = time.perf_counter() - t_start  # "built … in" counts every stage
            manifest.save(stage)
    finally:
        opened.close()


def _evaluate(opened: IndexVersion, manifest: Manifest, threads: int | None, report_after: bool) -> None:
    if report_after:  # the gate now, the report once the version is served (`indexer.report`)
        manifest.gate = gate_figures(opened, threads=threads)
        manifest.report = pending_report(opened)
    else:  # every mode the version serves; `eval` stays dense's (what a swap gate compares)
        manifest.eval_modes = evaluate_modes(opened, threads=threads)
        manifest.eval = manifest.eval_modes["dense"]
