"""`indexer shard`: split a published IVF version into N shard files for sharded serving."""

from __future__ import annotations

import argparse

from indexer.commands.common import positive_int, root_arg


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`indexer shard` and its arguments (in --help order)."""
    c = sub.add_parser("shard", help="split an IVF version into N shards for sharded serving (python -m service "
                       "sharded)", description="Write a new version whose IVF index is kept as N shard files sharing "
                       "the version's trained quantizer (vectors by id % N), the rest of the version (store, lexical "
                       "index, probes) hard-linked from it; publish it like a build. The merged shards answer as the "
                       "version did, so its calibration and evaluation are kept. No encoding: a version built from "
                       "vectors, or compacted, is sharded without its source data. Serve it with `python -m service "
                       "sharded`: the single-process service merges a sharded version's shards in memory (not "
                       "memory-mapped); `indexer rollback` returns to the parent.")
    root_arg(c)
    c.add_argument("--shards", type=positive_int, required=True, metavar="N", help="number of shards (2 or more)")
    c.add_argument("--version", default=None, help="the version to split (default: the current one)")
    c.add_argument("--keep", type=positive_int, default=5, help="versions to keep, the current one included")
    c.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from indexer.reshard import reshard

    r = reshard(args.root, args.shards, version=args.version, keep=args.keep)
    m = r.manifest
    sizes = ", ".join(f"{s.ntotal:,}" for s in m.index.shards)
    print(f"split {r.parent} into {len(m.index.shards)} shards ({sizes} vectors): version {m.version} in {args.root} "
          f"in {r.seconds:.1f}s; {r.linked} files of the version hard-linked, {r.copied} copied")
    return 0
