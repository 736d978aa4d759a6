"""`indexer build`: Quora TSV → ONNX vectors → a vector index (`--index auto|flat|ivf|hnsw`) (+ a BM25 lexical
index from the same store) → a new version folder, evaluated, then made current.
Any other corpus (JSONL, CSV/TSV, Parquet, BEIR) goes through `indexer.ingest` into the same kind of version.

Never touches the version being served: everything is written in a staging folder that is renamed into
`versions/` only when complete; `current` is switched afterwards in one atomic rename.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from indexer.calibrate import calibrate_index, calibration_target
from indexer.corpus import detect_format
from indexer.eval_modes import evaluate_modes
from indexer.ingest import build_corpus, data_path, source_for, warn_if_shrinking
from indexer.probes import Probes, load_probes, make_probes, quora_probe_candidates, save_probes
from indexer.quora import Protocol, load_split
from indexer.runtime.ann import AUTO, FlatParams, HnswParams, IvfParams, choose_kind
from indexer.runtime.encoder import EncoderMeta, OnnxEncoder
from indexer.runtime.faiss_index import (
    DEFAULT_CODEC,
    DEFAULT_NLIST,
    DEFAULT_NPROBE,
    INDEX_FILE,
    AnnIndex,
    build_index,
    clamp_nprobe,
    effective_nlist,
    set_threads,
)
from indexer.runtime.layout import IndexRoot, new_version_name
from indexer.runtime.lexical import build_lexical, lexical_info
from indexer.runtime.manifest import DataInfo, IndexInfo, LexicalInfo, Manifest, ModelInfo, SearchMode, Timings
from indexer.runtime.store import STORE, Store, write_store
from indexer.runtime.version import QUERY_VECTORS, IndexVersion

log = logging.getLogger(__name__)


@dataclass
class BuildConfig:
    model_dir: Path
    data: str
    root: Path
    protocol: Protocol | None = None  # Quora TSV only; None: "paper"
    rows: int | None = None
    # auto | flat | ivf | hnsw (`ann.choose_kind`; auto with nlist or nprobe given: ivf). The CLI defaults to auto;
    # here ivf, what every programmatic caller (benches, the Ray equality checks) was written against.
    index: str = "ivf"
    nlist: int | None = None  # IVF; None: DEFAULT_NLIST
    nprobe: int | None = None  # IVF; given: no calibration (`calibration_target`); None: calibrated
    # An ivf/hnsw build calibrates its search parameter on query-like probes (`indexer.calibrate`,
    # `indexer.probes`) to this share of exact search's top 10 (None: DEFAULT_TARGET_RECALL), unless `calibrate`
    # is False or the kind's parameter (nprobe, ef_search) is given.
    target_recall: float | None = None
    calibrate: bool = True
    probes: str = "auto"  # auto | queries | spans (`indexer.probes`)
    codec: str | None = None  # codes in the IVF lists: "SQfp16" or "Flat" (float32); None: DEFAULT_CODEC
    hnsw_m: int = HnswParams.model_fields["m"].default
    ef_construction: int = HnswParams.model_fields["ef_construction"].default
    ef_search: int | None = None  # HNSW; given: no calibration; None: calibrated (64 with --no-calibrate)
    batch_size: int | None = None  # texts per ONNX run (default: the encoder's corpus_batch_size)
    threads: int | None = None
    keep: int = 5
    evaluate: bool = True
    seed: int = 1234
    # Any other corpus (see indexer.corpus); None: the format's defaults
    id_field: str | None = None
    text_field: str | None = None
    title_field: str | None = None
    metadata_fields: list[str] | None = None
    queries: Path | None = None  # evaluation queries and their qrels (a BEIR folder's are found by themselves)
    qrels: Path | None = None
    # the lexical (BM25) index built beside the vectors (`indexer.runtime.lexical`); lexical False: none
    lexical: bool = True
    lexical_stemmer: str = "english"
    lexical_stopwords: str = "english"
    bm25_k1: float = 0.9
    bm25_b: float = 0.4
    default_mode: SearchMode | None = None  # None: hybrid with a lexical index, else dense

    def lexical_info(self) -> LexicalInfo | None:
        """The lexical index to build (settings checked: LexicalError names what is wrong), None for none."""
        if not self.lexical:
            if self.default_mode in ("lexical", "hybrid"):
                raise ValueError(f"--default-mode {self.default_mode} needs a lexical index (drop --no-lexical)")
            return None
        return lexical_info(self.lexical_stemmer, self.lexical_stopwords, self.bm25_k1, self.bm25_b)

    def corpus_options(self) -> list[str]:
        """The options that only a non-Quora corpus takes, as the user set them."""
        named = {"--id-field": self.id_field, "--text-field": self.text_field, "--title-field": self.title_field,
                 "--metadata-fields": self.metadata_fields, "--queries": self.queries, "--qrels": self.qrels}
        return [k for k, v in named.items() if v is not None]

    def target_for(self, kind: str) -> float | None:
        """The recall target a new `kind` index of this build calibrates to (None: fixed parameters)."""
        return calibration_target(kind, calibrate=self.calibrate, target_recall=self.target_recall,
                                  nprobe=self.nprobe, ef_search=self.ef_search)


def index_params(cfg: BuildConfig, n_vectors: int) -> FlatParams | IvfParams | HnswParams:
    """The kind `cfg.index` asks for at this many vectors (`auto`: `ann.choose_kind`, but ivf when --nlist,
    --nprobe or --codec is given: whoever sets them means an IVF index), with its parameters."""
    ivf_options = [name for name, value in (("--nlist", cfg.nlist), ("--nprobe", cfg.nprobe), ("--codec", cfg.codec))
                   if value is not None]
    if ivf_options and cfg.index not in (AUTO, "ivf"):
        raise ValueError(f"{', '.join(ivf_options)}: IVF options, not for --index {cfg.index}")
    kind = "ivf" if cfg.index == AUTO and ivf_options else choose_kind(cfg.index, n_vectors)
    if cfg.index != kind:
        log.info("--index %s: %s for %d vectors%s", cfg.index, kind, n_vectors,
                 f" ({', '.join(ivf_options)} given)" if ivf_options else "")
    if kind == "ivf":
        requested = cfg.nlist or DEFAULT_NLIST
        nlist = effective_nlist(n_vectors, requested)
        return IvfParams(nlist=nlist, nlist_requested=requested, codec=cfg.codec or DEFAULT_CODEC,
                         nprobe=clamp_nprobe(cfg.nprobe or DEFAULT_NPROBE, nlist))
    if kind == "hnsw":
        ef_search = cfg.ef_search or HnswParams.model_fields["ef_search"].default
        return HnswParams(m=cfg.hnsw_m, ef_construction=cfg.ef_construction, ef_search=ef_search)
    return FlatParams()


def build_version_index(cfg: BuildConfig, vectors: np.ndarray, ids: np.ndarray, stage: Path, timings: Timings
                        ) -> IndexInfo:
    """Build the index `cfg` asks for over `vectors`, write it into `stage`; returns the manifest's section."""
    params = index_params(cfg, len(vectors))
    log.info("building a %s index of %d vectors (%s)", params.kind, len(vectors), params.model_dump())
    index: AnnIndex
    index, timings.train_s, timings.add_s = build_index(params, vectors, ids, cfg.seed)
    index.save(stage / INDEX_FILE)
    return IndexInfo.for_params(index.params, index.ntotal)


