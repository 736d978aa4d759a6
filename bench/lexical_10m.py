"""Where a lexical `/search` spends its time on the 10M-document version, and the tantivy engine's query path
before and after its pruning (`indexer/runtime/lexical_tantivy.py`), side by side in one process.

The version is opened read-only, in process (no HTTP), memory-mapped as served (`open_lexical(..., mmap=True)`),
on the bench's own queries (`bench.scale_corpus.query_texts`: the first `--queries` of the texts
`bench.scale.search_bodies` sends). Four cases, as `/search` runs them (`LexicalIndex.search`):
- **lexical k=10**: `mode: lexical`, top_k 10;
- **hybrid's lexical side, k=100**: what a hybrid search asks of BM25 (`fusion.HYBRID_DEPTH`);
- the same two with the scale bench's **1 % filter** (`{"bucket": 7}`: the FAISS ids of the corpus rows with
  bucket 7, read from the corpus's Parquet files, 100,000 of 10M: past `TERM_SET_MAX`, the "wide" path).
Per query, "before" (the code of the parent commit, kept below as `before_top_rows`: every posting read, a wide
filter read 4x deeper from 4(k+1) hits on) and "after" (the engine as it is) run one after the other, in
alternating order; both report wall and CPU ms of the calling thread (tantivy searches on it). Every answer is
compared: the same ids in the same order, scores within 1e-5.

Also printed: terms per query, the postings a query reads (sum of its terms' document frequencies), and how
often the pruning plan applies (`Engine._plan`).

    nice -n 10 python bench/lexical_10m.py [--root ~/.cache/strata-scale/work/root-10000000] [--queries 100]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

QUORA = Path("/work/shared/data/quora_duplicate_questions.partial.tsv.gz")
DEFAULT_ROOT = Path.home() / ".cache" / "strata-scale" / "work" / "root-10000000"


def before_top_rows(index: object, terms: list[str], k: int, allowed_rows: np.ndarray | None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The tantivy engine's `top_rows` before pruning (the parent commit's, no tombstones), for the comparison."""
    from indexer.runtime import lexical_tantivy as lt
    from indexer.runtime.lexical import top_k_rows

    query = index._query(terms, allowed_rows)  # type: ignore[attr-defined]
    wide = allowed_rows is not None and len(allowed_rows) > lt.TERM_SET_MAX
    ntotal = index.ntotal  # type: ignore[attr-defined]
    limit = min(ntotal, k + 1 if not wide else 4 * k + 1)
    while True:
        scores, rows = index._hits(query, limit)  # type: ignore[attr-defined]
        keep = np.ones(len(rows), bool)
        if wide:
            keep &= np.isin(rows, allowed_rows)  # type: ignore[arg-type]
        exhausted = len(rows) < limit or limit >= ntotal
        if exhausted or (keep.sum() >= k and scores[keep][k - 1] > scores[-1]):
            return top_k_rows(scores[keep], rows[keep], k)
        limit = min(ntotal, limit * 4)


def open_version(root: Path) -> tuple[object, Path]:
    from indexer.runtime.lexical import open_lexical
    from indexer.runtime.manifest import LexicalInfo

    folder = next(p for p in sorted((root / "versions").iterdir()) if (p / "manifest.json").is_file())
    info = LexicalInfo(**json.loads((folder / "manifest.json").read_text())["lexical"])
    return open_lexical(folder, info, mmap=True), folder


def filter_rows(index: object, n: int, bucket: int = 7) -> np.ndarray:
    """The rows of the corpus documents with `bucket` (the scale bench's 1 % filter)."""
    import pyarrow.parquet as pq

    from bench.scale_corpus import cache_dir

    ids = []
    for part in sorted((cache_dir() / f"corpus-{n}-s1").glob("part-*.parquet")):
        t = pq.read_table(part, columns=["id", "bucket"])
        ids.append(t.column("id").to_numpy()[t.column("bucket").to_numpy() == bucket])
    return index.rows_of(np.concatenate(ids))  # type: ignore[attr-defined,no-any-return]


def timed(fn: object) -> tuple[float, float, tuple[np.ndarray, np.ndarray]]:
    w, c = time.perf_counter(), time.thread_time()
    got = fn()  # type: ignore[operator]
    return (time.perf_counter() - w) * 1000, (time.thread_time() - c) * 1000, got


def pct(xs: list[float], p: float) -> float:
    return float(np.percentile(xs, p)) if xs else math.nan


