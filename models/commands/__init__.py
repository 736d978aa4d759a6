"""The `encoder` subcommands, one module each, in the order `encoder --help` lists them.

Owns: `export`, `train`, `mine`, `adapt`, `sts` and `lc_search` (`encoder lc-search`). Each module has
`add_parser(sub)`, which registers the subcommand with its arguments in --help order (and `run` as what it
does), and `run(args) -> int`, the exit status. `models.cli` assembles the parser and runs the one chosen.

May import: the rest of `models` and torch (inside `run`, so that `encoder --help` stays quick), `indexer`
(`indexer.console` for the one-line errors, the encoder runtime), argparse and the standard library.
"""
