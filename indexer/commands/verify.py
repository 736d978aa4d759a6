"""`indexer verify`: check a version's files against the checksums in its manifest."""

from __future__ import annotations

import argparse
import sys

from indexer.commands.common import root_arg


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`indexer verify` and its arguments (in --help order)."""
    v = sub.add_parser("verify", help="check a version's files against the checksums in its manifest",
                       description="Hash every file the version's manifest records and compare sizes and digests "
                       "(what the API does before serving a version). Exit 0: every file matches; 1: a file is "
                       "damaged or missing (named); 2: no such version or an unreadable manifest; 3: the manifest "
                       "predates checksums (nothing to check).")
    root_arg(v)
    v.add_argument("--version", help="version to check (default: current)")
    v.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import time

    from indexer.runtime.integrity import IntegrityError, verify_folder
    from indexer.runtime.layout import IndexRoot, LayoutError

    root = IndexRoot(args.root)
    folder = root.version_dir(args.version) if args.version else root.current_dir()
    if not folder.is_dir():
        raise LayoutError(f"no version {args.version} under {root.versions_dir} (see `indexer info`)")
    t0 = time.perf_counter()
    try:
        v = verify_folder(folder)
    except IntegrityError as exc:
        print(f"indexer verify: DAMAGED: {exc}", file=sys.stderr)
        return 1
    seconds = time.perf_counter() - t0
    if not v.checked:
        print(f"{folder.name}: no checksums in its manifest (written before they were recorded): not verified; "
              f"`indexer compact` or a rebuild writes a version with them")
        return 3
    print(f"{folder.name}: OK, {v.files} files, {v.bytes / 2**20:,.1f} MiB match their checksums ({seconds:.2f}s, "
          f"{v.bytes / 2**20 / max(seconds, 1e-9):,.0f} MiB/s)")
    for rel in v.unrecorded:
        print(f"  note: {rel} is not in the manifest's checksums (added after the version was written; not checked)")
    return 0
