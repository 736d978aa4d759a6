"""The index a compaction writes when the collection's policy lets the index kind follow the size
(`indexer compact --index auto`, what the API's background compaction runs by default).

A compaction grows the version's index in place (`indexer.compact`): a flat index stays flat however large, and an
IVF index keeps the coarse quantizer it was trained with however far the data moved from it. With `--index auto`
the compacted index is instead rebuilt from the vectors the version holds (`AnnIndex.stored_vectors`: a flat
index's exactly, an IVF index's as its codes hold them, float16 for SQfp16) and the written ones (never added to the
old lists first) whenever a build with `--index auto` would choose otherwise at the new size:
- the kind: flat below `ann.AUTO_FLAT_BELOW` (10,000) vectors, IVF from it on — either way as the size crosses it;
- an IVF index whose lists were trained on fewer than (1 - `rebuild_after`) of the vectors it now holds (the
  drift `indexer compact` reports as "full rebuild due"): trained again, nlist by size (`faiss.training.auto_nlist`);
- IVF's nprobe calibrated again for the build's default recall target (`BuildConfig.target_for`).
Other kinds (HNSW, chosen by hand) are kept as they are. The lexical engine follows the size the same way where
`auto` chose it (`lexical_by_size`): a collection fed over HTTP past `lexical.AUTO_PISA_FROM` documents moves from
bm25s to PISA at its next compaction, as a build of that size would.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from indexer.build_config import BuildConfig, index_params
from indexer.runtime.ann import AUTO, KIND_SPECS, AnnIndex, choose_kind
from indexer.runtime.faiss.kinds import build_index
from indexer.runtime.lexical import AUTO as AUTO_ENGINE
from indexer.runtime.manifest import IndexInfo, LexicalInfo, Manifest
from indexer.runtime.progress import Working

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Resized:
    index: AnnIndex
    info: IndexInfo  # the manifest's section of the new index
    target_recall: float | None  # what its search parameter is calibrated to (None: an exact kind)
    reason: str


def rebuild_reason(parent: Manifest, n: int, created: int, rebuild_after: float) -> str | None:
    """Why `--index auto` rebuilds the parent's index once it holds `n` vectors (`created` of them new), or None
    when growing it in place is what a build would do. Decided before any written vector is added: a rebuilt
    index is built from the held vectors and the written ones, so adding those to the old lists first (a search
    of every list's centroid per vector: docs/decisions.md#search-during-an-ingest) would be thrown away."""
    kind = parent.index.kind
    if KIND_SPECS[kind].auto_from is None or n == 0:  # a kind `--index auto` never picks stays as it is
        return None
    wanted = choose_kind(AUTO, n)
    trained = parent.index.trained_ntotal or parent.index.ntotal
    drift = (parent.index.added_since_training + created) / max(trained, 1)
    if wanted != kind:
        return f"{n:,} vectors: {wanted} (--index auto), not {kind}"
    if KIND_SPECS[kind].trained and drift > rebuild_after:
        return f"{drift:.0%} of the {trained:,} vectors its lists were trained on were added since"
    return None


def rebuild(index: AnnIndex, parent: Manifest, reason: str,
            written: tuple[np.ndarray, np.ndarray] | None = None) -> Resized:
    """The index `--index auto` builds over what `index` holds plus `written` (float32 vectors, their FAISS ids),
    which `index` does not hold."""
    ids, vectors = index.stored_vectors()
    if written is not None and len(written[1]):
        ids = np.concatenate((ids, np.asarray(written[1], dtype=np.int64)))
        vectors = np.concatenate((vectors, np.asarray(written[0], dtype=np.float32)))
    n = len(ids)
    cfg = BuildConfig(model_dir=Path(parent.model.dir), data="", root=Path("."), index=AUTO)
    params = index_params(cfg, n, vectors.shape[1])
    with Working(f"rebuilding the index as {params.kind} ({reason})", logger=log):
        new, _, _ = build_index(params, vectors, ids, cfg.seed)
    return Resized(new, IndexInfo.for_params(new.params, new.ntotal), cfg.target_for(params.kind), reason)


def lexical_by_size(lexical: LexicalInfo | None) -> LexicalInfo | None:
    """The lexical settings a compaction under `--index auto` builds with: the engine asked for again as `auto`
    where `auto` chose it (its reason says so), so that `lexical.build_lexical` picks it for the new size; an
    engine asked for by name is kept."""
    if lexical is None or not (lexical.engine_reason or "").startswith(f"{AUTO_ENGINE}:"):
        return lexical
    return lexical.model_copy(update={"engine": AUTO_ENGINE})
