"""SCALE SMOKE TEST (the CI's scale target; about a minute on a quiet 2-core machine, well under 3): a
200,000-document version built from brought vectors (Parquet, 384 dimensions, clustered unit vectors; nothing
encoded), its bytes per document, then a real server (uvicorn on 127.0.0.1) swapping to a second version under
search load while its memory is sampled every 20 ms.

What it asserts, and why it can fail:
- bytes per document: the IVF file holds 2 bytes per dimension (fp16 codes) + 8 (the id) + the lists' overhead,
  the store its text, metadata and ids: a codec or id-map change that costs more per document fails it;
- the swap: the served version is opened memory-mapped (STRATA_MMAP, default on), so the process's anonymous
  RSS (its own memory, not page cache) during the swap stays below 1.3× its steady value. Opening versions
  into memory instead (STRATA_MMAP=0) holds both versions' vectors during a swap: +0.3 GB on ~0.5 GB here.
Larger sizes (100k to 1M, with lexical, filters, wrk latencies) are bench/scale.py's.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from indexer.runtime.layout import IndexRoot
from indexer.runtime.manifest import Manifest
from tests.conftest import indexer_cli, start_server, stop_server

N_DOCS = 200_000
DIM = 384
CLUSTERS = 500
BYTES_PER_DOC_INDEX = 2 * DIM + 8 + 16  # fp16 codes, the int64 id, 16 bytes of list overhead and quantizer
BYTES_PER_DOC_STORE = 160  # ~25-character texts, a metadata object, the id map


def anon_rss(pid: int) -> int:
    """The process's anonymous resident memory (RssAnon, bytes): its own copies, not mapped files' page cache."""
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("RssAnon:"))
    return int(line.split()[1]) * 1024


class PeakAnon:
    """The peak of `anon_rss(pid)` every 20 ms while the `with` block runs."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, anon_rss(self.pid))
            self._stop.wait(0.02)

    def __enter__(self) -> PeakAnon:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture(scope="module")
def encoder_384(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 1-layer random BERT of hidden size 384, exported: only its dimension matters (vectors are brought)."""
    from models.export import export_encoder
    from tests.tiny_bert import make_tiny_bert

    tmp = tmp_path_factory.mktemp("enc384")
    out = tmp / "onnx"
    export_encoder(make_tiny_bert(tmp / "ckpt", layers=1, hidden=DIM), out, pooling="cls")
    return out


def write_corpus(path: Path) -> None:
    """Clustered unit vectors (500 centres, noise of norm ~0.5 around each), short texts, a `bucket` field."""
    rng = np.random.default_rng(3)
    centres = rng.normal(size=(CLUSTERS, DIM)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    writer = None
    for start in range(0, N_DOCS, 50_000):
        n = 50_000
        v = centres[rng.integers(0, CLUSTERS, n)] + rng.normal(size=(n, DIM)).astype(np.float32) * (0.5 / DIM**0.5)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        table = pa.table({"id": np.arange(start, start + n), "text": [f"document {i} about sky" for i in
                                                                     range(start, start + n)],
                          "bucket": rng.integers(0, 100, n), "vector": pa.FixedSizeListArray.from_arrays(
                              pa.array(v.ravel()), DIM)})
        writer = writer or pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
    assert writer is not None
    writer.close()


def build(data: Path, root: Path, model: Path) -> Manifest:
    r = indexer_cli("build", "--model", str(model), "--data", str(data), "--root", str(root), "--index", "ivf",
                    "--nlist", "256", "--no-calibrate", "--no-lexical", "--no-eval", "--threads", "2",
                    "--keep", "2", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    ir = IndexRoot(root)
    return Manifest.load(ir.version_dir(ir.current_version() or ""))


@pytest.mark.scale
def test_200k_documents_from_vectors_bytes_per_document_and_swap_memory(tmp_path: Path, encoder_384: Path) -> None:
    data, root = tmp_path / "corpus.parquet", tmp_path / "root"
    write_corpus(data)
    first = build(data, root, encoder_384)
    assert first.data.vectors == "brought" and first.index.ntotal == N_DOCS
    assert first.build_seconds.encode_docs_s == 0.0
    folder = IndexRoot(root).version_dir(first.version)
    per_doc_index = (folder / "index.faiss").stat().st_size / N_DOCS
    per_doc_store = (folder / "store.sqlite").stat().st_size / N_DOCS
    assert 2 * DIM + 8 <= per_doc_index <= BYTES_PER_DOC_INDEX, per_doc_index
    assert per_doc_store <= BYTES_PER_DOC_STORE, per_doc_store

    queries = np.random.default_rng(5).normal(size=(64, DIM)).astype(np.float32).tolist()
    server = start_server(tmp_path, {"STRATA_INDEX_ROOT": str(root), "STRATA_WATCH_INTERVAL_S": "0",
                                     "STRATA_WORKERS": "2", "STRATA_THREADS": "1"}, timeout=120)
    try:
        with server.client() as c:
            def search_all() -> None:
                for q in queries:
                    r = c.post("/search", json={"vector": q, "top_k": 10})
                    assert r.status_code == 200, r.text

            search_all()  # warm: the probed lists' pages are read in
            steady = anon_rss(server.proc.pid)
            second = build(data, root, encoder_384)
            assert second.version != first.version
            stop = threading.Event()

            def load() -> None:
                while not stop.is_set():
                    search_all()

            loader = threading.Thread(target=load)
            with PeakAnon(server.proc.pid) as peak:
                loader.start()
                r = c.post("/admin/reload")
                stop.set()
                loader.join()
            assert r.status_code == 200 and r.json()["index_version"] == second.version, r.text
        ratio = peak.peak / steady
        assert ratio < 1.3, f"anonymous RSS during the swap {peak.peak / 2**20:.0f} MiB, steady " \
                            f"{steady / 2**20:.0f} MiB: {ratio:.2f}x"
    finally:
        stop_server(server)
