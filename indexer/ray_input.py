"""A corpus as a Ray Dataset of `pos, id, text` rows: the Quora TSV (under a protocol), or Parquet/JSONL files
of `id, text` for any corpus.

`pos` is a row's place in the corpus order. The training sample is taken in that order, so a distributed build
of the Quora TSV trains on exactly the vectors, in exactly the order, of the single-machine build.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from indexer.quora import Protocol, QuoraSplit, load_split

ID_TEXT_SUFFIXES = (".parquet", ".jsonl", ".json")


@dataclass
class CorpusInput:
    dataset: object  # ray.data.Dataset (typed loosely: `indexer` imports Ray only inside functions)
    source: str
    split: QuoraSplit | None  # the Quora split (eval set and store texts); None for id,text files


def is_id_text(source: str) -> bool:
    path = Path(source)
    return path.suffix in ID_TEXT_SUFFIXES or (path.is_dir() and any(
        p.suffix in ID_TEXT_SUFFIXES for p in path.iterdir()))


def read_corpus(source: Path, protocol: Protocol, rows: int | None, workers: int, block_rows: int) -> CorpusInput:
    import ray.data

    if is_id_text(str(source)):
        # Read by Ray itself, spread over the cluster; any corpus with an id and a text column.
        files = [source] if source.is_file() else sorted(p for p in source.iterdir() if p.suffix in ID_TEXT_SUFFIXES)
        if files[0].suffix == ".parquet":
            ds = ray.data.read_parquet([str(f) for f in files], columns=["id", "text"])
        else:
            ds = ray.data.read_json([str(f) for f in files], lines=True)
        ds = ds.select_columns(["id", "text"])
        if rows is not None:
            ds = ds.limit(rows)
        # Read before encoding: the encoding actors hold every CPU (`--workers` defaults to all of them), and
        # the file listing / read tasks need one, so a streamed read would wait forever. Materialized, the
        # blocks sit in Ray's object store (spilled to disk when it is full), spread over the nodes that read
        # them, and are read once for both the encoding and the text store. Re-cut like the TSV's blocks, so
        # that every actor gets work even from one file.
        ds = ds.materialize()
        n_blocks = max(4 * workers, math.ceil(ds.count() / block_rows))
        return CorpusInput(ds.repartition(n_blocks).materialize(), str(source), None)

    split = load_split(source, protocol, rows)
    ids, texts = split.corpus.ids, split.corpus.texts
    table = pa.table({"pos": np.arange(len(ids), dtype=np.int64), "id": ids, "text": pa.array(texts, pa.string())})
    # Enough blocks that every actor gets several (and a lost one is cheap to redo), each ≤ block_rows rows.
    n_blocks = max(4 * workers, math.ceil(len(ids) / block_rows))
    step = max(1, math.ceil(len(ids) / n_blocks))
    blocks = [table.slice(start, step) for start in range(0, len(ids), step)]
    return CorpusInput(ray.data.from_arrow(blocks), str(source), split)
