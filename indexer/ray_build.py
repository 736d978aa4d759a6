"""`indexer build --engine ray`: the same build as `indexer.build`, with the encoding spread over a Ray cluster.

    corpus (Ray Dataset) --map_batches(EmbedBatches, actor pool)--> vectors/*.parquet (one file per block)
    --> coarse quantizer trained once on a sample (driver) --> N shard indexes filled by Ray tasks, each against
    that same quantizer --> index.faiss (N = 1) or shards/shard-*.faiss --> store, manifest, eval, `current`.

Ray Data retries a batch whose actor died (actor pools restart actors and retry their tasks); a retried block
rewrites the same Parquet file, and the build checks that every id arrives exactly once. Paths (model, index
root) must be visible to every node at the same place: a shared file system on a real cluster.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import ray
from ray.data import ActorPoolStrategy

from indexer.build_config import BuildConfig
from indexer.corpus import CorpusSource, detect_format
from indexer.evalset import LoadedEvalSet
from indexer.ingest import IngestResult, corpus_data_info, data_path, ingest_store, source_for
from indexer.probes import corpus_probe_candidates, make_probes, quora_probe_candidates
from indexer.publish import publish
from indexer.ray_embed import EmbedBatches, column_vectors
from indexer.ray_input import CorpusInput, read_corpus, store_corpus
from indexer.runtime.ann import AUTO, KIND_SPECS, SHARDED_KIND, KindParams
from indexer.runtime.encoder import OnnxEncoder
from indexer.runtime.faiss.devices import set_threads
from indexer.runtime.faiss.files import INDEX_FILE, deserialize, serialize, write_index
from indexer.runtime.faiss.quantizer import quantizer_for
from indexer.runtime.faiss.training import (
    DEFAULT_CODEC,
    DEFAULT_NPROBE,
    auto_nlist,
    clamp_nprobe,
    effective_nlist,
)
from indexer.runtime.ids import shard_of
from indexer.runtime.layout import IndexRoot, new_version_name
from indexer.runtime.manifest import (
    ActorThroughput,
    DataInfo,
    DistributedInfo,
    IndexInfo,
    Manifest,
    ShardInfo,
    Timings,
)
from indexer.runtime.store import STORE
from indexer.runtime.store_writer import write_store
from indexer.runtime.version import QUERY_VECTORS
from indexer.shards import SHARDS_DIR, shard_file, training_positions
from indexer.stage import model_info, save_and_evaluate

log = logging.getLogger(__name__)

VECTORS_DIR = "vectors"


class DistributedBuildError(RuntimeError):
    """The distributed build produced an inconsistent result (ids lost or duplicated)."""


@dataclass
class RayOptions:
    address: str | None = None  # None: $RAY_ADDRESS, else a local Ray instance sized to this machine
    workers: int | None = None  # encoding actors (default: the cluster's CPUs / threads per actor)
    threads_per_worker: int = 1  # ONNX Runtime threads (and CPUs reserved) per actor
    gpus_per_worker: float = 0.0  # > 0: actors get a GPU and the encoder uses the CUDA provider
    shards: int = 1  # 1: one merged index.faiss; N: N shard files with one shared quantizer
    block_rows: int = 1024  # rows per Ray Data block / actor call
    keep_vectors: bool = False  # keep vectors/*.parquet in the version (else deleted once indexed)


def connect(address: str | None) -> str:
    """Join the cluster at `address` (or $RAY_ADDRESS), or start a local instance; reuse an existing one."""
    if not ray.is_initialized():
        address = address or os.environ.get("RAY_ADDRESS") or None
        ray.init(address=address, log_to_driver=False)
    return address or os.environ.get("RAY_ADDRESS") or "local"


def _scan(files: list[Path]) -> tuple[np.ndarray, np.ndarray, list[ActorThroughput]]:
    """(pos, ids) of every vector written, and per-actor throughput, reading only the small columns."""
    pos, ids = [], []
    count: dict[str, int] = defaultdict(int)
    busy: dict[str, float] = defaultdict(float)
    for f in files:
        t = pq.read_table(f, columns=["pos", "id", "actor", "encode_s"])
        pos.append(t.column("pos").to_numpy())
        ids.append(t.column("id").to_numpy())
        for actor, secs in zip(t.column("actor").to_pylist(), t.column("encode_s").to_numpy(), strict=True):
            count[actor] += 1
            busy[actor] += float(secs)
    stats = [ActorThroughput(actor=a, vectors=n, busy_s=round(busy[a], 3),
                             vectors_per_s=round(n / busy[a], 2) if busy[a] else 0.0) for a, n in sorted(count.items())]
    empty = np.zeros(0, dtype=np.int64)
    return (np.concatenate(pos) if pos else empty), (np.concatenate(ids) if ids else empty), stats


def _vectors_at(files: list[Path], wanted_pos: np.ndarray, dim: int) -> np.ndarray:
    """Vectors whose `pos` is in `wanted_pos` (sorted), in that order."""
    got_pos, got_vecs = [], []
    for f in files:
        t = pq.read_table(f, columns=["pos", "vector"])
        p = t.column("pos").to_numpy()
        keep = np.isin(p, wanted_pos)
        if keep.any():
            got_pos.append(p[keep])
            got_vecs.append(column_vectors(t.column("vector"), dim)[keep])
    p, v = np.concatenate(got_pos), np.concatenate(got_vecs)
    return v[np.argsort(p, kind="stable")]


@ray.remote(num_cpus=1)
def fill_shard(trained: bytes, files: list[str], shard: int, n_shards: int, dim: int, out: str) -> int:
    """Add this shard's vectors (ids with `id % n_shards == shard`), in corpus order, to a copy of the trained
    empty index and write it to `out`. Runs as a Ray task: a failed one is retried and rewrites `out`."""
    index = deserialize(trained)
    pos, ids, vecs = [], [], []
    for f in files:
        t = pq.read_table(f, columns=["pos", "id", "vector"])
        i = t.column("id").to_numpy()
        mine = shard_of(i, n_shards) == shard
        pos.append(t.column("pos").to_numpy()[mine])
        ids.append(i[mine])
        vecs.append(column_vectors(t.column("vector"), dim)[mine])
    order = np.argsort(np.concatenate(pos), kind="stable")  # the single-machine build's add order
    index.add_with_ids(np.ascontiguousarray(np.concatenate(vecs)[order]), np.concatenate(ids)[order])
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    write_index(index, out + ".tmp")
    os.replace(out + ".tmp", out)
    return int(index.ntotal)


def embed(corpus_ds: object, cfg: BuildConfig, opts: RayOptions, workers: int, out_dir: Path) -> None:
    ds = corpus_ds.map_batches(  # type: ignore[attr-defined]
        EmbedBatches,
        fn_constructor_kwargs={"model_dir": str(Path(cfg.model_dir).resolve()),
                               "threads": opts.threads_per_worker, "batch_size": cfg.batch_size},
        batch_size=opts.block_rows, batch_format="pyarrow", compute=ActorPoolStrategy(size=workers),
        num_cpus=opts.threads_per_worker, num_gpus=opts.gpus_per_worker or None,
    )
    # Writes take no CPU slot: they stream each encoded block to its file while the actors hold the CPUs
    # (with a CPU each they would wait for the whole encoding to finish).
    ds.write_parquet(str(out_dir), ray_remote_args={"num_cpus": 0})


def check_ray_kind(index: str) -> None:
    """The Ray build trains one IVF quantizer and fills shards sharing it (what sharded serving merges), so it
    builds IVF only: `--index auto` means ivf here, flat and hnsw are refused before any work."""
    if index not in (AUTO, SHARDED_KIND):  # `KindSpec.shards`
        raise ValueError(f"--engine ray builds IVF indexes only (its shards share one trained quantizer); "
                         f"--index {index} needs the local build (--engine local)")


@dataclass
class _RayBuild:
    """One Ray build's state, handed from stage to stage inside the staged version folder."""

    cfg: BuildConfig
    opts: RayOptions
    address: str
    workers: int
    stage: Path  # the staged version folder
    corpus: CorpusInput
    timings: Timings
    other: _OtherCorpus | None = None  # not the Quora TSV: what its single-machine read left
    files: list[Path] = field(default_factory=list)  # vectors/*.parquet
    actors: list[ActorThroughput] = field(default_factory=list)
    embed_wall: float = 0.0
    pos: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # each vector's corpus position
    n: int = 0
    nlist: int = 0
    nprobe: int = 0
    counts: list[int] = field(default_factory=list)  # vectors per shard


