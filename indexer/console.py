"""Shared CLI plumbing: logging set-up and turning known errors into one clear line instead of a traceback."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable


def configure_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    # The ONNX exporter's optimiser logs every rewrite at INFO; keep our own INFO lines readable.
    for noisy in ("onnxscript", "onnx_ir", "torch.onnx", "httpx", "faiss.loader"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def run_cli(func: Callable[[], int], known: tuple[type[BaseException], ...], prog: str) -> int:
    """Run `func`; an expected error becomes `prog: error: message` and exit code 2."""
    try:
        return func()
    except known as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
