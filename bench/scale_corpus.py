"""The corpora of `bench/scale.py`: Quora's real questions and their real vectors, grown to any size.

How a corpus of N documents is made (seeded, streamed to Parquet a file of `ROWS_PER_FILE` rows at a time):
- **Seeds.** The distinct questions of the Quora TSV (rows < 300,000 only: the held-out rows stay unseen), of which
  a sample of `SEED_TEXTS` is encoded once with the default encoder (all-MiniLM-L6-v2, mean pooling, exported to
  ONNX) and cached outside git (`STRATA_SCALE_CACHE`, default ~/.cache/strata-scale). Those are real texts with
  their real vectors.
- **Documents.** Document i < SEED_TEXTS is seed i, as is. Past that, document i recombines two seeds a and b
  (drawn uniformly): its text is the first half of a's words and the second half of b's (real words in real
  proportions: BM25's postings and vocabulary grow like a real corpus's, Heaps' law included, and most
  documents share terms with many others), and its vector is `normalise(0.8·v_a + 0.2·v_b + noise)` with Gaussian
  noise of norm ~0.25: it lies near a real vector, a little towards another one, so the corpus keeps the real
  vectors' cluster structure (the thing IVF lists, k-means and recall depend on), without exact duplicates.
- **Metadata.** `bucket` (0..99, uniform: `{"bucket": 7}` is a 1 % selective filter), `year` (2000..2025) and
  `lang` (8 values, skewed), the kind of fields a filter names.

Why the figures carry over: cost per document (bytes of codes, ids, store rows, postings) depends on the
dimension, the codec and text lengths, which are real; search cost depends on nlist, nprobe and how vectors
cluster (real clusters, blurred); BM25's cost on postings lengths, which follow the real term distribution. What
does not carry over: answer *quality* past the seeds (recombined texts are not real questions), which is why
recall is measured against exact search on the same vectors and not as nDCG.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from bench.common import log

SEED_TEXTS = 10_000
ROWS_PER_FILE = 100_000
LANGS = ("en", "en", "en", "en", "de", "fr", "es", "pt", "it", "ja")
NOISE_NORM = 0.25


def cache_dir() -> Path:
    d = Path(os.environ.get("STRATA_SCALE_CACHE", Path.home() / ".cache" / "strata-scale"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def encoder_dir() -> Path:
    """all-MiniLM-L6-v2 (mean) exported once into the cache."""
    out = cache_dir() / "minilm-mean"
    if not (out / "encoder.json").is_file():
        from models.checkpoint import default_checkpoint
        from models.export import export_encoder

        log(f"exporting the default encoder to {out}")
        export_encoder(default_checkpoint(), out, pooling="mean")
    return out


def quora_texts(path: Path) -> list[str]:
    """Distinct questions of rows < 300,000 (held-out rows never read into a bench corpus), in file order."""
    from indexer.quora import read_rows

    seen: dict[str, None] = {}
    for row in read_rows(path):
        if row.id >= 300_000:
            break
        for t in (row.question1, row.question2):
            t = t.strip()
            if t:
                seen.setdefault(t)
    return list(seen)


def seeds(quora: Path, n: int = SEED_TEXTS) -> tuple[list[str], np.ndarray]:
    """(texts, vectors) of `n` real questions drawn from the Quora TSV, encoded once and cached."""
    import json

    texts_file, vecs_file = cache_dir() / f"seeds-{n}.json", cache_dir() / f"seeds-{n}.npy"
    if texts_file.is_file() and vecs_file.is_file():
        return json.loads(texts_file.read_text()), np.load(vecs_file)
    from indexer.runtime.encoder import OnnxEncoder

    allt = quora_texts(quora)
    rng = np.random.default_rng(0)
    picked = [allt[i] for i in np.sort(rng.choice(len(allt), size=min(n, len(allt)), replace=False))]
    log(f"encoding {len(picked)} of {len(allt)} distinct Quora questions (cached in {cache_dir()})")
    enc = OnnxEncoder(encoder_dir(), threads=2)
    vecs = enc.encode(picked, 64, progress=True, desc="seeds").astype(np.float32)
    np.save(vecs_file, vecs)
    texts_file.write_text(json.dumps(picked))
    return picked, vecs


def make_rows(texts: list[str], vecs: np.ndarray, start: int, stop: int, seed: int
              ) -> tuple[list[str], np.ndarray, dict[str, list[object]]]:
    """Documents [start, stop) of the corpus (see the module docstring): texts, unit vectors, metadata."""
    rng = np.random.default_rng([seed, start])
    n, s, dim = stop - start, len(texts), vecs.shape[1]
    idx = np.arange(start, stop)
    a = np.where(idx < s, idx % s, rng.integers(0, s, n))
    b = rng.integers(0, s, n)
    out_texts: list[str] = []
    for i, (ai, bi) in enumerate(zip(a, b, strict=True)):
        if idx[i] < s:
            out_texts.append(texts[ai])
            continue
        wa, wb = texts[ai].split(), texts[bi].split()
        out_texts.append(" ".join(wa[: max(1, len(wa) // 2)] + wb[len(wb) // 2 :]))
    noise = rng.normal(size=(n, dim)).astype(np.float32) * (NOISE_NORM / np.sqrt(dim))
    v = np.where((idx < s)[:, None], vecs[a], 0.8 * vecs[a] + 0.2 * vecs[b] + noise)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    meta = {"bucket": rng.integers(0, 100, n).tolist(), "year": rng.integers(2000, 2026, n).tolist(),
            "lang": [LANGS[k] for k in rng.integers(0, len(LANGS), n)]}
    return out_texts, v.astype(np.float32), meta


def corpus(quora: Path, n_docs: int, seed: int = 1) -> Path:
    """The folder of Parquet files of an `n_docs` corpus (id, text, vector, bucket, year, lang), made once."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = cache_dir() / f"corpus-{n_docs}-s{seed}"
    done = folder / ".complete"
    if done.is_file():
        return folder
    texts, vecs = seeds(quora)
    folder.mkdir(parents=True, exist_ok=True)
    dim = vecs.shape[1]
    for k, start in enumerate(range(0, n_docs, ROWS_PER_FILE)):
        path = folder / f"part-{k:05d}.parquet"
        if path.is_file():  # resumable: parts are written whole (renamed into place)
            continue
        stop = min(n_docs, start + ROWS_PER_FILE)
        t, v, meta = make_rows(texts, vecs, start, stop, seed)
        table = pa.table({"id": pa.array(np.arange(start, stop), pa.int64()), "text": t,
                          "vector": pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), dim), **meta})
        tmp = path.with_suffix(".tmp")
        pq.write_table(table, tmp)
        tmp.rename(path)
        log(f"corpus {n_docs}: rows {start}-{stop} written")
    done.write_text("ok")
    return folder


def queries(quora: Path, n: int = 300, seed: int = 99) -> np.ndarray:
    """Query vectors: real seed vectors perturbed like documents (so they sit where documents are) but drawn
    with another seed, so that none is a document."""
    texts, vecs = seeds(quora)
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, len(vecs), n), rng.integers(0, len(vecs), n)
    noise = rng.normal(size=(n, vecs.shape[1])).astype(np.float32) * (NOISE_NORM / np.sqrt(vecs.shape[1]))
    q = 0.8 * vecs[a] + 0.2 * vecs[b] + noise
    return (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


def query_texts(quora: Path, n: int = 300, seed: int = 99) -> list[str]:
    texts, _ = seeds(quora)
    rng = np.random.default_rng(seed)
    return [texts[i] for i in rng.integers(0, len(texts), n)]


if __name__ == "__main__":
    import sys

    from indexer.runtime.paths import data_dir

    q = data_dir() / "quora_duplicate_questions.partial.tsv.gz"
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    for size in sys.argv[1:] or ["100000"]:
        print(corpus(q, int(size)))
