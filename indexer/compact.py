"""`indexer compact`: fold the root's write log into a new version, published like a build.

The API serves writes from an overlay on the current version (`indexer.runtime.overlay`), rebuilt from the log on
every start and swap. Compaction makes them part of a version: from the current version and the log entries after
its `writes.folded_seq` it writes a new version whose index and store hold them, and whose manifest says so
(`writes`: the log's id, the last seq folded, and how many entries, upserts and deletes the version's chain has
folded). The API swaps to it like to any build (same gates) and then replays only what was written since.

How it folds:
- the net effect per id (the last entry of each id wins), applied in one go;
- vectors come from the log (the served encoder's); entries written with another encoder than the version's are
  re-encoded with the version's;
- the index is the current one with the deleted and replaced ids removed and the written vectors added to the
  trained inverted lists, as `indexer build --add` does (no k-means: `index.added_since_training` grows, and the
  command says when a full rebuild is due); SQfp16 lists keep the written vectors as float16 like every other;
- FAISS ids, and which documents are created, replaced or deleted, are the overlay's (`fold.fold`, by the rule of
  `indexer.runtime.ids`): an id the version holds keeps its FAISS id, an integer in [0, 2^62) is its own, any
  other gets the next one above the version's largest — a compacted version answers as its overlay did;
- the store is a copy of the current one with the written documents replaced, added or removed (texts, external
  ids, metadata and its index and schema; a store of before the one schema, an old Quora build's, is brought to it
  first), then the version is evaluated (unless `--no-eval`).

A sharded version (`index.shards`) is folded shard by shard (`indexer.compact_shards`): each shard file gains and
loses the documents of its `id % N`, its quantizer kept; `--index auto` does not rebuild it.

The log itself is left whole (see `indexer.runtime.writelog`): a build from the source data (folded_seq 0) or a
rollback still needs its entries. The nightly job runs `indexer compact` after `indexer build`, so the version it
publishes holds the writes and the API's replay stays short.
"""

from __future__ import annotations

import json
import logging
import shutil
import sqlite3
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from indexer.compact_index import Resized, lexical_by_size, rebuild, rebuild_reason
from indexer.compact_shards import fold_shards, upsert_vectors
from indexer.probes import PROBES_FILE
from indexer.publish import publish
from indexer.runtime.ann import KIND_SPECS
from indexer.runtime.encoder import OnnxEncoder
from indexer.runtime.faiss.devices import set_threads
from indexer.runtime.faiss.files import INDEX_FILE
from indexer.runtime.fold import Fold, fold, reencode_stale
from indexer.runtime.layout import IndexRoot, new_version_name
from indexer.runtime.manifest import IndexInfo, Manifest, PassagesInfo, ShardInfo, WritesInfo
from indexer.runtime.metadata import MetadataError, metadata_json
from indexer.runtime.passages import document_of
from indexer.runtime.storage import storage_errors
from indexer.runtime.store import STORE, Store
from indexer.runtime.store_writer import apply_writes
from indexer.runtime.version import QUERY_VECTORS, IndexVersion
from indexer.runtime.writelog import LogEntry, net_effect, open_log
from indexer.stage import save_and_evaluate

log = logging.getLogger(__name__)


def _stored_metadata(e: LogEntry) -> str:
    """An entry's metadata as the store keeps it. One logged before the metadata schema was enforced (an integer
    beyond 64 bits, deep nesting) is folded in as written, with a warning, rather than blocking every later
    compaction: the service repairs such values in its answers (`service.responses`)."""
    try:
        return metadata_json(e.metadata)
    except MetadataError as exc:
        log.warning("write log entry %d (id %r): %s; folded in as written", e.seq, e.ext_id, exc)
        return json.dumps(e.metadata, ensure_ascii=False)

DEFAULT_REBUILD_AFTER = 0.2


@dataclass
class CompactResult:
    manifest: Manifest | None  # None: nothing to fold
    parent: str
    first_seq: int = 0
    last_seq: int = 0
    entries: int = 0
    upserted: int = 0
    created: int = 0
    deleted: int = 0
    rebuild_due: bool = False
    drift: float = 0.0
    resized: str | None = None  # why the index was rebuilt (`--index auto`), None: grown in place