@dataclass
class _OtherCorpus:
    """A corpus other than the Quora TSV, read by the driver into the staged store (`indexer.ingest`)."""

    source: CorpusSource
    ingested: IngestResult
    schema: dict[str, str]
    loaded: LoadedEvalSet | None


def build_on_ray(cfg: BuildConfig, opts: RayOptions) -> Manifest:
    """Read (Quora: into a Ray Dataset; another corpus: into the staged store) → encode on the actors → train the
    quantizer once and fill the shards → store, manifest, calibration and evaluation → publish."""
    check_ray_kind(cfg.index)
    root = IndexRoot(cfg.root)
    t_start = time.perf_counter()
    cfg.lexical_info()  # bad lexical settings fail before Ray starts
    with root.build_lock():
        root.remove_partial_builds()
        address = connect(opts.address)
        cpus = int(ray.cluster_resources().get("CPU", 1))
        workers = opts.workers or max(1, cpus // opts.threads_per_worker)
        set_threads(cfg.threads)
        t0 = time.perf_counter()
        path = data_path(cfg.data)
        quora = _read_quora(cfg, opts, path, workers)
        version = new_version_name()
        with root.staging(version) as stage:
            other = None
            if quora is None:  # read by the driver into the staged store, through the single-machine reader
                source = source_for(cfg, path)
                ingested, schema, loaded = ingest_store(source, stage, None, batch_size=cfg.batch_size,
                                                        limit=cfg.rows)
                other = _OtherCorpus(source, ingested, schema, loaded)
                quora = store_corpus(stage / STORE, str(path), workers, opts.block_rows)
            run = _RayBuild(cfg, opts, address, workers, stage, quora, Timings(load_s=time.perf_counter() - t0),
                            other)
            _encode(run)
            encoder = OnnxEncoder(cfg.model_dir, threads=cfg.threads, verify_sha256=True)  # the driver's
            _index(run, encoder.dim)
            manifest = _manifest(run, version, encoder, _evaluation_set(run, encoder))
            _calibrate_and_save(run, manifest, encoder, t_start)
        publish(root, manifest, cfg.keep)
    log.info("built %s on Ray in %.1fs: %d vectors, %s%s", version, run.timings.total_s, run.n,
             manifest.index.factory, f", {opts.shards} shards in {SHARDS_DIR}/" if opts.shards > 1 else "")
    return manifest


def _read_quora(cfg: BuildConfig, opts: RayOptions, path: Path, workers: int) -> CorpusInput | None:
    """The Quora TSV read into a Ray Dataset (before the version is staged); None for another corpus."""
    if detect_format(path) == "quora":
        if cfg.corpus_options():
            raise ValueError(f"{', '.join(cfg.corpus_options())}: not for the Quora question-pairs TSV {path}")
        return read_corpus(path, cfg.protocol or "paper", cfg.rows, workers, opts.block_rows)
    if cfg.protocol is not None:
        raise ValueError(f"--protocol applies to the Quora question-pairs TSV; {path} is another corpus")
    return None


def _encode(run: _RayBuild) -> None:
    """The corpus encoded by the actor pool into vectors/*.parquet; every id checked to be there exactly once."""
    vec_dir = run.stage / VECTORS_DIR
    t0 = time.perf_counter()
    log.info("encoding on Ray (%s): %d actors x %d thread(s)", run.address, run.workers, run.opts.threads_per_worker)
    embed(run.corpus.dataset, run.cfg, run.opts, run.workers, vec_dir)
    run.timings.encode_docs_s = run.embed_wall = time.perf_counter() - t0
    run.files = sorted(vec_dir.glob("*.parquet"))
    pos, ids, run.actors = _scan(run.files)
    _check_complete(pos, ids, run.corpus, None if run.other is None else run.other.ingested.n_docs)
    run.n = len(ids)
    run.pos = pos


def _index(run: _RayBuild, dim: int) -> None:
    """The IVF quantizer trained once on the driver from a sample, then the shards filled by Ray tasks against it."""
    cfg, opts, n, stage = run.cfg, run.opts, run.n, run.stage
    run.nlist = effective_nlist(n, cfg.nlist or auto_nlist(n))
    run.nprobe = clamp_nprobe(cfg.nprobe or DEFAULT_NPROBE, run.nlist)
    t0 = time.perf_counter()
    sample = _vectors_at(run.files, training_positions(run.pos, run.nlist, cfg.seed), dim)
    log.info("training IVF%d once on %d sampled vectors", run.nlist, len(sample))
    trained = KIND_SPECS[SHARDED_KIND].implementation().train_empty(sample, _params(run), cfg.seed)
    del sample
    run.timings.train_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    blob = ray.put(serialize(trained))
    outs = [str(stage / INDEX_FILE)] if opts.shards == 1 else [str(stage / shard_file(s)) for s in range(opts.shards)]
    run.counts = ray.get([fill_shard.remote(blob, [str(f) for f in run.files], s, opts.shards, dim, out)
                          for s, out in enumerate(outs)])
    run.timings.add_s = time.perf_counter() - t0
    if sum(run.counts) != n:
        raise DistributedBuildError(f"shards hold {sum(run.counts)} vectors, {n} were encoded")
    if not opts.keep_vectors:
        shutil.rmtree(stage / VECTORS_DIR)


def _evaluation_set(run: _RayBuild, encoder: OnnxEncoder) -> DataInfo:
    """The evaluation queries encoded on the driver (and, for Quora, the store written); the data's record."""
    cfg, stage, split = run.cfg, run.stage, run.corpus.split
    if split is not None:
        ev = split.evalset
        t0 = time.perf_counter()
        qvecs = encoder.encode(ev.query_texts, cfg.batch_size, progress=True, desc="eval queries")
        run.timings.encode_queries_s = time.perf_counter() - t0
        np.save(stage / QUERY_VECTORS, qvecs)
        write_store(stage / STORE, split.corpus.ids, split.corpus.texts, ev.query_ids, ev.query_texts,
                    ev.gold, {"source": split.source, "protocol": split.protocol})
        return DataInfo(source=split.source, protocol=split.protocol, rows_read=split.rows_read,
                        skipped_empty_texts=split.skipped_empty_texts, n_docs=run.n, n_queries=len(ev.query_texts))
    # another corpus: its store (and evaluation set, if any) was written while reading it
    other = run.other
    assert other is not None
    if other.loaded is not None:
        t0 = time.perf_counter()
        qvecs = encoder.encode(other.loaded.evalset.query_texts, cfg.batch_size, progress=True, desc="eval queries")
        run.timings.encode_queries_s = time.perf_counter() - t0
        np.save(stage / QUERY_VECTORS, qvecs)
    return corpus_data_info(other.source, other.ingested, other.schema, other.loaded)


def _params(run: _RayBuild) -> KindParams:
    """The sharded kind's parameters of this build: the lists trained and their codec, the nprobe given or default."""
    cfg = run.cfg
    return KIND_SPECS[SHARDED_KIND].params.model_validate({
        "nlist": run.nlist, "nlist_requested": cfg.nlist or auto_nlist(run.n), "codec": cfg.codec or DEFAULT_CODEC,
        "nprobe": run.nprobe, "quantizer": quantizer_for(run.nlist)})


def _manifest(run: _RayBuild, version: str, encoder: OnnxEncoder, data: DataInfo) -> Manifest:
    cfg, opts, n = run.cfg, run.opts, run.n
    shards = [] if opts.shards == 1 else [ShardInfo(file=shard_file(s), ntotal=c) for s, c in enumerate(run.counts)]
    return Manifest(
        version=version,
        created_at=datetime.now(timezone.utc),
        model=model_info(cfg.model_dir, encoder.meta),
        index=IndexInfo.for_params(_params(run), n, shards=shards),
        data=data,
        build_seconds=run.timings,
        distributed=DistributedInfo(address=run.address, workers=run.workers, actors=run.actors,
                                    embed_wall_s=round(run.embed_wall, 3)),
        lexical=cfg.lexical_info(), default_mode=cfg.default_mode,
    )


def _calibrate_and_save(run: _RayBuild, manifest: Manifest, encoder: OnnxEncoder, t_start: float) -> None:
    """Calibrated as the local build is (`indexer.calibrate`): nprobe for the target recall on the same query-like
    probes (`indexer.probes`), encoded on the driver; then the manifest saved and the version evaluated."""
    cfg, split = run.cfg, run.corpus.split
    if split is not None:
        candidates = quora_probe_candidates(split, cfg.probes)
        doc_ids = np.asarray(split.corpus.ids, dtype=np.int64)
    else:
        other = run.other
        assert other is not None
        loaded = other.loaded
        candidates = corpus_probe_candidates(other.source.queries, other.source.qrels,
                                             loaded.evalset if loaded else None, loaded.source if loaded else "",
                                             other.ingested.ids.resolve, cfg.probes)
        doc_ids = other.ingested.ids.faiss_array()
    save_and_evaluate(run.stage, manifest, t_start, evaluate_it=cfg.evaluate and bool(manifest.data.n_queries),
                      threads=cfg.threads, target_recall=cfg.target_for(SHARDED_KIND),
                      probe_maker=lambda v: make_probes(candidates, encoder, v.store, doc_ids, cfg.batch_size),
                      report_after=cfg.report_after)


def _check_complete(pos: np.ndarray, ids: np.ndarray, corpus: object, expected: int | None = None) -> None:
    """Every id exactly once (a retried batch must not add a second copy, a lost one must not go missing)."""
    uniq, counts = np.unique(ids, return_counts=True)
    if (counts > 1).any():
        raise DistributedBuildError(f"{int((counts > 1).sum())} ids were written more than once, e.g. "
                                    f"{uniq[counts > 1][:5].tolist()}")
    split = getattr(corpus, "split", None)
    if split is not None and len(ids) != len(split.corpus.ids):
        missing = np.setdiff1d(split.corpus.ids, ids)
        raise DistributedBuildError(f"{len(missing)} of {len(split.corpus.ids)} documents were not encoded, e.g. "
                                    f"{missing[:5].tolist()}")
    if expected is not None and len(ids) != expected:
        raise DistributedBuildError(f"{len(ids)} of {expected} documents were encoded")


def summary(manifest: Manifest) -> str:
    d = manifest.distributed
    assert d is not None
    lines = [f"Ray ({d.address}): {d.workers} encoding actors, {manifest.index.ntotal} vectors in "
             f"{d.embed_wall_s:.1f}s ({manifest.index.ntotal / max(d.embed_wall_s, 1e-9):.1f} vectors/s overall)"]
    lines += [f"  actor {a.actor}: {a.vectors} vectors, {a.busy_s:.1f}s busy, {a.vectors_per_s:.1f} vectors/s"
              for a in d.actors]
    t = manifest.build_seconds
    lines.append(f"  train {t.train_s:.1f}s, add {t.add_s:.1f}s, total {t.total_s:.1f}s")
    return "\n".join(lines)
