"""`indexer rollback`: point `current` back at an earlier version (which must verify and load)."""

from __future__ import annotations

import argparse

from indexer.commands.common import root_arg


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`indexer rollback` and its arguments (in --help order)."""
    r = sub.add_parser("rollback", help="point `current` back at an earlier version",
                       description="Switch `current` (atomically) to VERSION, or to the newest version older "
                       "than the current one; the version must load. Keep versions with `build --keep N`.")
    root_arg(r)
    r.add_argument("version", nargs="?", default=None, help="version to serve (default: the previous one)")
    r.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from indexer.runtime.integrity import verify_folder
    from indexer.runtime.layout import IndexRoot, LayoutError
    from indexer.runtime.version import IndexVersion

    root = IndexRoot(args.root)
    with root.build_lock(create=False):  # never race a build's own flip of `current`
        current = root.current_version()
        if current is None and not args.version:  # an empty or mistyped root: say so, not "older than None"
            root.current_dir()  # raises the LayoutError every command gives for a root without a current index
        target = args.version or root.previous_version()
        if target is None:
            raise LayoutError(f"{root.root} has no version older than {current} to roll back to")
        if not root.version_dir(target).is_dir():
            raise LayoutError(f"no version {target} under {root.versions_dir} (see `indexer info`)")
        verify_folder(root.version_dir(target))  # refuse a damaged version (IntegrityError names the file)
        IndexVersion(root.version_dir(target)).close()  # and one that would not load
        root.set_current(target)
    print(f"current: {current} -> {target} (a running API picks it up: watch, SIGHUP or POST /admin/reload)")
    return 0
