"""What the `indexer` subcommands share: argument types (`positive_int`, `non_negative_int`, `recall_target`), the
`--root` and `--threads` arguments, the settings checked before a build starts, and the errors that are the user's
to fix."""

from __future__ import annotations

import argparse
from pathlib import Path

from indexer.runtime.paths import default_index_root


def positive_int(value: str) -> int:
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, not {n}")
    return n


def non_negative_int(value: str) -> int:
    n = int(value)
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, not {n}")
    return n


def recall_target(value: str) -> float:
    """argparse type of `--target-recall`: `indexer.calibrate.check_target`'s range, as a usage error."""
    from indexer.calibrate import check_target

    r = float(value)  # not a number: argparse's own "invalid recall_target value"
    try:
        return check_target(r)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--target-recall ")) from None


# Errors that are the user's to fix: printed as one line, no traceback (a full or failing disk included,
# `indexer.runtime.storage`, naming the file) (bad runs and qrels, `indexer.runs` and
# `indexer.compare`, raise ValueErrors).
def known_errors() -> tuple[type[BaseException], ...]:
    from indexer.evaluate import EvalError
    from indexer.quora import QuoraFormatError
    from indexer.runtime.encoder import EncoderLoadError
    from indexer.runtime.integrity import IntegrityError
    from indexer.runtime.layout import LayoutError
    from indexer.runtime.manifest import ManifestError
    from indexer.runtime.storage import StorageError
    from indexer.runtime.version import IndexLoadError

    return (EvalError, LayoutError, ManifestError, EncoderLoadError, QuoraFormatError, IndexLoadError, IntegrityError,
            StorageError, FileNotFoundError, PermissionError, ValueError, OSError)


def check_settings() -> None:
    """Environment settings a build reads at its end, checked before any work (a bad STRATA_MAX_SHRINK would
    otherwise be found only after the whole corpus was encoded)."""
    from indexer.runtime.shrink_guard import max_shrink

    max_shrink()


def root_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", type=Path, default=default_index_root(),
                   help="index root holding versions/ and current (default: $STRATA_HOME/indexes/quora)")


def threads_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=positive_int, default=None, help="ONNX Runtime / FAISS threads (default: cores)")
