"""`indexer compact`: fold the write log into a new version."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from indexer.commands.common import check_settings, positive_int, root_arg, threads_arg

if TYPE_CHECKING:
    from indexer.compact import CompactResult


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`indexer compact` and its arguments (in --help order)."""
    c = sub.add_parser("compact", help="fold the write log (PUT /documents, POST /documents/delete) into a new "
                       "version", description="Write a new version holding the current version plus the write log's "
                       "entries it does not hold yet (the IVF quantizer is reused, as with --add); publish it like a "
                       "build. Nothing to fold: no new version, exit 0. The log is kept whole.")
    root_arg(c)
    c.add_argument("--model", type=Path, default=None,
                   help="encoder for log entries written with another encoder (default: the version's)")
    threads_arg(c)
    c.add_argument("--keep", type=positive_int, default=5, help="versions to keep, the current one included")
    c.add_argument("--no-eval", action="store_true", help="skip the MRR@10 evaluation")
    c.add_argument("--rebuild-after", type=float, default=0.2, metavar="RATIO",
                   help="report a full rebuild as due past RATIO x the vectors the quantizer was trained on")
    c.add_argument("--index", choices=("keep", "auto"), default="keep",
                   help="keep: the version's index grown in place; auto: the kind follows the size as --index auto "
                   "chooses (flat below 10,000 vectors, IVF above, nlist by size, nprobe calibrated again), and an "
                   "IVF index past --rebuild-after is trained again (what the API's background compaction runs)")
    c.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from indexer.compact import compact

    check_settings()
    r = compact(args.root, model_dir=args.model, threads=args.threads, keep=args.keep, run_eval=not args.no_eval,
                rebuild_after=args.rebuild_after, index_policy=args.index)
    manifest = r.manifest
    if manifest is None:
        print(f"nothing to fold: version {r.parent} holds every write in {args.root}'s log"
              + (f" (up to seq {r.last_seq})" if r.last_seq else " (no writes logged)"))
        return 0
    print(summary(r, args.root))
    if manifest.eval:
        print(f"MRR@10 {manifest.eval.mrr_at_10:.4f} (exact {manifest.eval.exact_mrr_at_10:.4f}) over "
              f"{manifest.eval.n_queries} queries")
    if r.resized:
        print(f"index rebuilt as {manifest.index.kind} ({r.resized})")
    elif r.rebuild_due:
        print(f"full rebuild due: {r.drift:.0%} of the {manifest.index.trained_ntotal} vectors the quantizer was "
              f"trained "
              f"on were added since (threshold {args.rebuild_after:.0%})")
    return 0


def summary(r: CompactResult, root: Path) -> str:
    """The line saying what a compaction folded: the log's entries are rows, so a version of passages' are counted
    as passages, and the new version's documents beside them."""
    manifest = r.manifest
    assert manifest is not None
    rows = "documents" if manifest.chunking() is None else "passages"
    served = "" if rows == "documents" else f" ({manifest.data.n_docs:,} documents)"
    return (f"folded {r.entries} write log entries (seq {r.first_seq}..{r.last_seq}: {r.upserted} {rows} written, "
            f"{r.created} of them new, {r.deleted} deleted) into {r.parent}: version {manifest.version} in {root}, "
            f"{manifest.index.ntotal} vectors{served}")