def run_case(index: object, term_lists: list[list[str]], k: int, allowed: np.ndarray | None) -> dict[str, object]:
    times: dict[str, dict[str, list[float]]] = {s: {"wall": [], "cpu": []} for s in ("before", "after")}
    same = 0
    for i, terms in enumerate(term_lists):
        runs = {"before": lambda t=terms: before_top_rows(index, t, k, allowed),
                "after": lambda t=terms: index.top_rows(t, k, allowed, None)}  # type: ignore[attr-defined]
        got = {}
        for side in (("before", "after") if i % 2 == 0 else ("after", "before")):
            w, c, got[side] = timed(runs[side])
            times[side]["wall"].append(w)
            times[side]["cpu"].append(c)
        (bs, br), (as_, ar) = got["before"], got["after"]
        same += int(br.tolist() == ar.tolist() and np.allclose(bs, as_, rtol=1e-5, atol=0))
    out: dict[str, object] = {"k": k, "filter": "none" if allowed is None else f"{len(allowed):,} rows",
                              "queries": len(term_lists), "same_answers": same}
    for side, t in times.items():
        for what, xs in t.items():
            out[f"{side}_{what}_p50"] = round(pct(xs, 50), 2)
            out[f"{side}_{what}_p99"] = round(pct(xs, 99), 2)
            out[f"{side}_{what}_mean"] = round(statistics.fmean(xs), 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="a bench/scale.py root (read only)")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = ap.parse_args()
    from bench.scale_corpus import query_texts

    load0 = os.getloadavg()
    index, folder = open_version(args.root)
    n = index.ntotal  # type: ignore[attr-defined]
    texts = query_texts(QUORA)[: args.queries]
    t0 = time.perf_counter()
    term_lists = [index.analyzer.terms(t) for t in texts]  # type: ignore[attr-defined]
    analyse_ms = (time.perf_counter() - t0) * 1000 / len(texts)
    postings = [sum(index.doc_freq(t) for t in terms) for terms in term_lists]  # type: ignore[attr-defined]
    planned = {k: sum(bool(index._plan(t, k + 1)) for t in term_lists) for k in (10, 100)}  # type: ignore[attr-defined]
    allowed = filter_rows(index, n)
    rows = [run_case(index, term_lists, k, a) for a in (None, allowed) for k in (10, 100)]
    load1 = os.getloadavg()
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%MZ")
    segs = index.searcher.num_segments  # type: ignore[attr-defined]
    lines = [f"# Lexical query path at {n:,} documents: tantivy before/after pruning ({stamp})", "",
             f"Version `{folder}` (tantivy, {segs} segments), opened read-only, memory-mapped; "
             f"`nice -n 10 python bench/lexical_10m.py --root {args.root} --queries {args.queries}`.",
             f"Load average (1/5/15 min) at start {load0[0]:.2f}/{load0[1]:.2f}/{load0[2]:.2f}, at end "
             f"{load1[0]:.2f}/{load1[1]:.2f}/{load1[2]:.2f} on 2 cores (other helpers and test suites running): "
             "compare the CPU columns, and before against after (interleaved per query).", "",
             f"Queries: {len(texts)}, terms per query after analysis: mean "
             f"{statistics.fmean(map(len, term_lists)):.1f}, max {max(map(len, term_lists))}; analysis "
             f"{analyse_ms:.3f} ms per query; postings read by the flat disjunction: median "
             f"{statistics.median(postings):,.0f}, max {max(postings):,}. Pruning applies "
             f"(a non-empty plan) to {planned[10]} of {len(texts)} queries at k=10, {planned[100]} at k=100.", "",
             "| k | filter | same answers | before wall p50/p99 | before CPU p50/p99/mean | after wall p50/p99 "
             "| after CPU p50/p99/mean | CPU mean ratio |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['k']} | {r['filter']} | {r['same_answers']}/{r['queries']} | "
                     f"{r['before_wall_p50']} / {r['before_wall_p99']} | {r['before_cpu_p50']} / "
                     f"{r['before_cpu_p99']} / {r['before_cpu_mean']} | "
                     f"{r['after_wall_p50']} / {r['after_wall_p99']} | "
                     f"{r['after_cpu_p50']} / {r['after_cpu_p99']} / {r['after_cpu_mean']} | "
                     f"{float(r['after_cpu_mean']) / max(float(r['before_cpu_mean']), 1e-9):.2f} |")  # type: ignore[arg-type]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"lexical-10m-{stamp}.md").write_text(text)
    (args.out / f"lexical-10m-{stamp}.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
