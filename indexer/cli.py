"""`indexer` command line: build, eval, compare, verify and info for versioned FAISS indexes.

The entry point only: each subcommand's arguments and what it does live in its own module of `indexer.commands`.
"""

from __future__ import annotations

import argparse
import logging
import sys

from indexer.commands import build, collection, compact, compare, info, rollback, shard, snapshot, tune, verify
from indexer.commands import eval as eval_command
from indexer.commands.common import known_errors, positive_int, recall_target
from indexer.console import configure_logging, run_cli
from indexer.runtime.priority import PRIORITY_ENV, build_priority, lower_priority

__all__ = ["SUBCOMMANDS", "build_parser", "main", "positive_int", "recall_target"]

# The order `indexer --help` lists them in.
SUBCOMMANDS = (build, rollback, eval_command, compare, tune, compact, shard, verify, info, collection, snapshot)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="indexer", description="Build, evaluate and inspect Strata indexes.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in SUBCOMMANDS:
        command.add_parser(sub)
    return parser


# Below the API's priority by default (`indexer.runtime.priority`, STRATA_BUILD_PRIORITY): they run beside it.
BACKGROUND = ("build", "compact", "shard", "snapshot")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    if args.command in BACKGROUND:
        try:
            applied = lower_priority(build_priority())
        except ValueError as exc:
            print(f"indexer {args.command}: error: {exc}", file=sys.stderr)
            return 2
        if applied.mode != "normal":
            logging.getLogger("indexer").info("running below the API's priority (%s; %s=normal to opt out)",
                                              applied.describe(), PRIORITY_ENV)
    return run_cli(lambda: int(args.func(args)), known_errors(), f"indexer {args.command}")


if __name__ == "__main__":
    sys.exit(main())
