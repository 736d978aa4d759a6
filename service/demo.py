"""The README's first command: export the default encoder if needed, build the Quora index (paper protocol)
if there is none, then serve. Export and build run as child processes (`encoder export`, `indexer build`):
torch never enters the API process, and `service` never imports the build pipeline."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

from indexer.runtime.layout import IndexRoot
from indexer.runtime.paths import DEFAULT_POOLING, default_model_dir, default_quora_source
from service.settings import Settings

log = logging.getLogger(__name__)


class DemoError(RuntimeError):
    pass


GATE_ROWS = 20_000  # `encoder export`'s default


def ensure_model(model_dir: Path, rows: int | None = None) -> None:
    if (model_dir / "encoder.json").is_file():
        log.info("using exported encoder %s", model_dir)
        return
    # static int8 when the shared data is there to calibrate and gate it (refused unless its vectors do not depend
    # on the batch and it stays within the quality gate of fp32; a few minutes on 2 cores), else fp32 with a
    # notice; see the README's export section.
    log.info("exporting the default encoder (all-MiniLM-L6-v2, pooling %s, static int8 where it can be "
             "calibrated and gated) to %s", DEFAULT_POOLING, model_dir)
    cmd = [sys.executable, "-m", "models.cli", "export", "--out", str(model_dir), "--pooling", DEFAULT_POOLING,
           "--quantize", "auto"]
    if rows:  # a small demo gates int8 on as many Quora rows as it indexes (the full gate: 20,000 rows, minutes)
        cmd += ["--gate-rows", str(min(rows, GATE_ROWS))]
    if subprocess.run(cmd, check=False).returncode != 0:
        raise DemoError("`encoder export` failed (its error is above; is the train extra installed? "
                        "pip install -e '.[train]')")


def prepare(settings: Settings, *, rows: int | None = None, rebuild: bool = False) -> None:
    model_dir = settings.model_dir or default_model_dir()
    ensure_model(model_dir, rows)
    root = IndexRoot(settings.index_root)
    if root.current_version() is None or rebuild:
        log.info("building the Quora index (paper protocol) in %s", root.root)
        # no --threads: the build may use every core; serving threads are set apart
        cmd = [sys.executable, "-m", "indexer.cli", "build", "--root", str(root.root), "--model", str(model_dir),
               "--data", default_quora_source(), *(["--rows", str(rows)] if rows else [])]
        if subprocess.run(cmd, check=False).returncode != 0:
            raise DemoError("`indexer build` failed (see its error above)")
    else:
        log.info("serving existing index %s/%s (pass --rebuild to build a new one)", root.root,
                 root.current_version())


def banner(settings: Settings) -> str:
    url = f"http://{settings.host}:{settings.port}"
    return (f"\nStrata is serving on {url}  (OpenAPI docs: {url}/docs)\n"
            f"Try:\n  curl -s {url}/search -H 'Content-Type: application/json' "
            "-d '{\"query\": \"How do I learn Python quickly?\", \"top_k\": 5}'\n")
