"""Where exact search stops being as fast as IVF at the recall Strata asks of IVF: the `--index auto` crossover.

For corpora of 2k … 100k real Quora questions (rows < 300,000, unique texts) encoded with all-MiniLM-L6-v2 (its
own mean pooling, L2-normalised), at each size:
- **flat**: exact inner-product search (`FlatIndex`, what `--index flat` builds);
- **ivf**: what `--index ivf` builds by default (`effective_nlist(n, 1024)` lists, fp16 codes), searched at the
  smallest nprobe whose top 10 keeps ≥ 0.97 of the exact top 10 on the bench's queries (other Quora questions,
  not in the corpus: query-like probes, not documents as queries);
- per-query latency of both, one query at a time, FAISS on 1 thread, in interleaved rounds (each round times
  every (size, kind) once, in a shuffled order, so drifting machine load hits them alike); the median over rounds
  of each round's mean.
Prints the table and the crossover (the largest size at which flat is no slower than ivf), and writes
bench/results/index-crossover-<UTC>.md. The vectors are cached (`--cache`), the encoding runs once.

    python bench/index_crossover.py [--sizes 2000,5000,10000,20000,50000,100000] [--queries 500] [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from indexer.quora import HELD_OUT_FROM, read_rows  # noqa: E402
from indexer.runtime.paths import data_dir  # noqa: E402

TARGET_RECALL = 0.97
K = 10


def load_texts(quora: Path, n_docs: int, n_queries: int) -> tuple[list[str], list[str]]:
    """The first `n_docs` unique questions of rows < 300,000, and the next `n_queries` unique ones."""
    seen: set[str] = set()
    out: list[str] = []
    for row in read_rows(quora):
        if row.id >= HELD_OUT_FROM:
            break
        for text in (row.question1, row.question2):
            key = text.strip().lower()
            if text and key not in seen:
                seen.add(key)
                out.append(text)
        if len(out) >= n_docs + n_queries:
            break
    return out[:n_docs], out[n_docs:n_docs + n_queries]


def encode(model, texts: list[str], batch: int = 128) -> np.ndarray:
    return model.encode(texts, batch_size=batch, normalize_embeddings=True, convert_to_numpy=True).astype(np.float32)


def vectors(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray]:
    """(documents, queries) vectors; encoded in chunks saved to `--cache` as they finish, so an interrupted
    encoding resumes, and `--sizes` up to what is cached can be measured meanwhile."""
    cache = Path(args.cache)
    n_docs = max(args.sizes)
    docs_v = np.zeros((0, 384), np.float32)
    queries_v = None
    if cache.is_file():
        data = np.load(cache)
        docs_v, queries_v = data["docs"], data["queries"]
        if len(docs_v) >= n_docs and len(queries_v) >= args.queries:
            return docs_v[:n_docs], queries_v[:args.queries]
    docs, queries = load_texts(Path(args.quora), n_docs, args.queries)
    from sentence_transformers import SentenceTransformer

    from models.checkpoint import default_checkpoint

    model = SentenceTransformer(str(default_checkpoint()), device="cpu")
    if queries_v is None or len(queries_v) < args.queries:
        queries_v = encode(model, queries)
    t0, start = time.perf_counter(), len(docs_v)
    print(f"encoding documents {start}..{len(docs)} with all-MiniLM-L6-v2 (mean, normalised)", flush=True)
    cache.parent.mkdir(parents=True, exist_ok=True)
    for lo in range(start, len(docs), args.chunk):
        docs_v = np.concatenate([docs_v, encode(model, docs[lo:lo + args.chunk])])
        np.savez(cache.with_suffix(".tmp.npz"), docs=docs_v, queries=queries_v)
        os.replace(cache.with_suffix(".tmp.npz"), cache)
        rate = (len(docs_v) - start) / (time.perf_counter() - t0)
        print(f"  {len(docs_v)}/{len(docs)} documents ({rate:.0f}/s, ETA {(len(docs) - len(docs_v)) / rate:.0f} s)",
              flush=True)
    return docs_v, queries_v


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quora", default=str(data_dir() / "quora_duplicate_questions.partial.tsv.gz"))
    p.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")],
                   default=[2000, 5000, 10000, 20000, 50000, 100000])
    p.add_argument("--queries", type=int, default=500)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--cache", default="/tmp/strata-bench/crossover-vectors.npz")
    p.add_argument("--chunk", type=int, default=5000, help="documents encoded between saves of --cache")
    p.add_argument("--encode-only", action="store_true")
    args = p.parse_args()
    docs, queries = vectors(args)
    if args.encode_only:
        return 0
    return measure(args, docs, queries)


if __name__ == "__main__":
    raise SystemExit(main())
