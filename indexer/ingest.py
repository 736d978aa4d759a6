"""`indexer build --data` on a user's corpus (JSONL, CSV/TSV, Parquet, BEIR): stream the rows into the version's
store and the encoder, then build the IVF index exactly as for Quora.

Streaming: rows are read, written to the SQLite store and encoded a chunk at a time, so memory grows with the
vectors (and one id per document), not with the raw file.

Ids. The store maps each external id to a FAISS int64 id by the rule of `indexer.runtime.ids`: an integer id in
[0, 2^62) is its own FAISS id, any other id gets the next free one from 2^62 up (17 and "17" are two documents).

Duplicates: a row whose id an earlier row had replaces it (text, metadata and vector: an upsert, the last row
wins) and is counted in the manifest (`data.duplicate_ids`). A row with an empty text (after joining the title)
is skipped and counted (`data.skipped_empty_texts`); it neither adds nor replaces a document.
"""

from __future__ import annotations

import logging
import time
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from indexer import chunking
from indexer.build_config import BuildConfig
from indexer.corpus import CorpusSource, open_corpus
from indexer.corpus_batches import DocBatch, batch_of_docs
from indexer.corpus_rows import CorpusFormatError, Doc, ExtId, cell_value
from indexer.doc_limits import MAX_DOC_CHARS, encoding_prefix
from indexer.doc_ranks import first_passage_resolver
from indexer.evalset import LoadedEvalSet, load_eval_set
from indexer.ingest_passages import BuildPassages, drop_stale
from indexer.ingest_progress import ChunkProgress
from indexer.ingest_vectors import RowVectors, VectorRows, brought_vectors
from indexer.probes import corpus_probe_candidates, make_probes
from indexer.runtime.ids import ASSIGNED_IDS_FROM, FaissIds
from indexer.runtime.layout import IndexRoot, new_version_name
from indexer.runtime.manifest import CorpusFieldsInfo, DataInfo, Manifest, SkippedEntry, Timings
from indexer.runtime.passages import PASSAGE_KEY, Splitter, parse_passage_id
from indexer.runtime.storage import storage_errors
from indexer.runtime.store import STORE
from indexer.runtime.store_writer import CorpusStoreWriter
from indexer.runtime.version import QUERY_VECTORS
from indexer.stage import build_version_index, model_info, save_and_evaluate

if TYPE_CHECKING:
    from indexer.runtime.encoder import OnnxEncoder

log = logging.getLogger(__name__)

INGEST_CHUNK = 4096  # rows per store write and encoder call (long enough for length-sorted batches to pad little)
INGEST_CHUNK_CHARS = 8_000_000  # or fewer rows when they are long: what one chunk may hold in memory


class DocIds:
    """External id → row of its vector, and each row's FAISS id (see the module docstring)."""

    def __init__(self) -> None:
        self.row: dict[ExtId, int] = {}
        self.faiss_ids = array("q")
        self._assigner = FaissIds()

    def __len__(self) -> int:
        return len(self.faiss_ids)

    def add(self, ext: ExtId) -> tuple[int, bool]:
        """(row, whether the id was seen before)."""
        row = self.row.get(ext)
        if row is not None:
            return row, True
        fid = self._assigner.assign(ext)
        row = len(self.faiss_ids)
        self.row[ext] = row
        self.faiss_ids.append(fid)
        return row, False

    def add_own(self, exts: list[int]) -> range | None:
        """`add` for a batch of distinct integer ids in [0, 2^62) none of which was seen (each its own FAISS
        id), in bulk: their rows; None (nothing added) when the batch is not such a batch."""
        arr = np.asarray(exts)
        if arr.dtype.kind not in "iu" or len(arr) == 0 or arr.min() < 0 or arr.max() >= ASSIGNED_IDS_FROM:
            return None
        if len(np.unique(arr)) != len(arr) or not self.row.keys().isdisjoint(exts):
            return None
        rows = range(len(self.faiss_ids), len(self.faiss_ids) + len(exts))
        self.row.update(zip(exts, rows, strict=True))
        self.faiss_ids.frombytes(arr.astype(np.int64).tobytes())
        return rows

    def resolve(self, keys: Iterable[str]) -> dict[str, int]:
        """FAISS ids of external ids written as strings: "17" is the string id "17", else the integer 17."""
        out: dict[str, int] = {}
        for key in keys:
            row = self.row.get(key)
            if row is None and _is_int(key):
                row = self.row.get(int(key))
            if row is not None:
                out[key] = self.faiss_ids[row]
        return out

    def faiss_array(self) -> np.ndarray:
        return np.frombuffer(self.faiss_ids, dtype=np.int64).copy()

    def keep(self, rows: np.ndarray, dropped: Iterable[ExtId]) -> None:
        """Keep the rows `rows` (sorted positions) only, renumbered from 0; `dropped` are the others' ids."""
        for ext in dropped:
            self.row.pop(ext, None)
        renumbered = np.full(len(self.faiss_ids), -1, dtype=np.int64)
        renumbered[rows] = np.arange(len(rows))
        self.row = {ext: int(renumbered[r]) for ext, r in self.row.items()}
        self.faiss_ids = array("q", self.faiss_array()[rows].tobytes())


