"""The documents bar of a corpus build advances while the texts are encoded, gzipped input included: a corpus
that fits one ingest chunk used to be read in well under a second and then encoded for minutes at 0 %."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

from indexer.corpus import open_corpus
from indexer.ingest import INGEST_CHUNK, ingest
from indexer.runtime.encoder import OnnxEncoder
from indexer.runtime.store_writer import CorpusStoreWriter
from tests.tiny_bert import WORDS

DOCS = 1500  # one ingest chunk: every row is read before the first text is encoded


def _gz_beir(folder: Path) -> Path:
    folder.mkdir()
    rng = random.Random(0)
    with gzip.open(folder / "corpus.jsonl.gz", "wt", encoding="utf-8") as fh:
        for i in range(DOCS):
            text = " ".join(rng.choices(WORDS, k=rng.randint(5, 40)))
            fh.write(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n")
    return folder


def test_gzipped_corpus_progress_advances_during_encoding(tiny_exported: Path, tmp_path: Path) -> None:
    assert DOCS < INGEST_CHUNK
    source = open_corpus(_gz_beir(tmp_path / "beir"))
    total = source.total_bytes()
    assert total == (tmp_path / "beir" / "corpus.jsonl.gz").stat().st_size  # the size on disk, known up front
    positions: list[int] = []
    writer = CorpusStoreWriter(tmp_path / "store.sqlite")
    try:
        res = ingest(source, writer, OnnxEncoder(tiny_exported, threads=1), batch_size=16, progress=False,
                     on_advance=positions.append)
        writer.finish()
    except BaseException:
        writer.abort()
        raise
    assert res.n_docs == DOCS and res.vectors is not None and len(res.vectors) == DOCS
    assert positions == sorted(set(positions)) and positions[-1] == total  # forward only, to the end
    # the one chunk's ~94 batches of 16 each move the bar, long before the chunk is done
    during = [p for p in positions if p < total]
    assert len(during) >= 50, positions
    assert during[0] < total // 10 and any(total // 3 < p < 2 * total // 3 for p in during)
