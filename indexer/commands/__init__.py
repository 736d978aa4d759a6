"""The `indexer` subcommands, one module each, in the order `indexer --help` lists them.

Owns: `build` (with `--add`), `rollback`, `eval`, `compare`, `tune`, `compact`, `shard`, `verify`, `info`, and what they
share (`common`: argument types, `--root`/`--threads`, the settings checked before a build, the user's errors).
Each module has `add_parser(sub)`, which registers the subcommand with its arguments in --help order (and `run`
as what it does), and `run(args) -> int`, the exit status. `indexer.cli` assembles the parser and runs the one
chosen.

May import: the rest of `indexer` (the pipeline each subcommand drives, imported inside `run` so that
`indexer --help` stays quick), `indexer.runtime`, argparse and the standard library. Nothing imports this
package but `indexer.cli`.
"""
