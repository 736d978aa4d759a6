"""The pooler contract: hidden states of every layer (0 = embeddings .. L) + attention mask → one vector per
sentence. A pooler owns its save/load so a checkpoint's `pooler/` folder is self-describing and detachable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

POOLER_CONFIG = "pooler.json"
POOLER_WEIGHTS = "pooler.safetensors"

HiddenStates = tuple[Tensor, ...]

REGISTRY: dict[str, type[Pooler]] = {}


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean over tokens of (B, T, H), ignoring padding."""
    m = mask.unsqueeze(-1).to(x.dtype)
    return (x * m).sum(1) / m.sum(1).clamp(min=1e-9)


def masked_max(x: Tensor, mask: Tensor) -> Tensor:
    """Max over tokens of (B, T, H), ignoring padding."""
    return x.masked_fill(~mask.bool().unsqueeze(-1), torch.finfo(x.dtype).min).max(1).values


def init_bert_linear(module: nn.Module, std: float = 0.02) -> None:
    """BERT's initialisation for every Linear inside `module`: weights N(0, std), biases 0 (the poolers'
    reference implementations use it; PyTorch's default Kaiming-uniform is wider)."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


class Pooler(nn.Module):
    """Base class. Subclasses set `kind`, take their options as keyword arguments (JSON-serialisable) and
    implement `forward(hidden_states, attention_mask)`."""

    kind: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.kind:
            REGISTRY[cls.kind] = cls

    def __init__(self, hidden_size: int, num_layers: int, **options: Any) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.num_layers = num_layers  # transformer layers L; hidden_states has L + 1 entries
        self.options = options

    def forward(self, hidden_states: HiddenStates, attention_mask: Tensor) -> Tensor:  # pragma: no cover
        raise NotImplementedError

    @property
    def output_dim(self) -> int:
        return self.hidden_size

    def config(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "hidden_size": self.hidden_size,
            "num_layers": self.num_layers,
            "options": self.options,
        }

    def save(self, folder: str | Path) -> None:
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / POOLER_CONFIG).write_text(json.dumps(self.config(), indent=2))
        state = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        if state:
            save_file(state, str(folder / POOLER_WEIGHTS))


def pooler_option_names(kind: str) -> list[str]:
    """The options a pooler kind takes (its constructor's keyword arguments after hidden_size and num_layers)."""
    import inspect

    params = inspect.signature(REGISTRY[kind].__init__).parameters
    return [name for name, p in params.items() if name not in ("self", "hidden_size", "num_layers")
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def build_pooler(kind: str, hidden_size: int, num_layers: int, **options: Any) -> Pooler:
    """A new pooler of `kind`; ValueError for an unknown kind or an option that kind does not take (a misspelt
    option is refused, not silently kept in `pooler.json` and ignored)."""
    if kind not in REGISTRY:
        raise ValueError(f"unknown pooler {kind!r}; known: {', '.join(sorted(REGISTRY))}")
    accepted = pooler_option_names(kind)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        takes = f"it takes {', '.join(accepted)}" if accepted else "it takes none"
        raise ValueError(f"pooler {kind} has no option {', '.join(map(repr, unknown))} ({takes})")
    return REGISTRY[kind](hidden_size, num_layers, **options)


def load_pooler(folder: str | Path) -> Pooler:
    from safetensors.torch import load_file

    folder = Path(folder)
    cfg = json.loads((folder / POOLER_CONFIG).read_text())
    pooler = build_pooler(cfg["kind"], cfg["hidden_size"], cfg["num_layers"], **cfg.get("options", {}))
    weights = folder / POOLER_WEIGHTS
    if weights.is_file():
        pooler.load_state_dict(load_file(str(weights)))
    return pooler