def _is_int(s: str) -> bool:
    return isinstance(cell_value(s), int)


@dataclass
class IngestResult:
    ids: DocIds
    vectors: np.ndarray | None  # row i is the vector of FAISS id ids.faiss_ids[i]; None when not encoding
    rows_read: int = 0
    skipped_empty: int = 0
    duplicate_ids: int = 0
    read_s: float = 0.0
    encode_s: float = 0.0
    brought_vectors: bool = False  # the rows brought their vectors (nothing was encoded)
    passages: int = 0  # rows made by splitting documents (0: documents whole)
    docs_split: int = 0  # documents cut into more than one passage
    texts_cut: int = 0  # documents whose text was cut at `doc_limits.MAX_DOC_CHARS`
    passages_cut: int = 0  # documents whose passages past `doc_limits.MAX_PASSAGES` were dropped

    @property
    def n_docs(self) -> int:
        return len(self.ids)


def _batches(source: CorpusSource, limit: int | None, progress: Callable[[int], None],
             splitter: BuildPassages | None, result: IngestResult) -> Iterator[DocBatch]:
    """The rows of `source` a batch at a time: Parquet's as read (column-wise where it can be,
    `indexer.corpus_batches`), any other format's grouped by `INGEST_CHUNK` rows or `INGEST_CHUNK_CHARS`. With
    `splitter`, a document's rows are its passages (`BuildPassages.rows_of`), read one document at a time."""
    if source.format == "parquet" and splitter is None:
        yield from source.parquet_batches(limit, progress)
        return
    docs: list[Doc] = []
    chars = 0
    for read in source.docs(limit, progress):
        result.rows_read += splitter is not None  # rows read are documents, not the passages made of them
        rows = [read] if splitter is None or not read.text else [
            Doc(ext, text, meta, read.where) for ext, text, meta in splitter.rows_of(read)]
        for doc in rows:
            docs.append(doc)
            chars += len(doc.text)
            if len(docs) >= INGEST_CHUNK or chars >= INGEST_CHUNK_CHARS:
                yield batch_of_docs(docs)
                docs, chars = [], 0
    if docs:
        yield batch_of_docs(docs)


