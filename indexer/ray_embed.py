"""The Ray Data stage that turns `pos, id, text` batches into vectors: one ONNX encoder per actor, loaded once.

Each output row also says which actor encoded it and how long its batch took, so the build can report
vectors/s per actor (a restarted actor shows up as a new one).
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from indexer.doc_limits import encoding_prefix


def vectors_column(vecs: np.ndarray) -> pa.FixedSizeListArray:
    """(n, dim) float32 → a fixed-size-list column: plain Parquet, readable without Ray's tensor extension."""
    return pa.FixedSizeListArray.from_arrays(pa.array(vecs.reshape(-1), pa.float32()), vecs.shape[1])


def column_vectors(column: pa.ChunkedArray | pa.FixedSizeListArray, dim: int) -> np.ndarray:
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return arr.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False).reshape(-1, dim)


class EmbedBatches:
    """Callable class for `Dataset.map_batches(..., compute=ActorPoolStrategy)`."""

    def __init__(self, model_dir: str, threads: int, batch_size: int | None) -> None:
        from indexer.runtime.encoder import OnnxEncoder

        # CUDA provider when this actor was given a GPU (OnnxEncoder picks it when ONNX Runtime offers it).
        self.encoder = OnnxEncoder(Path(model_dir), threads=threads, verify_sha256=True)
        self.batch_size = batch_size
        self.actor = f"{socket.gethostname()}:{os.getpid()}"

    def __call__(self, batch: pa.Table) -> pa.Table:
        texts = batch.column("text").to_pylist()
        ids = batch.column("id").to_numpy().astype(np.int64)
        pos = batch.column("pos").to_numpy().astype(np.int64) if "pos" in batch.column_names else ids
        t0 = time.perf_counter()
        max_tokens = self.encoder.meta.max_length  # nothing past what the encoder keeps is tokenized
        vecs = self.encoder.encode([encoding_prefix(t, max_tokens) for t in texts], self.batch_size)
        per_row = (time.perf_counter() - t0) / max(1, len(texts))
        return pa.table({
            "pos": pos, "id": ids, "vector": vectors_column(vecs),
            "actor": pa.array([self.actor] * len(ids), pa.string()),
            "encode_s": np.full(len(ids), per_row, dtype=np.float64),
        })
