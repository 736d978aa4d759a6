"""A corpus as a Ray Dataset of `pos, id, text` rows: the Quora TSV (under a protocol), or any other corpus
(JSONL, CSV/TSV, Parquet, BEIR) read by the single-machine reader (`indexer.corpus`) into the version's store
first, then served from that store.

`pos` is a row's place in the corpus order. The training sample is taken in that order, so a distributed build
of the Quora TSV trains on exactly the vectors, in exactly the order, of the single-machine build.

Other corpora are read by the driver, through the same code as `indexer build --engine local`: the same
formats, fields, id mapping, duplicate rule and bad-row errors. The driver only parses and writes SQLite (tens
of thousands of rows per second); the encoding, which is what takes the time, is spread over the actors.
"""

from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from indexer.quora import Protocol, QuoraSplit, load_split

STORE_READ_ROWS = 50_000


@dataclass
class CorpusInput:
    dataset: object  # ray.data.Dataset (typed loosely: `indexer` imports Ray only inside functions)
    source: str
    split: QuoraSplit | None  # the Quora split (eval set and store texts); None for other corpora


def _blocks(table: pa.Table, n_rows: int, workers: int, block_rows: int) -> list[pa.Table]:
    # Enough blocks that every actor gets several (and a lost one is cheap to redo), each ≤ block_rows rows.
    n_blocks = max(4 * workers, math.ceil(n_rows / block_rows))
    step = max(1, math.ceil(n_rows / n_blocks))
    return [table.slice(start, step) for start in range(0, n_rows, step)]


def read_corpus(source: Path, protocol: Protocol, rows: int | None, workers: int, block_rows: int) -> CorpusInput:
    """The Quora TSV under `protocol`, as blocks of `pos, id, text`."""
    import ray.data

    split = load_split(source, protocol, rows)
    ids, texts = split.corpus.ids, split.corpus.texts
    table = pa.table({"pos": np.arange(len(ids), dtype=np.int64), "id": ids, "text": pa.array(texts, pa.string())})
    return CorpusInput(ray.data.from_arrow(_blocks(table, len(ids), workers, block_rows)), str(source), split)


def store_corpus(store: Path, source: str, workers: int, block_rows: int) -> CorpusInput:
    """The documents of a corpus store written by `indexer.ingest.ingest_store` (duplicates already resolved,
    empty texts already skipped), as blocks of `pos, id, text` in FAISS-id order."""
    import ray.data

    con = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        parts = []
        cur = con.execute("SELECT id, text FROM docs ORDER BY id")
        while chunk := cur.fetchmany(STORE_READ_ROWS):
            parts.append(pa.table({"id": pa.array([r[0] for r in chunk], pa.int64()),
                                   "text": pa.array([r[1] for r in chunk], pa.string())}))
    finally:
        con.close()
    table = pa.concat_tables(parts)
    table = table.add_column(0, "pos", pa.array(np.arange(table.num_rows, dtype=np.int64)))
    return CorpusInput(ray.data.from_arrow(_blocks(table, table.num_rows, workers, block_rows)), source, None)
