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
# What Strata serves by default: all-MiniLM-L6-v2 with BERT-LC's training-free layer combination (the token mean of
# the average of the embedding output and the last layer, chosen on STS-B dev). As static int8 it beats the stock
# token mean on the full paper and the held-out Quora protocols, every paired 95 % interval above 0, at the same
# encoding cost (bench/results/encoder-choice-20261124T185552Z.md). The layers are this model's: another
# checkpoint gets mean pooling unless told otherwise.
DEFAULT_POOLING = "layers:0,6"
DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2-layers-0-6"
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