def model_info(model_dir: Path, meta: EncoderMeta) -> ModelInfo:
    return ModelInfo(dir=str(Path(model_dir).resolve()), onnx_sha256=meta.onnx_sha256, pooling=meta.pooling,
                     dim=meta.dim, max_length=meta.max_length, source=meta.source)


def save_and_evaluate(stage: Path, manifest: Manifest, t_start: float, *, evaluate_it: bool,
                      threads: int | None, target_recall: float | None = None,
                      probe_maker: Callable[[IndexVersion], Probes] | None = None) -> None:
    """Write the manifest of a staged version, calibrate its search parameter (IVF's nprobe, HNSW's ef_search)
    when asked, then evaluate it there — before it can become current, so a swap gate can compare its MRR@10
    with the served one's.

    `target_recall` None keeps the manifest's parameters, unless the manifest already carries a calibration (a
    version grown by `--add` or compacted from a calibrated one): that target is met again on the new vectors.
    `probe_maker` gives the query-like probes to calibrate on (kept in the version as `PROBES_FILE`); None: those
    in `stage` (a version grown from a calibrated one), else the version's own documents."""
    if manifest.lexical is not None:  # from the staged store: a compacted or grown version indexes its writes too
        store = Store(stage / STORE)
        try:
            manifest.lexical = build_lexical(stage, store.all_texts(), manifest.lexical)
        finally:
            store.close()
        manifest.build_seconds.lexical_s = manifest.lexical.seconds
    elif manifest.default_mode in ("lexical", "hybrid"):
        raise ValueError(f"--default-mode {manifest.default_mode} needs a lexical index (drop --no-lexical)")
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
            cal = calibrate_index(opened.ann, target_recall, probes=None if probes is None else
                                  (probes.vectors, probes.self_ids, probes.info))
            cal.seconds = round(time.perf_counter() - t0, 3)  # encoding the probes included
            if opened.kind == "ivf":
                manifest.index.set_nprobe(cal.nprobe)
                manifest.index.nprobe_calibration = cal
            else:
                manifest.index.params = opened.ann.params.model_copy()
                manifest.index.calibration = cal
            manifest.build_seconds.calibrate_s = cal.seconds
            manifest.build_seconds.total_s = time.perf_counter() - t_start
            manifest.save(stage)
        elif target_recall is not None:
            log.info("a %s index searches exactly: nothing to calibrate for --target-recall", opened.kind)
        if evaluate_it:  # every mode the version serves; `eval` stays dense's (what a swap gate compares)
            manifest.eval_modes = evaluate_modes(opened, threads=threads)
            manifest.eval = manifest.eval_modes["dense"]
            manifest.save(stage)
    finally:
        opened.close()


