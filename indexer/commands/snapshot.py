"""`indexer snapshot create|list|restore`: a collection's snapshots (`indexer.runtime.snapshot`), and a restore of
one into a new index root (`indexer.runtime.restore`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from indexer.commands.common import root_arg


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`indexer snapshot` and its actions (in --help order)."""
    c = sub.add_parser("snapshot", help="snapshot a collection, list its snapshots, restore one",
                       description="A snapshot is one checksummed archive under ROOT/snapshots/: the served "
                       "version's files, the write log up to one seq, collection.json and the encoder's identity "
                       "(docs/operations.md#snapshots). It can be taken while an API writes to the root.")
    actions = c.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="snapshot the collection at --root",
                                description="Write ROOT/snapshots/NAME.tar and print its name, seq, size and sha256.")
    root_arg(create)
    create.add_argument("--name", default=None, help="the snapshot's name (default: the time, sortable)")
    create.add_argument("--version", default=None, help="the version to snapshot (default: current)")
    listing = actions.add_parser("list", help="list the snapshots of the collection at --root")
    root_arg(listing)
    listing.add_argument("--json", action="store_true", help="one JSON list")
    restore = actions.add_parser("restore", help="restore a snapshot archive into a new or empty --root",
                                 description="Check the archive whole (every member's sha256, the version's "
                                 "checksums, the log, the encoder) in a staging folder beside --root, then rename "
                                 "it into place; --root must not exist or be empty.")
    restore.add_argument("archive", type=Path, help="a snapshot's .tar (ROOT/snapshots/NAME.tar or a download)")
    restore.add_argument("--root", type=Path, required=True, help="the new index root (absent or empty)")
    restore.add_argument("--encoder", type=Path, action="append", default=[], metavar="DIR",
                         help="an exported encoder folder to pair with, checked against the snapshot's (repeatable; "
                         "tried after the folder the snapshot's version was built with; then every exported encoder "
                         "of $STRATA_MODELS_DIR, as an upload over HTTP tries them)")
    c.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from indexer.runtime import snapshot
    from indexer.runtime.collection_dirs import default_models_dir, known_encoders
    from indexer.runtime.restore import restore

    if args.action == "create":
        info = snapshot.create(args.root, version=args.version, name=args.name)
        print(f"snapshot {info.name}: version {info.version}, write log up to seq {info.seq}, {info.size:,} bytes, "
              f"sha256 {info.sha256}, in {info.seconds:.1f} s: {snapshot.archive_path(args.root, info.name)}")
    elif args.action == "list":
        found = snapshot.list_snapshots(args.root)
        if args.json:
            print(json.dumps([s.to_json() for s in found], indent=1))
        for s in [] if args.json else found:
            print(f"{s.name}  {s.created_at}  version {s.version}  seq {s.seq}  {s.size:,} bytes  sha256 {s.sha256}")
        if not found and not args.json:
            print(f"no snapshots in {snapshot.snapshots_dir(args.root)}")
    else:
        models = known_encoders(default_models_dir()).values()  # as a server's upload pairs (checked byte for byte)
        r = restore(args.archive, args.root, encoders=[*args.encoder, *models])
        held = f"{r.documents:,} documents" + ("" if r.passages is None else f", {r.passages:,} passages")
        print(f"restored {args.archive} into {r.root}: version {r.version} ({held}), write log up "
              f"to seq {r.seq}, encoder {r.encoder}")
    return 0
