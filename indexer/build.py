"""`indexer build`: Quora TSV → ONNX vectors → a vector index (`--index auto|flat|ivf|hnsw`) (+ a BM25 lexical
index from the same store) → a new version folder, evaluated, then made current.
Any other corpus (JSONL, CSV/TSV, Parquet, BEIR) goes through `indexer.ingest` into the same kind of version.

Never touches the version being served: everything is written in a staging folder that is renamed into
`versions/` only when complete; `current` is switched afterwards in one atomic rename.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from indexer.build_config import BuildConfig
from indexer.chunking import check_chunking
from indexer.corpus import detect_format
from indexer.ingest import build_corpus, data_path, source_for
from indexer.probes import make_probes, quora_probe_candidates
from indexer.publish import publish
from indexer.quora import load_split
from indexer.runtime.encoder import OnnxEncoder
from indexer.runtime.faiss.devices import set_threads
from indexer.runtime.layout import IndexRoot, new_version_name
from indexer.runtime.manifest import DataInfo, LexicalInfo, Manifest, Timings
from indexer.runtime.storage import storage_errors
from indexer.runtime.store import STORE
from indexer.runtime.store_writer import write_store
from indexer.runtime.version import QUERY_VECTORS
from indexer.stage import build_version_index, model_info, save_and_evaluate

__all__ = ["BuildConfig", "build", "encode_reusing"]

log = logging.getLogger(__name__)


def encode_reusing(encoder: OnnxEncoder, texts: list[str], known_texts: list[str], known_vecs: np.ndarray,
                   batch_size: int | None = None) -> np.ndarray:
    """Vectors of `texts`, copied from `known_vecs` where the same text was encoded already and encoded otherwise.

    In the full protocol every evaluation query is also a document; in the paper protocol about a fifth are."""
    row_of = {t: i for i, t in enumerate(known_texts)}
    rows = np.fromiter((row_of.get(t, -1) for t in texts), dtype=np.int64, count=len(texts))
    del row_of
    out = np.empty((len(texts), known_vecs.shape[1]), dtype=np.float32)
    hit = rows >= 0
    out[hit] = known_vecs[rows[hit]]
    miss = np.flatnonzero(~hit)
    log.info("eval queries: %d share a document's text (vectors reused), %d to encode", int(hit.sum()), len(miss))
    if len(miss):
        out[miss] = encoder.encode([texts[i] for i in miss], batch_size, progress=True, desc="eval queries")
    return out


def build(cfg: BuildConfig) -> Manifest:
    root = IndexRoot(cfg.root)
    t_start = time.perf_counter()
    lexical = cfg.lexical_info()  # bad settings fail before any work
    with root.build_lock():
        root.remove_partial_builds()
        encoder = OnnxEncoder(cfg.model_dir, threads=cfg.threads, verify_sha256=True)
        set_threads(cfg.threads)

        path = data_path(cfg.data)
        check_chunking(cfg.chunk, cfg.overlap, encoder.meta.max_length)
        if detect_format(path) != "quora":
            if cfg.protocol is not None:
                raise ValueError(f"--protocol applies to the Quora question-pairs TSV; {path} is another corpus")
            manifest = build_corpus(cfg, root, encoder, source_for(cfg, path), t_start)
            publish(root, manifest, cfg.keep)
            log.info("built %s in %.1fs (%s): %d vectors, %s", manifest.version, manifest.build_seconds.total_s,
                     manifest.build_seconds.breakdown(), manifest.index.ntotal, manifest.index.factory)
            return manifest
        if cfg.corpus_options():
            raise ValueError(f"{', '.join(cfg.corpus_options())}: not for the Quora question-pairs TSV {path} "
                             f"(its fields and evaluation set are fixed by --protocol)")
        manifest = _build_quora(cfg, root, encoder, path, lexical, t_start)
        publish(root, manifest, cfg.keep)
    log.info("built %s in %.1fs (%s): %d vectors, %s", manifest.version, manifest.build_seconds.total_s,
             manifest.build_seconds.breakdown(), manifest.index.ntotal, manifest.index.factory)
    return manifest


def _build_quora(cfg: BuildConfig, root: IndexRoot, encoder: OnnxEncoder, path: Path, lexical: LexicalInfo | None,
                 t_start: float) -> Manifest:
    """Build a version of the Quora question-pairs TSV in a staging folder (renamed into `versions/` only when
    complete), evaluated on its protocol's queries; the caller makes it current."""
    t0 = time.perf_counter()
    split = load_split(path, cfg.protocol or "paper", cfg.rows)
    timings = Timings(load_s=time.perf_counter() - t0)

    version = new_version_name()
    with root.staging(version) as stage:
        t0 = time.perf_counter()
        doc_vecs = encoder.encode(split.corpus.texts, cfg.batch_size, progress=True, desc="documents")
        timings.encode_docs_s = time.perf_counter() - t0
        # evaluation reopens the written index: it is not held meanwhile (that would double the memory)
        index_info = build_version_index(cfg, doc_vecs, np.asarray(split.corpus.ids), stage, timings)

        ev = split.evalset
        t0 = time.perf_counter()
        qvecs = encode_reusing(encoder, ev.query_texts, split.corpus.texts, doc_vecs, cfg.batch_size)
        timings.encode_queries_s = time.perf_counter() - t0
        del doc_vecs
        np.save(stage / QUERY_VECTORS, qvecs)
        with storage_errors(stage / STORE, "writing the store"):
            write_store(stage / STORE, split.corpus.ids, split.corpus.texts, ev.query_ids, ev.query_texts,
                        ev.gold, {"source": split.source, "protocol": split.protocol})

        m = encoder.meta
        manifest = Manifest(
            version=version,
            created_at=datetime.now(timezone.utc),
            model=model_info(cfg.model_dir, m),
            index=index_info,
            data=DataInfo(source=split.source, protocol=split.protocol, rows_read=split.rows_read,
                          skipped_empty_texts=split.skipped_empty_texts, n_docs=len(split.corpus.texts),
                          n_queries=len(ev.query_texts)),
            build_seconds=timings,
            lexical=lexical, default_mode=cfg.default_mode,
        )
        candidates = quora_probe_candidates(split, cfg.probes)
        save_and_evaluate(stage, manifest, t_start, evaluate_it=cfg.evaluate and bool(ev.query_texts),
                          threads=cfg.threads, target_recall=cfg.target_for(index_info.kind),
                          probe_maker=lambda v: make_probes(candidates, encoder, v.store, split.corpus.ids,
                                                            cfg.batch_size), report_after=cfg.report_after)
    return manifest