def _copy_store(src: Path, dst: Path) -> None:
    source = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    target = sqlite3.connect(dst)
    try:
        source.backup(target)  # a consistent copy, indexes included
    finally:
        source.close()
        target.close()


def _pending(root: IndexRoot, parent: Manifest) -> tuple[list[LogEntry], str, int, int]:
    """The log's entries `parent` does not hold, the log's id, the last seq it holds and the log's last seq (no
    entries: nothing to fold)."""
    wlog = open_log(root.root, create=False)
    if wlog is None:
        return [], "", 0, 0
    try:
        folded = parent.writes.folded_seq if parent.writes is not None and parent.writes.log_id == wlog.log_id else 0
        upto = wlog.last_seq()
        return (list(wlog.entries(after=folded, upto=upto)) if upto > folded else []), wlog.log_id, folded, upto
    finally:
        wlog.close()


def compact(root_dir: Path, *, model_dir: Path | None = None, threads: int | None = None, keep: int = 5,
            run_eval: bool = True, rebuild_after: float = DEFAULT_REBUILD_AFTER, index_policy: str = "keep"
            ) -> CompactResult:
    """`index_policy` auto: the index kind follows the size (`indexer.compact_index`); keep: grown in place. A
    sharded version is folded shard by shard (`indexer.compact_shards`), its index kind kept."""
    root = IndexRoot(root_dir)
    t_start = time.perf_counter()
    with root.build_lock(create=False):
        root.remove_partial_builds()
        folder = root.current_dir()
        parent = Manifest.load(folder)
        entries, log_id, folded, upto = _pending(root, parent)
        if not entries:
            return CompactResult(None, parent.version, last_seq=folded)
        net = list(net_effect(entries).values())
        _reencode_stale(net, parent, model_dir, threads)
        store = Store(folder / STORE)
        try:
            folded_in = fold(net, store)
        finally:
            store.close()
        upserts = [(fid, e.ext_id, e.text or "", _stored_metadata(e)) for fid, e in folded_in.upserts]
        deletes, created = folded_in.deletes, folded_in.created
        write_index, ntotal, resized = _fold_index(folder, parent, folded_in, threads, rebuild_after, index_policy)

        version = new_version_name()
        with root.staging(version) as stage:
            shards = write_index(stage)
            with storage_errors(stage / STORE, "writing the store"):
                _copy_store(folder / STORE, stage / STORE)
                schema = apply_writes(stage / STORE, upserts, deletes)
            for name in (PROBES_FILE, QUERY_VECTORS):  # the probes: calibrated again on the same ones
                if (folder / name).is_file():
                    shutil.copy2(folder / name, stage / name)
            info, trained = _index_section(parent, ntotal, created, resized)
            info.shards = shards
            before = parent.writes
            writes = WritesInfo(log_id=log_id, folded_seq=upto,
                                entries=(before.entries if before else 0) + len(entries),
                                upserted=(before.upserted if before else 0) + len(upserts),
                                deleted=(before.deleted if before else 0) + len(deletes))
            n_docs, passages = _documents(stage / STORE, parent, ntotal)
            data = parent.data.model_copy(update={"n_docs": n_docs, "metadata_schema": schema})
            manifest = parent.model_copy(update={
                "version": version, "created_at": datetime.now(timezone.utc), "index": info, "eval": None,
                "query_evals": {}, "parent_version": parent.version, "data": data, "writes": writes,
                "passages": passages, "build_seconds": parent.build_seconds.model_copy(),
                "lexical": lexical_by_size(parent.lexical) if index_policy == "auto" else parent.lexical,
            })
            # the lexical index is built again over the whole store: the documents not written since the parent
            # keep the terms it analysed (`indexer.runtime.analysed`)
            save_and_evaluate(stage, manifest, t_start, evaluate_it=run_eval and bool(parent.data.n_queries),
                              threads=threads, target_recall=resized.target_recall if resized else None,
                              lexical_parent=(folder, {fid for fid, _ in folded_in.upserts}))
        publish(root, manifest, keep)
    drift = info.added_since_training / max(trained or 1, 1)
    log.info("folded %d write log entries (seq %d..%d) into %s as %s", len(entries), folded + 1, upto, parent.version,
             version)
    return CompactResult(manifest, parent.version, folded + 1, upto, len(entries), len(upserts), created, len(deletes),
                         drift > rebuild_after, drift, resized.reason if resized else None)


