"""Default locations, overridable by environment variables (the service's settings use the same names).

- `STRATA_HOME` (default `~/.strata`): `models/`, `indexes/` and `downloads/` live below it.
- `STRATA_DATA_DIR` (default `<repo>/../shared/data` when present): local copies of the public data sets.
"""

from __future__ import annotations

import os
from pathlib import Path

QUORA_URL = "http://qim.fs.quoracdn.net/quora_duplicate_questions.tsv"
QUORA_LOCAL_NAMES = ("quora_duplicate_questions.tsv", "quora_duplicate_questions.tsv.gz",
                     "quora_duplicate_questions.partial.tsv.gz")
DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2-mean"
DEFAULT_INDEX_NAME = "quora"


def strata_home() -> Path:
    return Path(os.environ.get("STRATA_HOME", Path.home() / ".strata")).expanduser()


def data_dir() -> Path:
    env = os.environ.get("STRATA_DATA_DIR")
    if env:
        return Path(env).expanduser()
    return Path(__file__).resolve().parents[2].parent / "shared" / "data"


def default_model_dir() -> Path:
    return strata_home() / "models" / DEFAULT_MODEL_NAME


def default_index_root() -> Path:
    return strata_home() / "indexes" / DEFAULT_INDEX_NAME


def default_quora_source() -> str:
    """A local Quora TSV under the data dir if there is one, else the official download URL."""
    for name in QUORA_LOCAL_NAMES:
        candidate = data_dir() / name
        if candidate.is_file():
            return str(candidate)
    return QUORA_URL
