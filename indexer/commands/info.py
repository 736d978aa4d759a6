"""`indexer info`: list versions and show the current manifest (and the write log's state)."""

from __future__ import annotations

import argparse
import json

from indexer.commands.common import root_arg


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`indexer info` and its arguments (in --help order)."""
    i = sub.add_parser("info", help="list versions and show the current manifest")
    root_arg(i)
    i.add_argument("--json", action="store_true", help="print JSON")
    i.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from indexer.runtime.layout import IndexRoot
    from indexer.runtime.manifest import Manifest, ManifestError

    root = IndexRoot(args.root)
    versions = root.versions()
    current = root.current_version()
    if args.json:
        out = {"root": str(root.root), "current": current, "versions": versions}
        if current:
            out["manifest"] = Manifest.load(root.current_dir()).model_dump(mode="json")
        print(json.dumps(out, indent=2))
        return 0
    print(f"root: {root.root}")
    if not versions:
        print("no versions yet (run `indexer build`)")
        return 0
    for v in versions:
        try:
            manifest = Manifest.load(root.version_dir(v))
            shards = manifest.index.shards
            desc = (f"{manifest.index.ntotal} vectors, {manifest.index.factory}, {manifest.model.pooling}, "
                    f"{manifest.data.protocol}"
                    + (f", {len(shards)} shards" + (f" of {manifest.parent_version}" if manifest.parent_version else "")
                       if shards else "")
                    + (f", MRR@10 {manifest.eval.mrr_at_10:.4f}" if manifest.eval else "")
                    + (", no lexical index" if manifest.lexical is None else f", BM25 ({manifest.lexical.stemmer})")
                    + f", /search mode {manifest.search_mode()}")
        except ManifestError as exc:
            desc = f"unreadable: {exc}"
        print(f"{'*' if v == current else ' '} {v}  {desc}")
    from indexer.runtime.writelog import open_log

    wlog = open_log(root.root, create=False)
    if wlog is not None:
        try:
            counts, last = wlog.counts(), wlog.last_seq()
        finally:
            wlog.close()
        w = Manifest.load(root.current_dir()).writes if current else None
        folded = w.folded_seq if w is not None else 0
        print(f"write log: {counts['upsert']} upserts, {counts['delete']} deletes (last seq {last}); the current "
              f"version holds up to seq {folded}" + ("" if last <= folded else ": `indexer compact` folds the rest"))
    return 0
