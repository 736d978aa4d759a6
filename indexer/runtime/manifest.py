"""`manifest.json`: what an index version was built from and how well it retrieves."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, SerializeAsAny, model_validator

from indexer.runtime.ann import KIND_SPECS, KindParams, first_manifest_params, parse_params
from indexer.runtime.integrity import MANIFEST_CHECKSUM_FORMAT, write_manifest
from indexer.runtime.logs import one_line

MANIFEST = "manifest.json"
FORMAT_VERSION = MANIFEST_CHECKSUM_FORMAT  # 2: the manifest carries a checksum of its own (`integrity`)


class ManifestError(ValueError):
    """A manifest is missing or does not validate."""


class ModelInfo(BaseModel):
    dir: str
    onnx_sha256: str
    pooling: str
    dim: int
    max_length: int
    source: str


class ShardInfo(BaseModel):
    file: str  # relative to the version folder, e.g. "shards/shard-00000.faiss"
    ntotal: int


class ProbeInfo(BaseModel):
    """The probes a calibration searched (`indexer.probes`): held-apart queries, the evaluation queries' text
    (`sees_eval_queries`: the figures are then measured at a setting chosen on them), or sampled spans."""

    source: str  # held_apart_queries | eval_queries_text | document_spans
    detail: str  # where they came from, e.g. "queries.jsonl: 809 queries not judged by qrels/test.tsv"
    n_probes: int
    n_available: int
    seed: int
    sees_eval_queries: bool


class ProbeRecall(BaseModel):
    nprobe: int
    recall_at_10: float  # overlap of the IVF top 10 with the exact top 10 on the calibration sample


class NprobeCalibration(BaseModel):
    """How `nprobe` was chosen by `indexer build --target-recall`: the fewest lists whose top 10 overlaps exact
    search's by at least `target_recall` on a seeded sample of the version's own documents used as queries (each
    query's own id excluded). Label-free, so it never reads an evaluation set."""

    target_recall: float
    nprobe: int  # what was chosen (also `IndexInfo.nprobe`)
    recall_at_10: float  # what it reaches on the sample
    reached: bool  # False: even every list misses the target (ties in the exact top 10); nprobe is then nlist
    sample_queries: int
    seed: int
    measured: list[ProbeRecall]  # every nprobe the search tried, ascending
    seconds: float
    probes: ProbeInfo | None = None  # None: the version's own documents as queries (the first method)


class KnobRecall(BaseModel):
    value: int
    recall_at_10: float


class KnobCalibration(BaseModel):
    """`--target-recall` for a kind other than IVF (HNSW's ef_search), measured like `NprobeCalibration`."""

    knob: str
    target_recall: float
    value: int
    recall_at_10: float
    reached: bool
    sample_queries: int
    seed: int
    measured: list[KnobRecall]
    seconds: float
    probes: ProbeInfo | None = None  # None: the version's own documents as queries (the first method)


class IndexInfo(BaseModel):
    factory: str  # the faiss.index_factory string, e.g. "IVF1024,Flat" ("IDMap2,Flat", "IDMap2,HNSW32")
    metric: str = "inner_product"
    # IVF only (None for other kinds: `KindSpec.manifest_fields`), kept beside `params` so that readers of the
    # first manifests still read IVF versions; `params` is what Strata reads.
    nlist: int | None = None
    nlist_requested: int | None = None
    nprobe: int | None = None
    ntotal: int
    # The index kind and its typed build/search parameters (`indexer.runtime.ann`). Manifests written before
    # there were kinds have none: they are IVF, and `params` is read from nlist/nprobe/factory.
    params: SerializeAsAny[KindParams]  # the model of its kind (`ann.parse_params`)
    calibration: KnobCalibration | None = None  # `--target-recall` of a kind whose calibration_field it is
    # `indexer build --add` grows an index without retraining its coarse quantizer; these say how far it has
    # drifted from what the quantizer was trained on (None: trained on all `ntotal`, the usual full build).
    trained_ntotal: int | None = None
    added_since_training: int = 0
    # Kept as N shard files sharing one trained coarse quantizer (`indexer build --engine ray --shards N`);
    # empty: one `index.faiss`.
    shards: list[ShardInfo] = []
    # None: nprobe was given (`--nprobe`, default 20); else how `--target-recall` chose it. Builds that grow or
    # compact a calibrated version calibrate again with the same target.
    nprobe_calibration: NprobeCalibration | None = None

    @model_validator(mode="before")
    @classmethod
    def _params_of_its_kind(cls, data: Any) -> Any:
        """`params` as its kind's model (`ann.parse_params`); a manifest from before kinds has none: nlist/nprobe."""
        if isinstance(data, dict) and data.get("params") is None and data.get("nlist") is not None:
            data = {**data, "params": first_manifest_params(data)}
        return {**data, "params": parse_params(data["params"])} if isinstance(data, dict) and data.get("params") \
            is not None else data

    @property
    def kind(self) -> str:
        return self.params.kind

    def set_nprobe(self, nprobe: int) -> None:  # an IVF version's default nprobe, in `params` and the old field
        self.params.nprobe = nprobe  # type: ignore[attr-defined]
        self.set_calibration(self.params, getattr(self, KIND_SPECS[self.kind].calibration_field))

    def set_calibration(self, params: KindParams, calibration: Any) -> None:
        """A `--target-recall` result: the parameters, with the fields the kind keeps beside them (IVF's nprobe), and
        the record, in the kind's field (`KindSpec.manifest_fields`, `calibration_field`)."""
        spec, self.params = KIND_SPECS[self.kind], params
        for name, value in {**spec.manifest_fields(params), spec.calibration_field: calibration}.items():
            setattr(self, name, value)

    @classmethod
    def for_params(cls, params: KindParams, ntotal: int, **extra: Any) -> IndexInfo:
        """The index section of a new version of `params.kind` (its factory string: `ann.KIND_SPECS`)."""
        spec = KIND_SPECS[params.kind]  # with the fields the kind keeps beside `params` (IVF's first manifests')
        return cls(factory=spec.factory(params), ntotal=ntotal, params=params, **spec.manifest_fields(params), **extra)


class CorpusFieldsInfo(BaseModel):
    id: str
    text: str
    title: str | None = None  # joined to the text as BEIR does: (title + " " + text).strip()
    metadata: list[str] | None = None  # None: every field other than id and text


class SkippedEntry(BaseModel):
    path: str  # relative to the corpus folder
    reason: str


class DataInfo(BaseModel):
    source: str
    protocol: str
    rows_read: int
    skipped_empty_texts: int
    n_docs: int
    n_queries: int
    # Corpus builds (`--data` JSONL, CSV/TSV, Parquet, BEIR); the defaults describe a Quora build.
    format: str | None = None  # jsonl, csv, tsv, parquet, beir or files (None: the Quora TSV)
    fields: CorpusFieldsInfo | None = None
    skipped_files: int = 0  # a folder's entries left out or files that could not be read (JSONL/Parquet: others)
    skipped: list[SkippedEntry] = []  # each of them with its reason (the first 10,000)
    read_in_part: list[SkippedEntry] = []  # format "files": files read in part, with what was kept
    texts_cut: int = 0  # documents whose text was cut at the per-document limit (docs/own-corpus.md#limits)
    passages_cut: int = 0  # documents whose passages past the per-document limit were dropped
    duplicate_ids: int = 0  # rows whose id an earlier row had: the later row replaced it (an upsert)
    metadata_schema: dict[str, str] = {}  # field → int, float, str, bool, json, or a union such as "int|str"
    eval_source: str | None = None  # the queries and qrels files of the stored evaluation set
    eval_queries_without_relevant: int = 0  # queries whose judgments hold no grade > 0 (not evaluated)
    eval_judged_docs_missing: int = 0  # judged documents not in the corpus (they stay in recall denominators)
    vectors: Literal["encoded", "brought"] = "encoded"  # brought: the corpus's vector column, not encoded


class Timings(BaseModel):
    load_s: float = 0.0
    encode_docs_s: float = 0.0
    encode_queries_s: float = 0.0
    train_s: float = 0.0
    add_s: float = 0.0
    calibrate_s: float = 0.0
    lexical_s: float = 0.0
    evaluate_s: float = 0.0  # the per-mode evaluation before the version becomes current
    total_s: float = 0.0

    def breakdown(self) -> str:
        """Every stage's share of `total_s`, for the "built … in" line."""
        parts = [("load", self.load_s), ("encode", self.encode_docs_s), ("queries", self.encode_queries_s),
                 ("index", self.train_s + self.add_s), ("BM25", self.lexical_s), ("calibrate", self.calibrate_s),
                 ("evaluate", self.evaluate_s)]
        shown = [f"{name} {s:.1f}s" for name, s in parts if s >= 0.05]
        other = self.total_s - sum(s for _, s in parts)
        if other >= 0.05:
            shown.append(f"other {other:.1f}s")
        return " + ".join(shown)


class ActorThroughput(BaseModel):
    actor: str  # node ip:pid of one encoding actor (a restarted actor is a new entry)
    vectors: int
    busy_s: float
    vectors_per_s: float


class DistributedInfo(BaseModel):
    engine: str = "ray"
    address: str
    workers: int
    actors: list[ActorThroughput]
    embed_wall_s: float


class EvalFigures(BaseModel):
    mrr_at_10: float
    recall_at_10: float
    exact_mrr_at_10: float
    ann_recall_at_10: float  # overlap of the IVF top 10 with the exact top 10
    # Exact search is measured on a seeded sample of queries when queries × documents exceeds the evaluation's
    # budget (the full protocol): how many, and the index's own MRR@10 on that sample, for a paired comparison.
    # None: exact_mrr_at_10 and ann_recall_at_10 cover every query.
    exact_n_queries: int | None = None
    mrr_at_10_on_exact_sample: float | None = None
    avg_retrieval_ms: float
    batch_size: int
    threads: int
    nprobe: int | None  # IVF's lists probed (None for other kinds: see search_params)
    memory_gb: float
    n_queries: int
    n_docs: int
    measured_at: datetime
    # Graded evaluations (corpus builds with qrels, `indexer eval --queries/--qrels`); None in older manifests.
    ndcg_at_10: float | None = None
    recall_at_100: float | None = None
    exact_ndcg_at_10: float | None = None
    exact_recall_at_10: float | None = None
    exact_recall_at_100: float | None = None
    query_set: str | None = None  # the queries + qrels files measured (None: the version's Quora eval set)
    index_kind: str | None = None  # flat, ivf or hnsw (None in manifests from before there were kinds: ivf)
    search_params: dict[str, int] = {}  # what was searched with: {"nprobe": 20}, {"ef_search": 64}, {} for flat
    # The index's nDCG@10 minus exact search's on the same queries (those searched exactly): what the index
    # costs in quality. None: no graded judgments.
    ndcg_at_10_vs_exact: float | None = None
    # Which `/search` mode was measured (`indexer.eval_modes`): dense (the vector index; older manifests), lexical
    # (BM25: exact by construction, so its exact_* figures are its own and index vs exact is 0) or hybrid (the
    # index's and BM25's top 100 fused; exact_*: exact dense search fused with the same BM25 lists).
    mode: str = "dense"
    fusion: dict[str, str | float] | None = None  # hybrid: {"kind": "convex", "alpha": 0.5} | {"kind": "rrf", "k": 60}


class GateFigures(BaseModel):
    """The swap gate's figure, measured before the version is published (`indexer.report`): dense MRR@10 and
    Recall@10 (nDCG@10 for graded qrels) of the index at its search parameters over every evaluation query,
    searched in batches. The same ranking the report's dense evaluation scores, without its exact-search
    reference, its one-query-at-a-time timing and the other modes."""

    mrr_at_10: float
    recall_at_10: float
    ndcg_at_10: float | None = None
    n_queries: int
    search_params: dict[str, int] = {}
    seconds: float
    measured_at: datetime


ReportStateName = Literal["pending", "running", "done", "failed"]


class ReportState(BaseModel):
    """The evaluations that are reports, not gates (`indexer.report`): run after the version was published, their
    figures written into this manifest (`eval`, `eval_modes`) when done."""

    state: ReportStateName
    modes: list[str]  # the /search modes the report measures
    started_at: datetime | None = None
    finished_at: datetime | None = None
    seconds: float | None = None
    error: str | None = None  # failed: why (the version is served all the same)


class WritesInfo(BaseModel):
    """The write log folded into this version (`indexer compact`; see `indexer.runtime.writelog`). A version without
    it folded nothing: whoever serves it replays the whole log."""

    log_id: str  # which log: entries of another log (a log deleted and started anew) are all replayed
    folded_seq: int  # every entry with seq <= this is in the version; the API replays the ones after it
    entries: int  # log entries folded, along this version's chain of compactions
    upserted: int  # documents written (added or replaced) by them, net of later deletes of the same id
    deleted: int  # documents removed by them (deletes of ids the version held)


class FileChecksum(BaseModel):
    size: int
    digest: str


class Checksums(BaseModel):
    """Every file of the version but `manifest.json` (see `indexer.runtime.integrity`), verified before serving."""

    algorithm: str  # "xxh3-128"
    files: dict[str, FileChecksum]  # relative to the version folder: "index.faiss", "shards/shard-00000.faiss", ...


class LexicalInfo(BaseModel):
    """The version's lexical (BM25) index in `lexical/` (see `indexer.runtime.lexical`): the engine that opens it,
    how its text was analysed and scored. Queries are analysed with the same settings."""

    engine: str = "bm25s"  # a name of `lexical.ENGINES` (a manifest without one was built by bm25s)
    engine_version: str
    engine_reason: str | None = None  # why this engine (`--lexical-engine auto` chooses by size)
    stemmer: str = "english"  # a Snowball language (PyStemmer), or "none"
    stopwords: str = "english"  # Lucene's English list, or "none"
    k1: float = 0.9  # Anserini's BEIR settings
    b: float = 0.4
    token_pattern: str
    n_docs: int = 0
    vocabulary: int = 0
    seconds: float = 0.0


SearchMode = Literal["dense", "lexical", "hybrid"]


class PassagesInfo(BaseModel):
    """How the build split documents into passages (`indexer build --chunk`; `indexer.runtime.passages`), and
    why: writes to the version split the same way."""

    enabled: bool
    chunk: int | None = None  # tokens per passage (the encoder's, special tokens not counted); None when off
    overlap: int = 0
    reason: str = ""  # what decided it (the flag, or the corpus's lengths under --chunk auto)
    passages: int = 0  # rows indexed (0 when off)
    docs_split: int = 0  # documents cut into more than one passage


class Manifest(BaseModel):
    format_version: int = FORMAT_VERSION
    version: str
    created_at: datetime
    model: ModelInfo
    index: IndexInfo
    data: DataInfo
    build_seconds: Timings
    eval: EvalFigures | None = None
    parent_version: str | None = None  # the version an `--add` build extended
    distributed: DistributedInfo | None = None  # how a `--engine ray` build spread the encoding
    # `indexer eval --queries Q --qrels R` figures, by query set; `eval` stays the version's own eval set (the
    # one a swap gate compares across versions).
    query_evals: dict[str, EvalFigures] = {}
    writes: WritesInfo | None = None  # the write log folded in (`indexer compact`); None: none
    # Written when the version is sealed (`IndexRoot.staging`, after everything else); None: an older manifest,
    # served without verification (a log line says so).
    checksums: Checksums | None = None
    lexical: LexicalInfo | None = None  # None: no lexical index (dense only; older versions)
    # `/search`'s mode when a request names none (`indexer build --default-mode`); None: hybrid when the version
    # has a lexical index, else dense
    default_mode: SearchMode | None = None
    # Per served mode (dense, lexical, hybrid), the version's own eval set (`eval` stays the dense figures, which
    # gate swaps) and each `query_evals` set: what `indexer eval` and the build measured (`indexer.eval_modes`)
    eval_modes: dict[str, EvalFigures] = {}
    query_eval_modes: dict[str, dict[str, EvalFigures]] = {}
    # A build that published before its report (`indexer.report`): the gate's figure, measured before publishing,
    # and the report's state; None: evaluated before publishing (older builds, --add, compact, ray) or not at all
    gate: GateFigures | None = None
    report: ReportState | None = None
    passages: PassagesInfo | None = None  # None: a version built before passages (documents whole)

    def chunking(self) -> PassagesInfo | None:
        """The passages settings writes must follow; None: documents are indexed whole."""
        return self.passages if self.passages is not None and self.passages.enabled else None

    def gate_mrr_at_10(self) -> float | None:
        """Dense MRR@10 on the version's own evaluation set, what a swap gate compares: the full evaluation's,
        else the gate's (the same ranking, measured before publishing); None: not evaluated."""
        if self.eval is not None:
            return self.eval.mrr_at_10
        return self.gate.mrr_at_10 if self.gate is not None else None

    def search_mode(self) -> SearchMode:
        """The mode a `/search` without one runs on this version."""
        if self.default_mode is not None:
            return self.default_mode
        return "hybrid" if self.lexical is not None else "dense"

    @classmethod
    def load(cls, folder: Path, text: str | bytes | None = None) -> Manifest:  # text: its file, read by other means
        path = folder / MANIFEST
        try:
            return cls.model_validate_json(path.read_text() if text is None else text)
        except FileNotFoundError as exc:
            raise ManifestError(f"{path} is missing") from exc
        except ValueError as exc:  # a ValidationError too, in one line: pydantic's text spans several
            raise ManifestError(f"{path} is not a valid manifest: {one_line(exc)}") from exc

    def save(self, folder: Path) -> None:
        write_manifest(folder, self.model_dump(mode="json"))  # stamped with its own checksum (`integrity`)
