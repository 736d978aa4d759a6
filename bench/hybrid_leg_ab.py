"""Hybrid's lexical leg at 10M, this tree against its previous reading of hits, interleaved per query in one process.

    PYTHONPATH=$PWD STRATA_DATA_DIR=/work/shared/data python bench/hybrid_leg_ab.py \\
        [--root ~/.cache/strata-scale/work/root-10000000] [--queries 200]

Two changes to how the tantivy engine reads its hits (`indexer/runtime/lexical_tantivy.py`), measured side by side:
- `EXHAUSTIVE_DEPTH`: an exhaustive query (the bounded leg's selective terms, a term-set filter) first reads 4x the
  hits it needs; before, k + 1, and a tie across the k-th place ran the whole query again 4x deeper;
- `rowsets.in_sorted`: a filter's rows and the exclusions are tested for membership by binary search; before,
  `np.isin`, which hashes both arrays on every call (a 1 % filter holds 100,000 rows at 10M).
"before" is the same code with those two put back (`EXHAUSTIVE_DEPTH = 1`, `in_sorted = np.isin`), switched per
query in alternating order so the machine's load weighs on both sides alike. Per side: the whole hybrid search in
process (`Searcher.run_batch`, the query vector brought as `bench/scale.py` brings it, top_k 10, one FAISS thread),
unfiltered and with `bench/scale.py`'s 1 % filter (`{"bucket": 7}`), wall p50/p99 and the lexical stage's p50, the
tantivy queries run per search, and whether both sides return the same hits (they must: only the cost changes).
Results: bench/results/hybrid-leg-ab-<stamp>.md and .json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench import scale_corpus as sc  # noqa: E402
from bench.runlog import load, log  # noqa: E402
from indexer.runtime import bounded_leg, lexical_tantivy  # noqa: E402

FILTER = {"bucket": 7}


class Counting:
    """The engine's tantivy searcher, counting the queries run through it."""

    def __init__(self, searcher: Any) -> None:
        self.searcher, self.runs = searcher, 0

    def search(self, *args: Any, **kwargs: Any) -> Any:
        self.runs += 1
        return self.searcher.search(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.searcher, name)


def side(name: str) -> None:
    """Switch the engine's hit reading to this tree's ("after") or the previous one ("before")."""
    after = name == "after"
    lexical_tantivy.EXHAUSTIVE_DEPTH = SHIPPED_DEPTH if after else 1
    lexical_tantivy.in_sorted = SHIPPED_IN_SORTED if after else np.isin  # type: ignore[assignment]
    bounded_leg.in_sorted = SHIPPED_IN_SORTED if after else np.isin  # type: ignore[assignment]


SHIPPED_DEPTH = lexical_tantivy.EXHAUSTIVE_DEPTH
SHIPPED_IN_SORTED = lexical_tantivy.in_sorted


def pct(xs: list[float], q: float) -> float:
    return round(float(np.percentile(xs, q)), 2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=sc.cache_dir() / "work" / "root-10000000")
    ap.add_argument("--queries", type=int, default=200, help="at most 300")
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results")
    a = ap.parse_args()
    from indexer.runtime.faiss_index import set_threads
    from indexer.runtime.paths import data_dir
    from indexer.runtime.query import Query
    from indexer.runtime.version import IndexVersion
    from service.engine.searcher import Searcher

    set_threads(1)
    quora = data_dir() / "quora_duplicate_questions.partial.tsv.gz"
    folder = next(p for p in sorted((a.root / "versions").iterdir()) if (p / "manifest.json").is_file())
    searcher = Searcher.pair(IndexVersion(folder, mmap=True), threads=1)
    lex = searcher.index.lexical  # type: ignore[attr-defined]
    counting = Counting(lex.searcher)
    lex.searcher = counting
    qvecs, qtexts = sc.queries(quora), sc.query_texts(quora)  # bench/scale.py's 300 (their first --queries)
    report: dict[str, Any] = {"command": "python bench/hybrid_leg_ab.py " + " ".join(sys.argv[1:]),
                              "version": str(folder), "load_start": load()}
    rows: dict[str, dict[str, dict[str, list[float]]]] = {}
    same: dict[str, int] = {}
    for flt_name, flt in (("none", None), ("1 %", FILTER)):
        for name in ("before", "after"):  # warm both: the filter's first use builds its rows (seconds at 10M)
            side(name)
            searcher.run_batch([Query([qtexts[0]], 10, mode="hybrid", vectors=qvecs[:1], filter=flt)])
        got: dict[str, list[list[int]]] = {"before": [], "after": []}
        for i in range(a.queries):
            for name in (("before", "after") if i % 2 == 0 else ("after", "before")):
                side(name)
                counting.runs = 0
                t0 = time.perf_counter()
                r = searcher.run_batch([Query([qtexts[i]], 10, mode="hybrid", vectors=qvecs[i:i + 1],
                                              filter=flt)])[0]
                ms = (time.perf_counter() - t0) * 1000
                assert r.error is None, r.error
                rec = rows.setdefault(flt_name, {}).setdefault(name, {})
                rec.setdefault("total_ms", []).append(ms)
                rec.setdefault("lexical_ms", []).append(float(r.stages.lexical_ms))
                rec.setdefault("tantivy_runs", []).append(counting.runs)
                got[name].append([h.faiss_id for h in r.hits[0]])
        same[flt_name] = sum(b == a_ for b, a_ in zip(got["before"], got["after"], strict=True))
        log(f"filter {flt_name}: done, load {load()}")
    side("after")
    searcher.close()
    report["load_end"] = load()
    summary = {f: {s: {"p50_ms": pct(v["total_ms"], 50), "p99_ms": pct(v["total_ms"], 99),
                       "lexical_p50_ms": pct(v["lexical_ms"], 50),
                       "tantivy_runs_mean": round(statistics.fmean(v["tantivy_runs"]), 2)}
                   for s, v in sides.items()} for f, sides in rows.items()}
    report |= {"summary": summary, "same_hits": same, "queries": a.queries}
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%MZ")
    lines = [f"# Hybrid's lexical leg at 10M: this tree against the previous hit reading ({stamp})", "",
             f"`{report['command']}`; version `{folder.name}`; load at start {report['load_start']}, at end "
             f"{report['load_end']}; {a.queries} Quora questions, sides alternated per query, in process.", "",
             "| filter | side | total p50 ms | p99 | lexical stage p50 | tantivy queries per search | same hits |",
             "|---|---|---|---|---|---|---|"]
    for f, sides in summary.items():
        for s, v in sides.items():
            lines.append(f"| {f} | {s} | {v['p50_ms']} | {v['p99_ms']} | {v['lexical_p50_ms']} | "
                         f"{v['tantivy_runs_mean']} | {same[f]}/{a.queries} |")
        lines.append(f"| {f} | after/before | {summary[f]['after']['p50_ms'] / summary[f]['before']['p50_ms']:.2f}x "
                     "| | | | |")
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / f"hybrid-leg-ab-{stamp}.json").write_text(json.dumps(report | {"raw": rows}, indent=1))
    (a.out / f"hybrid-leg-ab-{stamp}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
