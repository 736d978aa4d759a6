"""Reading and writing a file-backed array without holding it: `release` drops a memory-mapped array's pages from
the process's resident set once they have been read or written.

Why: a build keeps its corpus's vectors in a file mapped into memory (`indexer.ingest_vectors`), and every page of
it that the build touches (writing the rows, drawing the training sample, adding the vectors to the index) stays
counted in the process's RSS until the kernel needs the memory: 15 GB at 10M × 384 float32, above the build's
16 GiB budget on a 24 GiB machine, although none of it is memory the build needs. `MADV_DONTNEED` on a shared file
mapping unmaps the pages; written ones stay in the page cache, dirty, and are written back as usual; the next
read maps them again from the cache or the file.
"""

from __future__ import annotations

import mmap

import numpy as np


def _mapping(array: object) -> mmap.mmap | None:
    """The mmap an array (or the array it views) is a window of, if any."""
    while array is not None:
        if isinstance(array, mmap.mmap):
            return array
        m = getattr(array, "_mmap", None)  # np.memmap's own
        if isinstance(m, mmap.mmap):
            return m
        array = getattr(array, "base", None)
    return None


def release(array: np.ndarray) -> bool:
    """Drop the pages of the file mapping `array` is a window of from the resident set (the whole mapping);
    False when it is not memory-mapped (nothing to do)."""
    m = _mapping(array)
    if m is None or not hasattr(mmap, "MADV_DONTNEED"):
        return False
    try:
        m.madvise(mmap.MADV_DONTNEED)
    except (OSError, ValueError):  # a closed map, or a platform without it: the pages simply stay
        return False
    return True
