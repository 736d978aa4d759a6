"""Hybrid's lexical leg on PISA at several depths and query algorithms, in process, on a built version.

    PYTHONPATH=$PWD STRATA_DATA_DIR=/work/shared/data python -m bench.hybrid_depth ROOT --queries 200 \
        --variants maxscore:100,maxscore:50,maxscore:30,block_max_maxscore:100

Per held-out Quora question (rows >= 300,000), its vector's dense top 100 (the version's ANN index, as served) and,
for each variant ALGORITHM:DEPTH, the leg as hybrid runs it on PISA: PISA's top DEPTH by ALGORITHM over the question's
terms, read once, each hit scored exactly from the forward index, the dense top 100 scored and merged in, the best
100 fused with the dense list (convex 0.5, the default). Variants interleaved per question, `--rounds` rounds; wall
and process CPU per leg; the leg's top 100 and the fused top 10 against the exact hybrid's (BM25's exact top 100
fused with the same dense list). Prints a Markdown table and writes bench/results/hybrid-depth-<N>-<stamp>.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from bench import scale_corpus as sc
from bench.common import load
from bench.pisa_order import open_pisa_version

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root", type=Path, help="an index root (its current version is opened, memory-mapped)")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--variants", default="maxscore:100,maxscore:50,maxscore:30,maxscore:20")
    args = p.parse_args()

    from indexer.runtime import bounded_leg as bl
    from indexer.runtime import fusion
    from indexer.runtime.layout import IndexRoot
    from indexer.runtime.paths import data_dir
    from indexer.runtime.topk import top_k_rows

    root = IndexRoot(args.root)
    if root.current_version() is None:
        raise SystemExit(f"{args.root}: no current version (an index root, built: `indexer build --root`)")
    v = open_pisa_version(root.version_dir(root.current_version() or ""))
    lx = v.lexical
    texts, vecs = sc.held_out(data_dir() / "quora_duplicate_questions.partial.tsv.gz", args.queries)
    variants = [(a, int(d)) for a, d in (x.split(":") for x in args.variants.split(","))]
    names = [f"{a}:{d}" for a, d in variants]
    wall = {n: [] for n in names}
    cpu = {n: [] for n in names}
    leg_top = {n: [] for n in names}
    fused_top = {n: [] for n in names}
    ref_leg, ref_fused = [], []
    depth = fusion.HYBRID_DEPTH
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%MZ")
    start_load = load()
    for rnd in range(args.rounds):
        for i, text in enumerate(texts):
            ds, di = v.search(vecs[i:i + 1], depth)
            dense = (ds[0], di[0])
            terms = lx.analyzer.terms(text)
            query = lx._query(terms)
            if not query:
                continue
            words = {lx.words[t]: float(c) for t, c in query.items()}
            if rnd == 0:
                exact = lx.search(text, depth)
                ref_leg.append(set(exact[1].tolist()))
                ref_fused.append(fusion.convex(dense, exact, 10)[1].tolist())
            order = list(range(len(variants)))
            if (i + rnd) % 2:
                order.reverse()
            for j in order:
                algo, d = variants[j]
                t0, c0 = time.perf_counter(), time.process_time()
                _, rows = lx._candidates(query, words, min(d, lx.ntotal), algo)
                rows.sort()
                s, r = top_k_rows(*lx.score_rows(terms, rows), depth)
                leg = bl.LexicalLeg(s.astype(np.float32), np.asarray(lx.fids[r], np.int64), depth, tuple(terms), ())
                got = bl.complete(lx, leg, dense[1])
                wall[names[j]].append((time.perf_counter() - t0) * 1000)
                cpu[names[j]].append((time.process_time() - c0) * 1000)
                if rnd == 0:
                    leg_top[names[j]].append(set(got[1].tolist()))
                    fused_top[names[j]].append(fusion.convex(dense, got, 10)[1].tolist())
        print(f"round {rnd + 1} done, load {load()}", file=sys.stderr)
    v.close()
    base = names[0]
    lines = [f"# Hybrid's lexical leg on PISA by depth and algorithm, {lx.ntotal:,} documents ({stamp})", "",
             f"`PYTHONPATH=$PWD STRATA_DATA_DIR=/work/shared/data python -m bench.hybrid_depth "
             f"{' '.join(sys.argv[1:])}`; {len(ref_fused)} held-out questions, {args.rounds} rounds interleaved; "
             f"load at start {start_load}, at end {load()}. Reference: the exact hybrid (BM25's exact top 100 fused "
             f"with the same dense top 100, convex 0.5).", "",
             f"| leg (algorithm:PISA depth) | wall p50 / mean / p90 / p99 ms | CPU p50 / mean ms | leg's top 100 ∩ "
             f"exact's | fused top 10 overlap with the exact hybrid (identical lists) | fused top 10 = {base}'s |",
             "|---|---|---|---|---|---|"]
    for n in names:
        w, c = np.array(wall[n]), np.array(cpu[n])
        leg_agree = np.mean([len(a & b) / max(len(b), 1) for a, b in zip(leg_top[n], ref_leg, strict=True)])
        ov = [len(set(a) & set(b)) / max(len(b), 1) for a, b in zip(fused_top[n], ref_fused, strict=True)]
        same_base = sum(a == b for a, b in zip(fused_top[n], fused_top[base], strict=True))
        lines.append(f"| {n} | {np.median(w):.2f} / {w.mean():.2f} / {np.percentile(w, 90):.2f} / "
                     f"{np.percentile(w, 99):.2f} | {np.median(c):.2f} / {c.mean():.2f} | {leg_agree:.3f} | "
                     f"{np.mean(ov):.3f} ({sum(a == b for a, b in zip(fused_top[n], ref_fused, strict=True))} / "
                     f"{len(ov)}) | {same_base} / {len(ov)} |")
    text = "\n".join(lines) + "\n"
    (RESULTS / f"hybrid-depth-{lx.ntotal}-{stamp}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
