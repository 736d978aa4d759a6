"""The `indexer` and `encoder` command lines: every subcommand and every flag, in --help order, as they were
before the CLIs were split into one module per subcommand (`indexer.commands`, `models.commands`); and each
subcommand runs from its own module. A flag added on purpose is added here too."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import pytest

from indexer.cli import build_parser as indexer_parser
from models.cli import build_parser as encoder_parser

INDEXER = {
    "build": (
        "--root", "--model", "--data", "--protocol", "--rows", "--id-field", "--text-field", "--title-field",
        "--metadata-fields", "--vector-field", "--follow-symlinks", "--chunk", "--overlap", "--queries", "--qrels",
        "--index", "--nlist", "--hnsw-m",
        "--ef-construction", "--ef-search", "--nprobe", "--target-recall", "--no-calibrate", "--probes", "--codec",
        "--memory-budget", "--batch-size",
        "--threads", "--keep", "--no-lexical", "--lexical-stemmer", "--lexical-stopwords", "--bm25-k1", "--bm25-b",
        "--lexical-engine",
        "--default-mode", "--no-eval", "--add", "--rebuild-after", "--engine", "--ray-address", "--workers",
        "--threads-per-worker", "--gpus-per-worker", "--shards", "--block-rows", "--keep-vectors",
    ),
    "rollback": ("--root", "VERSION",),
    "eval": (
        "--root", "--version", "--nprobe", "--ef-search", "--batch-size", "--threads", "--exact-all", "--json",
        "--queries", "--qrels", "--split", "--model", "--run-out", "--modes", "--fusion", "--alpha", "--rrf-k",
    ),
    "compare": ("RUN_A", "RUN_B", "--qrels", "--resamples", "--seed", "--json",),
    "tune": ("--root", "--version", "--queries", "--threads", "--out", "--factories",),
    "compact": ("--root", "--model", "--threads", "--keep", "--no-eval", "--rebuild-after", "--index",),
    "shard": ("--root", "--shards", "--version", "--keep",),
    "verify": ("--root", "--version",),
    "info": ("--root", "--json",),
    "collection": ("--root", "--set", "--unset", "--fingerprint", "--create", "--encoder", "--delete",),
    "snapshot": ("ACTION",),
}
ENCODER = {
    "export": (
        "--checkpoint", "--out", "--pooling", "--max-length", "--min-cosine", "--force", "--quantize", "--gate-rows",
        "--gate-screen-rows", "--max-drop", "--skip-gate", "--exporter",
    ),
    "train": (
        "--config", "--out", "--model", "--pooler", "--pooler-options", "--objective", "--data", "--max-examples",
        "--temperature", "--adam-betas", "--sgopt-lambda", "--batch-size", "--max-length", "--lr", "--pooler-lr",
        "--warmup-ratio", "--epochs", "--max-steps", "--seed", "--eval-every", "--eval-on", "--eval-max-pairs",
        "--eval-mode", "--resume", "--device", "--threads",
    ),
    "mine": (
        "--model", "--out", "--data", "--skip", "--take", "--depth", "--nlist", "--nprobe", "--threads", "--review",
        "--review-anchors", "--seed",
    ),
    "adapt": (
        "--out", "--work", "--checkpoint", "--data", "--recipe", "--queries", "--qrels", "--split", "--max-docs",
        "--eval-every", "--id-field", "--text-field", "--title-field", "--steps", "--batch-size", "--max-length",
        "--lr", "--seed", "--skip", "--take", "--gate", "--quantize", "--threads", "--no-progress",
    ),
    "sts": (
        "--checkpoint", "--onnx", "--mode", "--tasks", "--max-pairs", "--max-length", "--threads", "--name", "--json",
    ),
    "lc-search": ("--checkpoint", "--max-layers", "--beam", "--mlp-head", "--max-pairs", "--max-length", "--out",),
}


def _surface(parser: argparse.ArgumentParser) -> dict[str, tuple[str, ...]]:
    """Each subcommand's flags (the longest spelling) and positionals (upper case), in the order --help shows."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: tuple(max(a.option_strings, key=len) if a.option_strings else a.dest.upper()
                        for a in p._actions if a.dest != "help")
            for name, p in sub.choices.items()}


