"""`indexer tune`: sweep index types and search settings on a version's own vectors."""

from __future__ import annotations

import argparse
from pathlib import Path

from indexer.commands.common import positive_int, root_arg


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`indexer tune` and its arguments (in --help order)."""
    t = sub.add_parser("tune", help="sweep index types, nlist, nprobe/efSearch on a version's own vectors",
                       description="Build IVF-Flat (nlist 256..4096), IVF-SQ8, IVF-PQ and HNSW indexes from a "
                       "version's stored vectors and report MRR@10, Recall@10 vs exact, ms/query and memory for "
                       "each search setting, marking the Pareto front. Does not change the version.")
    root_arg(t)
    t.add_argument("--version", help="version to tune on (default: current)")
    t.add_argument("--queries", type=positive_int, default=5000, help="evaluation queries sampled (default 5000)")
    t.add_argument("--threads", type=positive_int, default=1, help="FAISS threads while timing (default 1)")
    t.add_argument("--out", type=Path, default=None, help="also write the rows as JSON")
    t.add_argument("--factories", nargs="+", metavar="FACTORY",
                   help='only these faiss.index_factory strings, e.g. "IVF1024,Flat" "HNSW32,Flat" (default: the '
                   "full grid)")
    t.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from indexer.runtime.atomic import write_json_atomic
    from indexer.runtime.layout import IndexRoot
    from indexer.runtime.version import IndexVersion
    from indexer.tune import format_table, pareto, sweep

    root = IndexRoot(args.root)
    version = IndexVersion(root.version_dir(args.version) if args.version else root.current_dir())
    try:
        grid = None
        if args.factories:
            from indexer.tune import search_params

            grid = [search_params(f, version.ntotal) for f in args.factories]
        rows = pareto(list(sweep(version, grid, max_queries=args.queries, threads=args.threads or 1)))
    finally:
        version.close()
    print(f"version {version.version}: {version.ntotal} documents, {min(args.queries, version.manifest.data.n_queries)}"
          f" queries, single-query search with {args.threads or 1} FAISS thread(s); * = Pareto front")
    print(format_table(rows))
    if args.out:
        write_json_atomic(args.out, {"version": version.version, "rows": [asdict(r) for r in rows]})
        print(f"wrote {args.out}")
    return 0
