"""`indexer build --add FILE`: add questions to the current version as a new version, reusing its trained
coarse quantizer (no k-means), and say when a full rebuild is due.

The new vectors go to the inverted lists of the existing centroids. That is fast and exact for search, but the
lists drift out of balance as the corpus moves away from what the quantizer was trained on; after more than
`rebuild_after` × (vectors it was trained on) additions a full `indexer build` is due.

FILE is a TSV with the header `id<TAB>question` (one question per row, integer ids), or a Quora question-pairs
TSV (its `qid1`/`question1` and `qid2`/`question2`). An id already in the index replaces that question.
"""

from __future__ import annotations

import csv
import logging
import shutil
import sqlite3
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from indexer.probes import PROBES_FILE
from indexer.publish import publish
from indexer.quora import COLUMNS, QuoraFormatError, _open_text, read_rows
from indexer.runtime.ann import KIND_SPECS
from indexer.runtime.encoder import EncoderLoadError, OnnxEncoder
from indexer.runtime.faiss.devices import set_threads
from indexer.runtime.faiss.files import INDEX_FILE
from indexer.runtime.layout import IndexRoot, new_version_name
from indexer.runtime.manifest import Manifest
from indexer.runtime.store import STORE
from indexer.runtime.version import QUERY_VECTORS, IndexVersion
from indexer.stage import save_and_evaluate

log = logging.getLogger(__name__)

QUESTION_COLUMNS = ("id", "question")
DEFAULT_REBUILD_AFTER = 0.2


@dataclass
class AddResult:
    manifest: Manifest
    added: int  # new ids
    replaced: int  # ids that were already in the index
    skipped_empty: int
    rebuild_due: bool
    drift: float  # added_since_training / trained_ntotal


def read_questions(path: Path) -> tuple[list[int], list[str], int]:
    """(ids, texts, skipped empty texts) from an `id<TAB>question` or Quora pairs TSV; last text wins per id."""
    try:
        fh = _open_text(path)
        with fh:
            header = next(csv.reader(fh, delimiter="\t"), None)
    except (UnicodeDecodeError, OSError, csv.Error, EOFError) as exc:
        raise QuoraFormatError(f"{path}: cannot read as UTF-8 TSV: {exc}") from exc
    names = tuple(h.strip() for h in header) if header else None
    found: dict[int, str] = {}
    skipped = 0
    if names == COLUMNS:
        for row in read_rows(path):
            for qid, text in ((row.qid1, row.question1), (row.qid2, row.question2)):
                if text:
                    found[qid] = text
                else:
                    skipped += 1
        return list(found), list(found.values()), skipped
    if names != QUESTION_COLUMNS:
        raise QuoraFormatError(f"{path}:1: expected the tab-separated header 'id question' (or the Quora "
                               f"pairs header {' '.join(COLUMNS)}), got {header!r}")
    try:
        with _open_text(path) as fh:
            reader = csv.reader(fh, delimiter="\t")
            next(reader)
            for fields in reader:
                if not fields:
                    continue
                if len(fields) != 2:
                    raise QuoraFormatError(f"{path}:{reader.line_num}: expected 2 tab-separated fields (id, "
                                           f"question), got {len(fields)}")
                try:
                    qid = int(fields[0])
                except ValueError as exc:
                    raise QuoraFormatError(f"{path}:{reader.line_num}: id must be an integer: {exc}") from exc
                if qid < 0:
                    raise QuoraFormatError(f"{path}:{reader.line_num}: id must be >= 0, got {qid}")
                text = fields[1].strip()
                if text:
                    found[qid] = text
                else:
                    skipped += 1
    except (UnicodeDecodeError, csv.Error, EOFError, OSError) as exc:
        raise QuoraFormatError(f"{path}: unreadable row: {exc}") from exc
    if not found:
        raise QuoraFormatError(f"{path}: no questions to add")
    return list(found), list(found.values()), skipped