@pytest.mark.parametrize(("parser", "expected", "package"), [(indexer_parser, INDEXER, "indexer.commands"),
                                                             (encoder_parser, ENCODER, "models.commands")],
                         ids=["indexer", "encoder"])
def test_every_subcommand_and_flag_is_kept_and_each_runs_from_its_own_module(
        parser: Callable[[], argparse.ArgumentParser], expected: dict[str, tuple[str, ...]], package: str) -> None:
    p = parser()
    surface = _surface(p)
    assert list(surface) == list(expected)  # the subcommands, in --help order
    for name, flags in expected.items():
        assert surface[name] == flags, name
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    for name, subparser in sub.choices.items():
        run = subparser.get_default("func")
        assert run.__name__ == "run" and run.__module__ == f"{package}.{name.replace('-', '_')}", name
        assert subparser.format_help().startswith(f"usage: {p.prog} {name}")


@pytest.mark.parametrize(("argv", "flag"), [
    (("build", "--rows", "-1"), "--rows"), (("build", "--rows", "0"), "--rows"),
    (("build", "--keep", "-1"), "--keep"), (("build", "--keep", "0"), "--keep"), (("compact", "--keep", "0"), "--keep"),
    (("build", "--threads", "-2"), "--threads"), (("build", "--batch-size", "-5"), "--batch-size"),
    (("eval", "--batch-size", "0"), "--batch-size"), (("tune", "--queries", "0"), "--queries"),
    (("tune", "--threads", "0"), "--threads"),
])
def test_a_count_below_one_is_a_usage_error_naming_the_flag(argv: tuple[str, ...], flag: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """`--keep -1` pruned every older version, `--threads -2` reached ONNX Runtime as -2 threads, `--rows -1` ended
    in islice's message: each is now argparse's exit 2 naming the flag, before any work."""
    with pytest.raises(SystemExit) as exit_:
        indexer_parser().parse_args(list(argv))
    assert exit_.value.code == 2
    assert f"argument {flag}: must be >= 1" in capsys.readouterr().err


def test_the_demos_rows_is_a_count(capsys: pytest.CaptureFixture[str]) -> None:
    from service.__main__ import _parser

    with pytest.raises(SystemExit):
        _parser().parse_args(["demo", "--rows", "-1"])
    assert "argument --rows: must be >= 1, not -1" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ("adapt", "--out", "o", "--steps", "-1"), ("adapt", "--out", "o", "--batch-size", "0"),
    ("adapt", "--out", "o", "--eval-every", "0"), ("mine", "--out", "o", "--depth", "0"),
    ("train", "--out", "o", "--batch-size", "0"), ("train", "--out", "o", "--epochs", "-1"),
])
def test_an_encoder_count_below_one_is_a_usage_error(argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    """`encoder adapt --steps -1` was taken and started mining (minutes) before anything looked at it."""
    with pytest.raises(SystemExit) as exit_:
        encoder_parser().parse_args(list(argv))
    assert exit_.value.code == 2 and f"argument {argv[-2]}: must be >= 1" in capsys.readouterr().err


def test_a_settings_validation_error_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """`encoder train --max-length 1` printed pydantic's four lines and its documentation link."""
    from pydantic import BaseModel, Field

    from indexer.console import run_cli

    class Config(BaseModel):
        max_length: int = Field(32, gt=1)

    assert run_cli(lambda: Config(max_length=1) and 0, (ValueError,), "encoder train") == 2
    err = capsys.readouterr().err
    assert err == "encoder train: error: max_length: Input should be greater than 1 (got 1)\n", err