class _Ingest:
    """One streaming ingest's state, shared by its batches: the ids given so far, the vectors and the counts."""

    def __init__(self, source: CorpusSource, writer: CorpusStoreWriter, encoder: OnnxEncoder | None,
                 bar: ChunkProgress, *, batch_size: int | None, vectors_path: Path | None, passages: bool) -> None:
        self.writer, self.encoder, self.bar, self.batch_size, self.passages = writer, encoder, bar, batch_size, passages
        self.ids = DocIds()
        self.rows = VectorRows(encoder.dim, vectors_path) if encoder is not None else None
        self.result = IngestResult(self.ids, None)
        self.rows_vectors = RowVectors(source.fields.vector, encoder is not None)

    def put(self, batch: DocBatch) -> None:
        """A batch's rows with a text into the store, under their FAISS ids, and their vectors (encoded or brought)
        into the vector rows."""
        result = self.result
        result.rows_read += len(batch) if not self.passages else 0
        self.rows_vectors.check(batch)
        kept: list[int] = [i for i, text in enumerate(batch.texts) if text]
        result.skipped_empty += len(batch) - len(kept)
        at = self._rows_at(batch.ext_ids if len(kept) == len(batch) else [batch.ext_ids[i] for i in kept])
        if not kept:
            return
        self.bar.start_chunk(len(kept))
        if self.rows is not None:
            self.rows.put(np.asarray(at, dtype=np.int64), self._vectors(batch, kept))
        fids, exts, texts, metas = self.ids.faiss_ids, batch.ext_ids, batch.texts, batch.metas
        self.writer.put([(fids[r], exts[i], texts[i], metas[i]) for i, r in zip(kept, at, strict=True)])
        self.bar.end_chunk(len(self.ids), "passages" if self.passages else "docs")

    def _rows_at(self, exts: list[ExtId]) -> list[int] | range:
        """Each row's row in the vector array (its FAISS id assigned), counting ids an earlier row had."""
        bulk = self.ids.add_own(exts)  # type: ignore[arg-type]
        if bulk is not None:
            return bulk
        at = []
        for ext in exts:
            row, seen = self.ids.add(ext)
            # a document's repeat counts once, not once per passage
            self.result.duplicate_ids += seen and (not self.passages or (parse_passage_id(ext) or (ext, 0))[1] == 0)
            at.append(row)
        return at

    def _vectors(self, batch: DocBatch, kept: list[int]) -> np.ndarray:
        """The kept rows' vectors: brought by the rows, else encoded (only what the encoder keeps is tokenized)."""
        encoder = self.encoder
        assert encoder is not None
        if self.rows_vectors.brought:
            vecs = brought_vectors(batch, kept, encoder.dim, self.rows_vectors.field)
            self.bar.texts_done(len(kept))
            return vecs
        t0 = time.perf_counter()
        max_tokens = encoder.meta.max_length
        vecs = encoder.encode([encoding_prefix(batch.texts[i], max_tokens) for i in kept], self.batch_size,
                              on_progress=self.bar.texts_done)
        self.result.encode_s += time.perf_counter() - t0
        return vecs


def ingest(source: CorpusSource, writer: CorpusStoreWriter, encoder: OnnxEncoder | None, *,
           batch_size: int | None = None, limit: int | None = None, progress: bool = True,
           on_advance: Callable[[int], None] | None = None, vectors_path: Path | None = None,
           splitter: Splitter | None = None) -> IngestResult:
    """Stream `source` into `writer` (and through `encoder`, unless None: the Ray engine encodes elsewhere), a
    batch of rows at a time (`_batches`). `on_advance` hears each move of the progress bar (`ChunkProgress`).
    Rows that bring vectors (every row or none) are not encoded (`indexer.ingest_vectors`). `vectors_path`: the
    vectors' file (memory-mapped); `splitter`: rows are passages (`_rows_of`)."""
    passages = BuildPassages(splitter) if splitter is not None else None
    bar = ChunkProgress(source.total_bytes(), enabled=progress, on_advance=on_advance)
    t_start = time.perf_counter()
    run = _Ingest(source, writer, encoder, bar, batch_size=batch_size, vectors_path=vectors_path,
                  passages=splitter is not None)
    ids, rows, result = run.ids, run.rows, run.result
    try:
        for batch in _batches(source, limit, bar.bytes_read, passages, result):
            run.put(batch)
    finally:
        bar.close()
    result.read_s = time.perf_counter() - t_start - result.encode_s
    result.brought_vectors = bool(run.rows_vectors.brought)
    if rows is not None:
        result.vectors = rows.take()
    if passages is not None:
        result.passages, result.docs_split = passages.passages, passages.docs_split
        result.passages_cut = passages.docs_cut
        if passages.stale:  # a repeated id with fewer passages: its last occurrence wins for all of them
            stale = list(passages.stale)
            _, result.vectors, kept = drop_stale(stale, ids.row, ids.faiss_array(), result.vectors, writer)
            ids.keep(kept, stale)
    if result.duplicate_ids:
        log.warning("%d rows repeated an earlier row's id: the later row replaced it", result.duplicate_ids)
    result.texts_cut = source.texts_cut
    log.info("read %d rows from %s (%s): %d documents%s, %d empty texts skipped, %d duplicate ids, %d texts cut at "
             "%s characters", result.rows_read, source.path, source.format, data_docs(result),
             f", {len(ids)} passages" if passages is not None else "", result.skipped_empty, result.duplicate_ids,
             result.texts_cut, f"{MAX_DOC_CHARS:,}")
    return result


