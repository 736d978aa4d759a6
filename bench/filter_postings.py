"""A filter's own postings (`forward_index.RowPostings`) against the paths a filtered lexical search takes without
them, side by side in one process on one version.

    PYTHONPATH=$PWD STRATA_DATA_DIR=/work/shared/data python -m bench.filter_postings --version VERSION_DIR

`--version`: a built version whose lexical engine is PISA (the scale corpus at 1M or 10M: `bench/scale.py`). For
each filter share (`--shares`, default 1 %, 3 %, 5 %, 10 %: that share of the rows drawn at random, seeded) the held-out
Quora questions (rows >= 300,000) run, interleaved, as:

- `exact`: the lexical mode's top 10 without postings (the forward index's rows scored for a filter of at most
  `FORWARD_MAX` rows, PISA over-fetched at the filter's selectivity for a wider one);
- `leg`: hybrid's lexical leg without postings (`bounded_leg.begin` at the served threshold);
- `postings`, `postings leg`: the same two with the filter's postings prepared (the leg is then exact).

Wall time per query (p50 / mean / p99), the postings' build time and size, and whether the prepared top 10 equals
the exact one (`exact`'s). Results: bench/results/filter-postings-<N>-<stamp>.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from bench import scale_corpus as sc
from bench.common import load, log
from bench.pisa_order import QUORA, RESULTS, open_pisa_version


def timed(calls: dict[str, object], texts: list[str], rounds: int) -> dict[str, list[float]]:
    """ms per call, each question's calls interleaved, their order flipped every other question."""
    ms: dict[str, list[float]] = {name: [] for name in calls}
    names = list(calls)
    for rnd in range(rounds):
        for i, q in enumerate(texts):
            for name in (names if (i + rnd) % 2 else names[::-1]):
                t0 = time.perf_counter()
                calls[name](q)  # type: ignore[operator]
                ms[name].append((time.perf_counter() - t0) * 1000)
    return ms


def on_share(v, share: float, texts: list[str], rounds: int) -> list[str]:  # noqa: ANN001 (an IndexVersion)
    from indexer.runtime import bounded_leg as bl
    from indexer.runtime.forward_index import RowPostings

    lex = v.lexical
    rng = np.random.default_rng(int(share * 1e6))
    rows = np.sort(rng.choice(lex.ntotal, max(1, int(share * lex.ntotal)), replace=False)).astype(np.int64)
    unprepared = rows.copy()  # another array: never prepared
    t0 = time.perf_counter()
    built = RowPostings.build(lex.forward, rows)
    build_ms = (time.perf_counter() - t0) * 1000
    lex.postings.put(rows, built)
    assert lex.prepared(rows) and not lex.prepared(unprepared)
    calls = {"exact": lambda q: lex.search(q, 10, allowed_rows=unprepared),
             "leg": lambda q: bl.begin(lex, q, 100, allowed_rows=unprepared),
             "postings": lambda q: lex.search(q, 10, allowed_rows=rows),
             "postings leg": lambda q: bl.begin(lex, q, 100, allowed_rows=rows)}
    same = sum(np.array_equal(calls["exact"](q)[1], calls["postings"](q)[1]) for q in texts)
    ms = timed(calls, texts, rounds)
    base = np.array(ms["leg"])
    out = []
    for name, t in ms.items():
        t = np.array(t)
        out.append(f"| {share:.0%} ({len(rows):,} rows) | {name} | {np.median(t):.2f} / {t.mean():.2f} / "
                   f"{np.percentile(t, 99):.2f} | {np.median(t) / np.median(base):.2f} |")
    out.append(f"| | postings built in {build_ms:.0f} ms, {built.nbytes / 2**20:.1f} MiB | same top 10 as exact: "
               f"{same} / {len(texts)} | |")
    log("\n".join(out))
    return out  # `rows` freed: the engine's cache drops its postings


def shares(value: str) -> list[float]:
    """argparse type of `--shares`: comma-separated fractions in (0, 1]."""
    try:
        out = [float(s) for s in value.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {value!r}") from None
    if not out or not all(0 < f <= 1 for f in out):
        raise argparse.ArgumentTypeError(f"each share must be in (0, 1], not {value!r}")
    return out


def main(argv: list[str] | None = None) -> None:
    from indexer.commands.common import positive_int
    from indexer.runtime.paths import data_dir

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--version", type=Path, required=True, help="a built version folder whose lexical engine is PISA")
    p.add_argument("--shares", type=shares, default=[0.01, 0.03, 0.05, 0.1],
                   help="filter shares of the documents (default 0.01,0.03,0.05,0.1)")
    p.add_argument("--queries", type=positive_int, default=100, help="held-out questions (default 100)")
    p.add_argument("--rounds", type=positive_int, default=2)
    args = p.parse_args(argv)
    v = open_pisa_version(args.version)
    texts, _ = sc.held_out(data_dir() / QUORA, args.queries)
    lines = [f"# A filter's own postings at {v.ntotal:,} documents", "",
             f"`{' '.join(['python -m bench.filter_postings', *(argv if argv is not None else sys.argv[1:])])}`",
             f"(version {v.version}, {len(texts)} held-out questions, {args.rounds} rounds, load {load()})", "",
             "| filter | path (top 10, or the leg's top 100) | wall ms p50 / mean / p99 | p50 / leg's |",
             "|---|---|---|---|"]
    try:
        for share in args.shares:
            lines += on_share(v, share, texts, args.rounds)
    finally:
        v.close()
    lines += ["", f"load after: {load()}"]
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%MZ")
    out = RESULTS / f"filter-postings-{v.ntotal}-{stamp}.md"
    out.write_text("\n".join(lines) + "\n")
    log(f"wrote {out}")


if __name__ == "__main__":
    main()
