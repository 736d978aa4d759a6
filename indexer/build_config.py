"""What one `indexer build` is asked for (`BuildConfig`), and the index kind and parameters that asks for at a
given number of vectors (`index_params`).

Shared by every build path — the Quora build (`indexer.build`), any other corpus (`indexer.ingest`) and the Ray
build (`indexer.ray_build`) — so none of them imports another for its configuration.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path

from indexer.calibrate import calibration_target
from indexer.quora import Protocol
from indexer.runtime.ann import AUTO, AUTO_FLAT_BELOW, DEFAULT_KIND, KIND_SPECS, KindParams, choose_kind, param_default
from indexer.runtime.lexical import lexical_info
from indexer.runtime.manifest import LexicalInfo, SearchMode

log = logging.getLogger(__name__)


@dataclass
class BuildConfig:
    model_dir: Path
    data: str
    root: Path
    protocol: Protocol | None = None  # Quora TSV only; None: "paper"
    rows: int | None = None
    # auto or a kind of `ann.KIND_SPECS` (`ann.choose_kind`; auto with a kind's own options given: that kind). The
    # CLI defaults to auto; here `ann.DEFAULT_KIND` (IVF), what every programmatic caller (benches, the Ray
    # equality checks) was written against.
    index: str = DEFAULT_KIND
    nlist: int | None = None  # IVF; None: by size (`faiss.training.auto_nlist`)
    nprobe: int | None = None  # IVF; given: no calibration (`calibration_target`); None: calibrated
    # An ivf/hnsw build calibrates its search parameter on query-like probes (`indexer.calibrate`,
    # `indexer.probes`) to this share of exact search's top 10 (None: DEFAULT_TARGET_RECALL), unless `calibrate`
    # is False or the kind's parameter (nprobe, ef_search) is given.
    target_recall: float | None = None
    calibrate: bool = True
    probes: str = "auto"  # auto | queries | spans (`indexer.probes`)
    codec: str | None = None  # codes in the IVF lists: "SQfp16", "SQ8" or "Flat" (float32); None: DEFAULT_CODEC
    # bytes the IVF vectors may take (codes, ids, quantizer): the codec is the most precise that fits
    # (`faiss.training.codec_for_budget`); None: DEFAULT_CODEC. Not with `codec`.
    memory_budget: int | None = None
    hnsw_m: int = param_default("m")
    ef_construction: int = param_default("ef_construction")
    ef_search: int | None = None  # HNSW; given: no calibration; None: calibrated (64 with --no-calibrate)
    # the search parameters of the other kinds (`ann.KIND_SPECS`), by name (`indexer build --<knob>`); given: no
    # calibration
    eval_search_params: dict[str, int] = field(default_factory=dict)
    batch_size: int | None = None  # texts per ONNX run (default: the encoder's corpus_batch_size)
    threads: int | None = None
    keep: int = 5
    evaluate: bool = True
    # True (`indexer build`): measure only the gate's figure before publishing, the report after
    # (`indexer.report`); False: every evaluation before the version can become current
    report_after: bool = False
    seed: int = 1234
    # Any other corpus (see indexer.corpus); None: the format's defaults
    id_field: str | None = None
    text_field: str | None = None
    title_field: str | None = None
    metadata_fields: list[str] | None = None
    vector_field: str | None = None  # the rows' vectors (None: a field named "vector" when the corpus has one)
    follow_symlinks: bool = False  # a folder of files: follow symlinks out of it (`indexer.folder_walk`)
    queries: Path | None = None  # evaluation queries and their qrels (a BEIR folder's are found by themselves)
    qrels: Path | None = None
    # the lexical (BM25) index built beside the vectors (`indexer.runtime.lexical`); lexical False: none
    lexical: bool = True
    lexical_stemmer: str = "english"
    lexical_stopwords: str = "english"
    bm25_k1: float = 0.9
    bm25_b: float = 0.4
    lexical_engine: str = "auto"  # a name of `lexical.ENGINES`, or auto: chosen by corpus size (`choose_engine`)
    default_mode: SearchMode | None = None  # None: hybrid with a lexical index, else dense
    # passages (`indexer.chunking`): tokens per passage, "auto" (by the corpus's lengths: the default) or "off"
    # (None too: whole documents); overlap None: an eighth of the chunk
    chunk: int | str | None = "auto"
    overlap: int | None = None

    def lexical_info(self) -> LexicalInfo | None:
        """The lexical index to build (settings checked: LexicalError names what is wrong), None for none."""
        if not self.lexical:
            if self.default_mode in ("lexical", "hybrid"):
                raise ValueError(f"--default-mode {self.default_mode} needs a lexical index (drop --no-lexical)")
            return None
        return lexical_info(self.lexical_stemmer, self.lexical_stopwords, self.bm25_k1, self.bm25_b,
                            engine=self.lexical_engine)

    def corpus_options(self) -> list[str]:
        """The options that only a non-Quora corpus takes, as the user set them."""
        named = {"--id-field": self.id_field, "--text-field": self.text_field, "--title-field": self.title_field,
                 "--metadata-fields": self.metadata_fields, "--vector-field": self.vector_field,
                 "--queries": self.queries, "--qrels": self.qrels, "--overlap": self.overlap,
                 "--follow-symlinks": self.follow_symlinks or None,
                 "--chunk": None if self.chunk in ("auto", "off") else self.chunk}  # auto: off on Quora
        return [k for k, v in named.items() if v is not None]

    def target_for(self, kind: str) -> float | None:
        """The recall target a new `kind` index of this build calibrates to (None: fixed parameters)."""
        return calibration_target(kind, calibrate=self.calibrate, target_recall=self.target_recall,
                                  given={"nprobe": self.nprobe, "ef_search": self.ef_search, **self.eval_search_params})


def index_params(cfg: BuildConfig, n_vectors: int, dim: int = 384) -> KindParams:
    """The kind `cfg.index` asks for at this many vectors (`auto`: `ann.choose_kind`, but the kind whose own
    options are given when some are, `KindSpec.options`: whoever sets --nlist means an IVF index), with its
    parameters (`AnnIndex.params_for`)."""
    options = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    if cfg.codec is not None and cfg.memory_budget is not None:
        raise ValueError("--codec and --memory-budget both choose the codec: give one")
    claimed = [(spec, [_flag(o) for o in spec.options if options.get(o) is not None]) for spec in KIND_SPECS.values()]
    claimed = [(spec, flags) for spec, flags in claimed if flags]
    for spec, flags in claimed:
        if cfg.index not in (AUTO, spec.name):
            raise ValueError(f"{', '.join(flags)}: {spec.label} options, not for --index {cfg.index}")
    kind = claimed[0][0].name if cfg.index == AUTO and claimed else choose_kind(cfg.index, n_vectors)
    if cfg.index != kind:
        why = (f"{', '.join(claimed[0][1])} given" if claimed else
               f"exact search below {AUTO_FLAT_BELOW:,} vectors: under 1 ms of CPU per query, and exact answers")
        log.info("--index %s: %s for %d vectors (%s)", cfg.index, kind, n_vectors, why)
    return KIND_SPECS[kind].implementation().params_for(options, n_vectors, dim)


def _flag(option: str) -> str:
    return "--" + option.replace("_", "-")