# --- the build ---------------------------------------------------------------------------------------------------

def data_path(data: str) -> Path:
    """The local path of `--data` (a URL is downloaded: only the Quora TSV is published that way)."""
    from indexer.quora import resolve_source
    from indexer.runtime.paths import strata_home

    if data.startswith(("http://", "https://")):
        return resolve_source(data, strata_home() / "downloads")
    path = Path(data).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"data {path} does not exist")
    if not (path.is_file() or path.is_dir()):  # opening a FIFO would wait for a writer; a device reads no rows
        raise CorpusFormatError(f"data {path} is not a regular file or a folder (a FIFO, socket or device)")
    return path


def source_for(cfg: BuildConfig, path: Path) -> CorpusSource:
    return open_corpus(path, id_field=cfg.id_field, text_field=cfg.text_field, title_field=cfg.title_field,
                       metadata_fields=cfg.metadata_fields, queries=cfg.queries, qrels=cfg.qrels,
                       vector_field=cfg.vector_field, follow_symlinks=cfg.follow_symlinks)


def fields_info(source: CorpusSource) -> CorpusFieldsInfo:
    f = source.fields
    return CorpusFieldsInfo(id=f.id, text=f.text, title=f.title,
                            metadata=list(f.metadata) if f.metadata is not None else None)


def listed(entries: list[tuple[str, str]], most: int = 10_000) -> list[SkippedEntry]:
    """(path, reason) pairs as a manifest lists them: the first `most` (the counts beside them are whole)."""
    return [SkippedEntry(path=p, reason=r) for p, r in entries[:most]]


def data_docs(res: IngestResult) -> int:
    """Documents, whether or not they were split into passages (`res.n_docs` counts rows)."""
    return res.rows_read - res.skipped_empty - res.duplicate_ids if res.passages else res.n_docs


def corpus_data_info(source: CorpusSource, res: IngestResult, schema: dict[str, str],
                     loaded: LoadedEvalSet | None) -> DataInfo:
    return DataInfo(source=str(source.path), protocol="corpus", rows_read=res.rows_read,
                    vectors="brought" if res.brought_vectors else "encoded",
                    skipped_empty_texts=res.skipped_empty,
                    n_docs=data_docs(res), texts_cut=res.texts_cut, passages_cut=res.passages_cut,
                    skipped=listed(source.files_report.skipped), read_in_part=listed(source.files_report.cut),
                    n_queries=len(loaded.evalset.query_texts) if loaded else 0, format=source.format,
                    fields=fields_info(source), duplicate_ids=res.duplicate_ids,
                    skipped_files=len(source.files_report.skipped),
                    metadata_schema={k: v for k, v in schema.items() if k != PASSAGE_KEY},
                    eval_source=loaded.source if loaded else None,
                    eval_queries_without_relevant=loaded.stats.without_relevant if loaded else 0,
                    eval_judged_docs_missing=loaded.stats.missing_docs if loaded else 0)


VECTORS_SPILL = ".vectors.f32"  # the build's vectors, memory-mapped in the staging folder (removed before publishing)


