"""The README's first command: export the default encoder if needed, build the Quora index (paper protocol)
if there is none, then serve. The export runs in a child process so torch never enters the API process."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

from indexer.build import BuildConfig, build
from indexer.layout import IndexRoot
from indexer.paths import default_model_dir, default_quora_source
from service.settings import Settings

log = logging.getLogger(__name__)


class DemoError(RuntimeError):
    pass


def ensure_model(model_dir: Path) -> None:
    if (model_dir / "encoder.json").is_file():
        log.info("using exported encoder %s", model_dir)
        return
    # `encoder export` writes static int8 by default: refused unless its vectors do not depend on the batch and
    # it stays within the quality gate of fp32 (a few minutes on 2 cores); see the README's export section.
    log.info("exporting the default encoder (all-MiniLM-L6-v2, mean pooling, static int8) to %s", model_dir)
    cmd = [sys.executable, "-m", "models.cli", "export", "--out", str(model_dir), "--pooling", "mean"]
    if subprocess.run(cmd, check=False).returncode != 0:
        raise DemoError("`encoder export` failed (its error is above; is the train extra installed? "
                        "pip install -e '.[train]')")


def prepare(settings: Settings, *, rows: int | None = None, rebuild: bool = False) -> None:
    model_dir = settings.model_dir or default_model_dir()
    ensure_model(model_dir)
    root = IndexRoot(settings.index_root)
    if root.current_version() is None or rebuild:
        log.info("building the Quora index (paper protocol) in %s", root.root)
        build(BuildConfig(model_dir=model_dir, data=default_quora_source(), root=root.root, rows=rows,
                          threads=None))  # the build may use every core; serving threads are set apart
    else:
        log.info("serving existing index %s/%s (pass --rebuild to build a new one)", root.root,
                 root.current_version())


def banner(settings: Settings) -> str:
    url = f"http://{settings.host}:{settings.port}"
    return (f"\nStrata is serving on {url}  (OpenAPI docs: {url}/docs)\n"
            f"Try:\n  curl -s {url}/search -H 'Content-Type: application/json' "
            "-d '{\"query\": \"How do I learn Python quickly?\", \"top_k\": 5}'\n")
