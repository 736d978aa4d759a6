"""Index files: reading (copied or memory-mapped), writing (every error raised), serialising, IVF shard files
(`split_ivf`, `read_merged`) and what an index occupies in memory."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import faiss
import numpy as np

Index = faiss.Index  # for type hints elsewhere, without importing faiss there

INDEX_FILE = "index.faiss"


def read_index(path: str | Path, *, mmap: bool = False) -> faiss.Index:
    """Read an index file; RuntimeError for truncated or foreign files (FAISS's own error).

    `mmap`: the file is memory-mapped, not copied into memory (FAISS's IO_FLAG_MMAP_IFC, FAISS >= 1.11: the
    flat codes of Flat and HNSW storage and the arrays of IVF inverted lists point into the mapping). Pages are
    read through the page cache as searches touch them and are file-backed, so the kernel can drop them; the
    index is then read-only (a build, `add` or `compact` opens without it, to change the index)."""
    return faiss.read_index(str(path), faiss.IO_FLAG_MMAP_IFC if mmap else 0)


def read_merged(paths: Sequence[str | Path]) -> faiss.Index:
    """Read IVF shard files sharing one trained quantizer and merge them into one index in memory (their
    inverted lists are concatenated; ids are global already, so they are not shifted)."""
    merged = faiss.read_index(str(paths[0]))
    for path in paths[1:]:
        faiss.merge_into(merged, faiss.read_index(str(path)), False)
    return merged


def split_ivf(path: str | Path, outs: Sequence[str | Path],
              progress: Callable[[int, int], None] | None = None) -> list[int]:
    """Split the IVF index file at `path` into `len(outs)` shard files sharing its trained quantizer: shard s holds
    the vectors whose id % len(outs) == s (`indexer.runtime.ids.shard_of`), in each list in the order they were added,
    so the shards merge back (`read_merged`) into an index that answers as the original. Returns each shard's
    vector count. ValueError for an index that is not a plain IVF one (the only kind kept as shards).

    The source is memory-mapped and the shards written one at a time: beside the page cache this holds one
    shard's codes in memory, not the index's. `progress(done, total)` is called after each shard."""
    source = read_index(path, mmap=True)
    ivf = faiss.downcast_index(source)
    if not isinstance(ivf, faiss.IndexIVF):  # an exact or HNSW index, or IVF under a refine step
        raise ValueError(f"{path} holds a {type(ivf).__name__}, not an IVF index: only IVF indexes are kept as "
                         f"shards (their lists split, the quantizer shared)")
    # The empty template: the same file opened again (mapped: nothing copied), its lists swapped for empty ones.
    template = read_index(path, mmap=True)
    empty = faiss.ArrayInvertedLists(ivf.nlist, ivf.code_size)
    empty.this.disown()  # the index owns (and frees) it
    faiss.extract_index_ivf(template).replace_invlists(empty, True)
    faiss.extract_index_ivf(template).ntotal = 0
    template.ntotal = 0
    blob = serialize(template)
    del template
    counts: list[int] = []
    for shard, out in enumerate(outs):
        part = deserialize(blob)
        part_ivf = faiss.extract_index_ivf(part)
        ivf.copy_subset_to(part_ivf, faiss.InvertedLists.SUBSET_TYPE_ID_MOD, len(outs), shard)
        part.ntotal = part_ivf.ntotal
        write_index(part, out)
        counts.append(int(part.ntotal))
        del part, part_ivf
        if progress is not None:
            progress(shard + 1, len(outs))
    if sum(counts) != source.ntotal:  # copy_subset_to skips nothing; a short sum is a FAISS fault, said here
        raise RuntimeError(f"the shards of {path} hold {sum(counts)} vectors, the index {source.ntotal}")
    return counts


def write_index(index: faiss.Index, path: str | Path) -> None:
    """Write `index` to `path` through a Python file: FAISS's own file writer reports an error of the final
    flush (its `fclose`) only on stderr, which left a short file on a full disk; here every write error raises,
    as an OSError naming the file."""
    try:
        with open(path, "wb") as fh:
            writer = faiss.PyCallbackIOWriter(fh.write)
            try:
                faiss.write_index(index, writer)
            finally:
                del writer
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from exc


def serialize(index: faiss.Index) -> bytes:
    return faiss.serialize_index(index).tobytes()


def deserialize(blob: bytes) -> faiss.Index:
    return faiss.deserialize_index(np.frombuffer(blob, dtype=np.uint8))


def memory_bytes(index: faiss.Index) -> int:
    """What the index occupies in RAM: codes and ids of the inverted lists plus the coarse quantizer for IVF
    indexes (counted, not serialised: serialising copies the whole index, 0.83 GB at 537k × 384), the
    serialised size for the others."""
    top = faiss.downcast_index(index)
    if not isinstance(top, faiss.IndexIVF) or isinstance(top, faiss.IndexIVFFastScan):
        # flat, HNSW, refine wrappers; fast-scan lists are blocked, not code_size per vector
        return int(faiss.serialize_index(index).nbytes)
    inv = top.invlists
    stored = sum(inv.list_size(i) for i in range(top.nlist))
    return stored * (inv.code_size + 8) + int(faiss.serialize_index(top.quantizer).nbytes)
