"""`indexer compare`: two TREC runs scored on the same qrels, with paired bootstrap CIs and a permutation test."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`indexer compare` and its arguments (in --help order)."""
    cmp = sub.add_parser("compare", help="nDCG@10, MRR@10 and R@100 of two TREC runs, with paired bootstrap CIs",
                         description="Score two TREC run files (e.g. from `indexer eval --run-out`) on the same "
                         "qrels with trec_eval's measures (ir_measures): nDCG@10, MRR@10 and R@100 of each, the "
                         "difference B − A with its paired bootstrap 95%% confidence interval (queries resampled) and "
                         "a paired permutation test's two-sided p. Queries with a relevant judgment are compared; "
                         "one a run has no results for scores 0 there. Figures are printed × 100.")
    cmp.add_argument("run_a", type=Path, metavar="RUN_A", help="the baseline run (qid Q0 docid rank score tag)")
    cmp.add_argument("run_b", type=Path, metavar="RUN_B", help="the run compared with it")
    cmp.add_argument("--qrels", type=Path, required=True,
                     help="judgments: query-id<TAB>corpus-id<TAB>score (BEIR, header optional) or TREC's "
                     "'query-id 0 doc-id grade'")
    cmp.add_argument("--resamples", type=int, default=10_000,
                     help="bootstrap and permutation resamples (default 10000)")
    cmp.add_argument("--seed", type=int, default=0, help="seed of both resamplings (default 0)")
    cmp.add_argument("--json", action="store_true", help="print one JSON object (fractions, not × 100)")
    cmp.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from indexer.compare import compare_runs, format_comparison
    from indexer.eval_files import read_qrels
    from indexer.runs import read_run

    if args.resamples < 100:
        raise ValueError(f"--resamples must be at least 100, got {args.resamples}")
    qrels = read_qrels(args.qrels)
    comparison = compare_runs(read_run(args.run_a), read_run(args.run_b), qrels, resamples=args.resamples,
                              seed=args.seed)
    if args.json:
        print(json.dumps({"run_a": str(args.run_a), "run_b": str(args.run_b), "qrels": str(args.qrels)}
                         | comparison.as_dict()))
    else:
        print(format_comparison(comparison, str(args.run_a), str(args.run_b)))
    return 0
