"""`indexer collection`: show or change a collection's own settings, its index root's `collection.json`
(`indexer.runtime.collection_config`): default mode and fusion, search parameters, limits, access. A running API applies
a change without a restart (its watcher, SIGHUP, or `POST /collections/NAME/admin/reload`).

`--create` makes the root a new collection (an empty first version of `--encoder`, `--set` as its settings), as
`POST /collections` does; `--delete` removes it durably, as `DELETE /collections/NAME` does
(`indexer.runtime.collection_dirs`: one rename each, so a crash leaves the collection or nothing)."""

from __future__ import annotations

import argparse
import json

from indexer.commands.common import root_arg


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`indexer collection` and its arguments (in --help order)."""
    c = sub.add_parser("collection", help="show or change a collection's settings (collection.json)",
                       description="Print the collection's settings (its index root's collection.json), after "
                       "applying --set/--unset: validated against the served version, written atomically. "
                       "Keys: mode, fusion, alpha, rrf_k, search.<knob>, max_top_k, filter.{depth,width,"
                       "conditions,values}, access.{read,write,keys} (docs/collections.md).")
    root_arg(c)
    c.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="set KEY (dotted: search.nprobe=32, access.write=none); VALUE is JSON or a bare word")
    c.add_argument("--unset", dest="unsets", action="append", default=[], metavar="KEY",
                   help="back to the default (the version's, then the process's)")
    c.add_argument("--fingerprint", metavar="KEY", default=None,
                   help="print the fingerprint of an API key, as access.keys lists it, and exit")
    c.add_argument("--create", action="store_true",
                   help="make --root (DIR/NAME: a collection of the collections folder DIR) a new, empty collection "
                   "that takes writes and searches at once, with --set as its settings; refused if it exists")
    c.add_argument("--encoder", metavar="DIR_OR_NAME", default=None,
                   help="--create: the exported encoder, a folder or a name under $STRATA_MODELS_DIR (default "
                   "~/.strata/models); default: the default encoder")
    c.add_argument("--delete", action="store_true",
                   help="remove the collection at --root durably (a running API serves it until it restarts: "
                   "delete it over HTTP, DELETE /collections/NAME, to stop serving it at once)")
    c.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from indexer.runtime import collection_config as cc
    from indexer.runtime.layout import IndexRoot
    from indexer.runtime.manifest import Manifest

    if args.fingerprint is not None:
        print(cc.fingerprint(args.fingerprint))
        return 0
    if args.create or args.delete:
        return _create_or_delete(args)
    config = cc.load(args.root)  # ConfigError names the file and the field (exit 2)
    if args.sets or args.unsets:
        path = cc.path_of(args.root)
        config = cc.with_changes(config, args.sets, args.unsets, str(path))
        current = IndexRoot(args.root).current_version()
        if current is not None:  # what the API would refuse, refused here
            manifest = Manifest.load(IndexRoot(args.root).version_dir(current))
            try:
                config.check_served(manifest.index.kind, manifest.lexical is not None)
            except cc.ConfigError as exc:
                raise cc.ConfigError(f"{path}: {exc} (version {current})", exc.field) from None
        cc.save(args.root, config)
    print(json.dumps(config.model_dump(mode="json"), indent=2))
    return 0


def _create_or_delete(args: argparse.Namespace) -> int:
    from pathlib import Path

    from indexer.runtime import collection_config as cc
    from indexer.runtime import collection_dirs as cd
    from indexer.runtime.empty_version import EMPTY_KIND
    from indexer.runtime.paths import DEFAULT_MODEL_NAME

    root = Path(args.root)
    if args.create and args.delete:
        raise ValueError("--create and --delete: give one")
    if args.delete:
        cd.delete_collection(root.parent, root.name)  # CollectionDirError: exit 2 with the reason
        print(f"deleted collection {root.name!r} ({root})")
        return 0
    models = cd.default_models_dir()
    encoder = Path(args.encoder).expanduser() if args.encoder and Path(args.encoder).expanduser().is_dir() else \
        cd.resolve_encoder(models, args.encoder, models / DEFAULT_MODEL_NAME)
    config = cc.with_changes(cc.CollectionConfig(), args.sets, args.unsets, "--set") if args.sets else None
    if config is not None:
        config.check_served(EMPTY_KIND, False)  # what an empty (flat, dense-only) version can apply
    cd.create_collection(root.parent, root.name, encoder, config)
    print(f"created collection {root.name!r} ({root}) with encoder {encoder}")
    return 0