def ingest_store(source: CorpusSource, stage: Path, encoder: OnnxEncoder | None, *, batch_size: int | None,
                 limit: int | None, splitter: Splitter | None = None
                 ) -> tuple[IngestResult, dict[str, str], LoadedEvalSet | None]:
    """Write the store of a corpus (documents, metadata, and the evaluation set when queries and qrels are
    there) into `stage`; the vectors come back in the result when `encoder` is given (memory-mapped from
    `stage / VECTORS_SPILL`, which the caller removes once the index is built)."""
    # a full disk names the store, not the folder; a source file that cannot be read keeps its own error
    with storage_errors(stage / STORE, "writing the store", within=stage):
        writer = CorpusStoreWriter(stage / STORE)
        try:
            res = ingest(source, writer, encoder, batch_size=batch_size, limit=limit,
                         vectors_path=stage / VECTORS_SPILL, splitter=splitter)
            if res.n_docs == 0:
                raise CorpusFormatError(f"{source.path}: no documents with text ({res.rows_read} rows read, "
                                        f"{res.skipped_empty} with an empty text)")
            loaded = None
            if source.queries is not None and source.qrels is not None:
                # passages: a judged document is its passage 0's id, and evaluations rank documents by their best
                # passage (`indexer.doc_ranks`)
                ids = res.ids
                resolve = ids.resolve if splitter is None else first_passage_resolver(
                    lambda exts: {e: ids.faiss_ids[ids.row[e]] for e in exts if e in ids.row})
                loaded = load_eval_set(source.queries, source.qrels, resolve)
                writer.put_eval_set(loaded.evalset)
            elif source.queries is not None or source.qrels is not None:
                log.warning("queries and qrels are both needed for an evaluation set; %s alone is ignored",
                            source.queries or source.qrels)
            schema = writer.finish({"source": str(source.path), "protocol": "corpus", "format": source.format})
        except BaseException:
            writer.abort()
            raise
    return res, schema, loaded


def build_corpus(cfg: BuildConfig, root: IndexRoot, encoder: OnnxEncoder, source: CorpusSource,
                 t_start: float) -> Manifest:
    """Build a version from `source` in a staging folder (renamed into `versions/` only when complete) and
    evaluate it when it has queries and qrels; the caller makes it current."""
    splitter, passages = chunking.resolve(cfg.chunk, cfg.overlap, source, encoder)
    version = new_version_name()
    with root.staging(version) as stage:
        res, schema, loaded = ingest_store(source, stage, encoder, batch_size=cfg.batch_size, limit=cfg.rows,
                                           splitter=splitter)
        passages.passages, passages.docs_split = res.passages, res.docs_split
        timings = Timings(load_s=res.read_s, encode_docs_s=res.encode_s)
        vectors = res.vectors
        assert vectors is not None
        index_info = build_version_index(cfg, vectors, res.ids.faiss_array(), stage, timings)
        del vectors
        res.vectors = None
        (stage / VECTORS_SPILL).unlink(missing_ok=True)
        if loaded is not None:
            t0 = time.perf_counter()
            qvecs = encoder.encode(loaded.evalset.query_texts, cfg.batch_size, progress=True, desc="eval queries")
            timings.encode_queries_s = time.perf_counter() - t0
            np.save(stage / QUERY_VECTORS, qvecs)
        manifest = Manifest(
            version=version,
            created_at=datetime.now(timezone.utc),
            model=model_info(cfg.model_dir, encoder.meta),
            index=index_info,
            data=corpus_data_info(source, res, schema, loaded),
            build_seconds=timings,
            lexical=cfg.lexical_info(), default_mode=cfg.default_mode, passages=passages,
        )
        candidates = corpus_probe_candidates(source.queries, source.qrels, loaded.evalset if loaded else None,
                                             loaded.source if loaded else "", res.ids.resolve, cfg.probes)
        doc_ids = res.ids.faiss_array()
        save_and_evaluate(stage, manifest, t_start, evaluate_it=cfg.evaluate and loaded is not None,
                          threads=cfg.threads, target_recall=cfg.target_for(index_info.kind),
                          probe_maker=lambda v: make_probes(candidates, encoder, v.store, doc_ids, cfg.batch_size),
                          report_after=cfg.report_after)
    return manifest
