"""The index a compaction writes when the collection's policy lets the index kind follow the size
(`indexer compact --index auto`, what the API's background compaction runs by default).

A compaction grows the version's index in place (`indexer.compact`): a flat index stays flat however large, and an
IVF index keeps the coarse quantizer it was trained with however far the data moved from it. With `--index auto`
the compacted index is instead rebuilt from the vectors it holds (`AnnIndex.stored_vectors`: a flat index's
exactly, an IVF index's as its codes hold them, float16 for SQfp16) whenever a build with `--index auto` would
choose otherwise at the new size:
- the kind: flat below `ann.AUTO_FLAT_BELOW` (10,000) vectors, IVF from it on — either way as the size crosses it;
- an IVF index whose lists were trained on fewer than (1 - `rebuild_after`) of the vectors it now holds (the
  drift `indexer compact` reports as "full rebuild due"): trained again, nlist by size (`faiss.training.auto_nlist`);
- IVF's nprobe calibrated again for the build's default recall target (`BuildConfig.target_for`).
Other kinds (HNSW, chosen by hand) are kept as they are.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from indexer.build_config import BuildConfig, index_params
from indexer.runtime.ann import AUTO, KIND_SPECS, AnnIndex, choose_kind
from indexer.runtime.faiss.kinds import build_index
from indexer.runtime.manifest import IndexInfo, Manifest
from indexer.runtime.progress import Working

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Resized:
    index: AnnIndex
    info: IndexInfo  # the manifest's section of the new index
    target_recall: float | None  # what its search parameter is calibrated to (None: an exact kind)
    reason: str


def follow_size(index: AnnIndex, parent: Manifest, created: int, rebuild_after: float) -> Resized | None:
    """The index `--index auto` would build over what `index` now holds, or None when the grown one is that."""
    kind, n = parent.index.kind, int(index.ntotal)
    if KIND_SPECS[parent.index.kind].auto_from is None or n == 0:  # a kind `--index auto` never picks stays as it is
        return None
    wanted = choose_kind(AUTO, n)
    trained = parent.index.trained_ntotal or parent.index.ntotal
    drift = (parent.index.added_since_training + created) / max(trained, 1)
    if wanted != kind:
        reason = f"{n:,} vectors: {wanted} (--index auto), not {kind}"
    elif KIND_SPECS[parent.index.kind].trained and drift > rebuild_after:
        reason = f"{drift:.0%} of the {trained:,} vectors its lists were trained on were added since"
    else:
        return None
    ids, vectors = index.stored_vectors()
    cfg = BuildConfig(model_dir=Path(parent.model.dir), data="", root=Path("."), index=AUTO)
    params = index_params(cfg, n, vectors.shape[1])
    with Working(f"rebuilding the index as {params.kind} ({reason})", logger=log):
        new, _, _ = build_index(params, vectors, ids, cfg.seed)
    return Resized(new, IndexInfo.for_params(new.params, new.ntotal), cfg.target_for(params.kind), reason)
