"""A collection's empty first version: what `POST /collections` and `indexer collection create` publish so that a
new collection serves at once — searches answer with no hits, writes go to its write log and overlay as on any
version, and `indexer compact` folds them into a version of their own.

It is a version like a build's (sealed with its checksums, renamed into `versions/`, then `current`): an exact
(flat) index of no vectors, a corpus store with no documents (string and integer ids, metadata: the one schema),
a lexical (BM25) index of no documents, and a manifest naming the exported encoder it pairs with. It serves what a
build serves by default (hybrid search; dense and lexical on request): written texts are scored by the overlay
until the first compaction (due as soon as anything waits for an empty version: `service.engine.compactor`) gives
them an index of their own, whose engine `auto` picks by size at every compaction."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from indexer.runtime.ann import AUTO, KIND_SPECS, choose_kind
from indexer.runtime.encoder import EncoderLoadError, EncoderMeta, read_meta
from indexer.runtime.faiss.files import INDEX_FILE
from indexer.runtime.faiss.kinds import build_index
from indexer.runtime.layout import IndexRoot, new_version_name
from indexer.runtime.lexical import AUTO as AUTO_ENGINE
from indexer.runtime.lexical import build_lexical, lexical_info
from indexer.runtime.manifest import DataInfo, IndexInfo, Manifest, ModelInfo, Timings
from indexer.runtime.store import STORE
from indexer.runtime.store_writer import CorpusStoreWriter

EMPTY_KIND = choose_kind(AUTO, 0)  # the kind of an empty first version: what `--index auto` builds for no vectors

SOURCE = "empty"  # the manifest's data.source of an empty first version


class EncoderNotFound(ValueError):
    """The folder is not an exported encoder (a file missing, an encoder.json that does not read, an ONNX file
    that is not the one it names)."""


def encoder_meta(model_dir: Path) -> EncoderMeta:
    """An exported encoder's `encoder.json`, read without loading the model, once the folder holds what serving it
    needs (its ONNX file, the one `encoder.json` names, and its tokenizer: what a build and the server check), so
    that a collection is never created with an encoder it cannot serve."""
    try:
        return read_meta(model_dir, verify_sha256=True)
    except EncoderLoadError as exc:  # it names the folder and what is wrong
        raise EncoderNotFound(str(exc)) from None
    except OSError as exc:
        raise EncoderNotFound(f"{model_dir} is not an exported encoder ({exc})") from None


def create_empty_version(root: Path, model_dir: Path) -> str:
    """Publish an empty version of `model_dir`'s encoder in `root` (created if needed) and point `current` at it;
    returns its name. Under the root's build lock: a build cannot interleave with it."""
    meta = encoder_meta(model_dir)
    index_root = IndexRoot(root)
    root.mkdir(parents=True, exist_ok=True)
    version = new_version_name()
    t0 = time.perf_counter()
    with index_root.build_lock(), index_root.staging(version) as stage:
        params = KIND_SPECS[EMPTY_KIND].params.model_validate({})
        index, _, _ = build_index(params, np.zeros((0, meta.dim), dtype=np.float32), np.zeros(0, dtype=np.int64))
        index.save(stage / INDEX_FILE)
        CorpusStoreWriter(stage / STORE).finish()
        lexical = build_lexical(stage, [], lexical_info(engine=AUTO_ENGINE), n_docs=0)
        manifest = Manifest(
            version=version, created_at=datetime.now(timezone.utc),
            model=ModelInfo(dir=str(model_dir.resolve()), onnx_sha256=meta.onnx_sha256, pooling=meta.pooling,
                            dim=meta.dim, max_length=meta.max_length, source=meta.source),
            index=IndexInfo.for_params(params, 0),
            data=DataInfo(source=SOURCE, protocol="corpus", rows_read=0, skipped_empty_texts=0, n_docs=0,
                          n_queries=0, format="jsonl"),
            lexical=lexical, build_seconds=Timings(total_s=time.perf_counter() - t0))
        manifest.save(stage)
    index_root.set_current(version)
    return version
