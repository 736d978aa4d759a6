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


def smallest_nprobe(ivf, queries: np.ndarray, exact_scores: np.ndarray, exact_ids: np.ndarray
                    ) -> tuple[int, float, dict[int, float]]:
    """The fewest lists whose top 10 keeps >= TARGET_RECALL of the exact top 10 (tie-aware), by bisection."""
    from indexer.calibrate import tie_aware_recall

    seen: dict[int, float] = {}

    def recall(p: int) -> float:
        if p not in seen:
            s, i = ivf.search(queries, K, search_params={"nprobe": p})
            seen[p] = tie_aware_recall(s, i, exact_scores, exact_ids)
        return seen[p]

    lo, hi = 1, ivf.nlist
    while lo < hi:
        mid = (lo + hi) // 2
        if recall(mid) >= TARGET_RECALL:
            hi = mid
        else:
            lo = mid + 1
    return hi, recall(hi), seen


def per_query_ms(index, queries: np.ndarray, search_params: dict[str, int]) -> tuple[float, float]:
    """(CPU ms, wall ms) per query. FAISS on 1 thread runs in the calling thread, so the thread's CPU time is the
    search's own cost; on a machine shared with other jobs the wall clock adds the time spent waiting for a core."""
    c0, t0 = time.thread_time(), time.perf_counter()
    for i in range(len(queries)):
        index.search(queries[i:i + 1], K, search_params=search_params)
    return (time.thread_time() - c0) * 1000 / len(queries), (time.perf_counter() - t0) * 1000 / len(queries)


def measure(args: argparse.Namespace, docs: np.ndarray, queries: np.ndarray) -> int:
    from indexer.calibrate import tie_aware_recall
    from indexer.runtime.ann import AUTO_FLAT_BELOW, FlatParams, IvfParams
    from indexer.runtime.faiss_index import DEFAULT_NLIST, DEFAULT_NPROBE, build_index, effective_nlist, set_threads

    set_threads(1)
    sizes = [n for n in args.sizes if n <= len(docs)]
    rows: dict[int, dict] = {}
    indexes: dict[tuple[int, str], tuple[object, dict[str, int]]] = {}
    for n in sizes:
        ids = np.arange(n, dtype=np.int64)
        flat, _, _ = build_index(FlatParams(), docs[:n], ids)
        nlist = effective_nlist(n, DEFAULT_NLIST)
        ivf, _, _ = build_index(IvfParams(nlist=nlist, nlist_requested=DEFAULT_NLIST, nprobe=DEFAULT_NPROBE),
                                docs[:n], ids)
        exact_s, exact_i = flat.search(queries, K)
        nprobe, rec, _ = smallest_nprobe(ivf, queries, exact_s, exact_i)
        s20, i20 = ivf.search(queries, K, search_params={"nprobe": DEFAULT_NPROBE})
        rows[n] = {"nlist": nlist, "nprobe": nprobe, "recall": rec,
                   "recall_default": tie_aware_recall(s20, i20, exact_s, exact_i), "flat": [], "ivf": []}
        indexes[(n, "flat")] = (flat, {})
        indexes[(n, "ivf")] = (ivf, {"nprobe": nprobe})
        print(f"{n:>7} docs: nlist {nlist}, nprobe {nprobe} keeps {rec:.4f} of exact's top 10 "
              f"(default nprobe {DEFAULT_NPROBE}: {rows[n]['recall_default']:.4f})", flush=True)
    order = list(indexes)
    rng = random.Random(0)
    load = [os.getloadavg()[0]]
    for r in range(args.rounds):
        rng.shuffle(order)
        for key in order:
            index, search_params = indexes[key]
            per_query_ms(index, queries[:20], search_params)  # warm the caches this index uses
            rows[key[0]][key[1]].append(per_query_ms(index, queries, search_params))
        load.append(os.getloadavg()[0])
        print(f"round {r + 1}/{args.rounds} done (load average {load[-1]:.1f})", flush=True)
    lines = [f"# `--index auto` crossover: exact (flat) vs IVF at >= {TARGET_RECALL} recall@10 of exact "
             f"({datetime.now(UTC):%Y-%m-%dT%H:%MZ})", "",
             f"`{' '.join(sys.argv)}`", "",
             f"all-MiniLM-L6-v2 (mean pooling, normalised) vectors of unique Quora questions (rows < 300,000); "
             f"{len(queries)} other questions as queries; FAISS on 1 thread, one query per search call; "
             f"{args.rounds} interleaved rounds, median of the round means. Machine: 2 cores shared with other "
             f"jobs, load average {min(load):.1f}–{max(load):.1f} during the rounds. IVF as `indexer build "
             f"--index ivf` builds it (nlist = effective_nlist(n, {DEFAULT_NLIST}), SQfp16 codes) at the fewest "
             f"lists reaching the target on these queries.", "",
             "Latency is CPU time of the searching thread per query (what the search costs; the crossover is read "
             "on it), with wall-clock time beside it (inflated by waiting for a core on this shared machine).", "",
             "| documents | nlist | nprobe for ≥ 0.97 | its recall@10 | recall@10 at nprobe 20 | flat CPU ms | "
             "ivf CPU ms | flat / ivf | flat wall ms | ivf wall ms | flat / ivf (wall) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    crossover = None
    for n in sizes:
        row = rows[n]
        f, i = (float(np.median([c for c, _ in row[k]])) for k in ("flat", "ivf"))
        fw, iw = (float(np.median([w for _, w in row[k]])) for k in ("flat", "ivf"))
        if f <= i:
            crossover = n
        lines.append(f"| {n:,} | {row['nlist']} | {row['nprobe']} | {row['recall']:.4f} | "
                     f"{row['recall_default']:.4f} | {f:.4f} | {i:.4f} | {f / i:.2f} | {fw:.4f} | {iw:.4f} | "
                     f"{fw / iw:.2f} |")
    lines += ["", f"Largest size where exact search costs no more CPU per query than IVF: "
              f"{'none measured' if crossover is None else f'{crossover:,}'}; `AUTO_FLAT_BELOW` is "
              f"{AUTO_FLAT_BELOW:,}."]
    text = "\n".join(lines) + "\n"
    print(text)
    out = REPO / "bench" / "results" / f"index-crossover-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.md"
    out.write_text(text)
    print(f"wrote {out}")
    return 0


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
