"""`encoder` command line: export, train, mine (hard negatives), adapt, sts and lc-search (the training-free BERT-LC
layer search).

The entry point only: each subcommand's arguments and what it does live in its own module of `models.commands`.
"""

from __future__ import annotations

import argparse
import os
import sys

from indexer.console import configure_logging
from models.commands import adapt, export, lc_search, mine, sts, train

__all__ = ["SUBCOMMANDS", "build_parser", "main"]

# The order `encoder --help` lists them in.
SUBCOMMANDS = (export, train, mine, adapt, sts, lc_search)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="encoder", description="Train, evaluate and export Strata encoders.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in SUBCOMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