def _fold_index(folder: Path, parent: Manifest, folded_in: Fold, threads: int | None, rebuild_after: float,
                index_policy: str) -> tuple[Callable[[Path], list[ShardInfo]], int, Resized | None]:
    """The compacted index: what writes it into the stage (and returns its shards' record), how many vectors it
    holds, and why it was rebuilt (None: grown in place)."""
    gone = folded_in.deletes + folded_in.replaced
    if parent.index.shards:  # one shard at a time; the shards' shared quantizer is kept
        ntotal = parent.index.ntotal - len(gone) + len(folded_in.upserts)
        return (lambda stage: fold_shards(folder, parent, folded_in, stage, threads)), ntotal, None
    base = IndexVersion(folder)  # its index is ours to change: read from disk for this command
    index = base.ann
    base.close()
    if gone:  # HNSW cannot remove in place: its graph is rebuilt without them (`HnswIndex.remove`)
        index.remove(np.asarray(gone, dtype=np.int64))
    set_threads(threads)
    written = upsert_vectors(folded_in) if folded_in.upserts else None
    n = int(index.ntotal) + len(folded_in.upserts)
    reason = rebuild_reason(parent, n, folded_in.created, rebuild_after) if index_policy == "auto" else None
    resized = None
    if reason is not None:  # built anew from the held vectors and the written ones, never added to the old lists
        resized = rebuild(index, parent, reason, written)
        grown = resized.index
    else:
        if written is not None:
            index.add(*written)
        grown = index

    def write(stage: Path) -> list[ShardInfo]:
        grown.save(stage / INDEX_FILE)
        return []

    return write, int(grown.ntotal), resized


def _index_section(parent: Manifest, ntotal: int, created: int, resized: Resized | None
                   ) -> tuple[IndexInfo, int | None]:
    """The compacted version's index section, and the vectors its IVF lists were trained on (None: not IVF)."""
    if resized is not None:
        return resized.info, resized.info.ntotal if KIND_SPECS[resized.info.kind].trained else None
    # only a trained kind (IVF's quantizer) drifts from what it learnt (`KindSpec.trained`)
    trained = (parent.index.trained_ntotal or parent.index.ntotal) if KIND_SPECS[parent.index.kind].trained else None
    return parent.index.model_copy(update={"ntotal": ntotal, "trained_ntotal": trained, "added_since_training":
                                           parent.index.added_since_training + created if trained is not None
                                           else 0}), trained


def _documents(store_path: Path, manifest: Manifest, rows: int) -> tuple[int, PassagesInfo | None]:
    """The compacted version's documents and passages record: its rows, or, for a version of passages, the
    documents its passage rows stand for (and the counts of its `passages` record brought up to date)."""
    if manifest.chunking() is None or manifest.passages is None:
        return rows, manifest.passages
    store = Store(store_path)
    try:
        per_doc = Counter((type(d), d) for d in (document_of(e) for _, e in store.all_ext_ids()))
    finally:
        store.close()
    split = sum(1 for n in per_doc.values() if n > 1)
    return len(per_doc), manifest.passages.model_copy(update={"passages": rows, "docs_split": split})


def _reencode_stale(net: list[LogEntry], manifest: Manifest, model_dir: Path | None, threads: int | None) -> None:
    """Vectors of entries written with another encoder than the version's, encoded anew with the version's (the
    encoder is loaded only when there are some)."""

    def encode(texts: list[str]) -> np.ndarray:
        encoder = OnnxEncoder(model_dir or Path(manifest.model.dir), threads=threads, verify_sha256=True)
        if encoder.meta.onnx_sha256 != manifest.model.onnx_sha256:
            raise ValueError(f"{encoder.model_dir} is not the encoder version {manifest.version} was built with")
        log.info("re-encoding %d written documents with the version's encoder", len(texts))
        return encoder.encode(texts)

    reencode_stale(net, manifest.model.onnx_sha256, encode)