def encode_reusing(encoder: OnnxEncoder, texts: list[str], known_texts: list[str], known_vecs: np.ndarray,
                   batch_size: int | None = None) -> np.ndarray:
    """Vectors of `texts`, copied from `known_vecs` where the same text was encoded already and encoded otherwise.

    In the full protocol every evaluation query is also a document (86,168 of them: 93 s of encoding saved on
    2 cores); in the paper protocol about a fifth are."""
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
        if detect_format(path) != "quora":
            if cfg.protocol is not None:
                raise ValueError(f"--protocol applies to the Quora question-pairs TSV; {path} is another corpus")
            manifest = build_corpus(cfg, root, encoder, source_for(cfg, path), t_start)
            warn_if_shrinking(root, manifest.index.ntotal)
            root.set_current(manifest.version)
            root.prune(cfg.keep)
            log.info("built %s in %.1fs: %d vectors, %s", manifest.version, manifest.build_seconds.total_s,
                     manifest.index.ntotal, manifest.index.factory)
            return manifest
        if cfg.corpus_options():
            raise ValueError(f"{', '.join(cfg.corpus_options())}: not for the Quora question-pairs TSV {path} "
                             f"(its fields and evaluation set are fixed by --protocol)")

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
                                                                cfg.batch_size))
        warn_if_shrinking(root, manifest.index.ntotal)
        root.set_current(version)
        root.prune(cfg.keep)
    log.info("built %s in %.1fs: %d vectors, %s", version, timings.total_s, manifest.index.ntotal,
             manifest.index.factory)
    return manifest