def _copy_store(src: Path, dst: Path, ids: list[int], texts: list[str]) -> None:
    """Copy the id → text store (SQLite backup API: a consistent copy) and upsert the new questions."""
    source = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    target = sqlite3.connect(dst)
    try:
        source.backup(target)
        target.executemany("INSERT OR REPLACE INTO docs VALUES (?, ?)", zip(ids, texts, strict=True))
        target.commit()
    finally:
        source.close()
        target.close()


def add_questions(root_dir: Path, path: Path, *, model_dir: Path | None = None, threads: int | None = None,
                  batch_size: int | None = None, keep: int = 5, rebuild_after: float = DEFAULT_REBUILD_AFTER,
                  run_eval: bool = True) -> AddResult:
    root = IndexRoot(root_dir)
    t_start = time.perf_counter()
    with root.build_lock(create=False):
        root.remove_partial_builds()
        base = IndexVersion(root.current_dir())
        try:
            parent = base.manifest
            if parent.chunking() is not None:  # whole questions beside passages: neither split nor replaced as such
                raise ValueError(f"version {parent.version} indexes passages (built with --chunk): --add adds whole "
                                 f"documents; write them with PUT /documents (split as the build did) or rebuild")
            encoder = OnnxEncoder(model_dir or Path(parent.model.dir), threads=threads, verify_sha256=True)
            if encoder.meta.onnx_sha256 != parent.model.onnx_sha256:
                raise EncoderLoadError(f"{encoder.model_dir} is not the encoder version {parent.version} was built "
                                       f"with (sha256 {encoder.meta.onnx_sha256[:12]}… vs "
                                       f"{parent.model.onnx_sha256[:12]}…)")
            ids, texts, skipped = read_questions(path)
            set_threads(threads)
            vecs = encoder.encode(texts, batch_size, progress=True, desc="added questions")
            id_arr = np.asarray(ids, dtype=np.int64)
            present = base.store.texts(ids)
            index = base.ann  # ours to change: it was read from disk, the served copy is another object
            if present:  # HNSW cannot remove in place: its graph is rebuilt without them (`HnswIndex.remove`)
                index.remove(np.fromiter(present, dtype=np.int64))
            index.add(vecs, id_arr)

            version = new_version_name()
            with root.staging(version) as stage:
                index.save(stage / INDEX_FILE)
                _copy_store(base.folder / STORE, stage / STORE, ids, texts)
                if (base.folder / PROBES_FILE).is_file():  # calibrate again on the same probes
                    shutil.copy2(base.folder / PROBES_FILE, stage / PROBES_FILE)
                if (base.folder / QUERY_VECTORS).is_file():
                    shutil.copy2(base.folder / QUERY_VECTORS, stage / QUERY_VECTORS)
                # only a trained kind (IVF's quantizer) drifts from what it learnt (`KindSpec.trained`)
                learnt = KIND_SPECS[parent.index.kind].trained
                trained = (parent.index.trained_ntotal or parent.index.ntotal) if learnt else None
                added = len(ids) - len(present)
                info = parent.index.model_copy(update={"ntotal": int(index.ntotal), "trained_ntotal": trained,
                                                  "added_since_training": parent.index.added_since_training + added
                                                  if trained is not None else 0})
                manifest = parent.model_copy(update={
                    "version": version, "created_at": datetime.now(timezone.utc), "index": info, "eval": None,
                    "parent_version": parent.version,
                    "data": parent.data.model_copy(update={"n_docs": int(index.ntotal)}),
                })
                manifest.build_seconds = parent.build_seconds.model_copy()
                save_and_evaluate(stage, manifest, t_start, evaluate_it=run_eval and bool(manifest.data.n_queries),
                                  threads=threads)
        finally:
            base.close()
        publish(root, manifest, keep)  # an add never shrinks: the warning cannot fire
    drift = info.added_since_training / max(trained or 1, 1)
    result = AddResult(manifest, added, len(present), skipped, drift > rebuild_after, drift)
    log.info("added %d questions (%d replaced) to %s as %s; %.0f%% added since the quantizer was trained",
             added, len(present), parent.version, version, drift * 100)
    return result
