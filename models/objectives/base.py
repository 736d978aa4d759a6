"""The objective contract and its self-registering registry (shaped like `models.poolers.base`): an objective
turns a batch of text tuples into a loss through the model's pooler output. Each family states its paper's
defaults (temperature τ, AdamW betas); a training config overrides them only when it says so."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from torch import Tensor
from torch.nn import functional as F

from models.data import Example
from models.sentence_model import SentenceModel

REGISTRY: dict[str, type[Objective]] = {}


def cosine_logits(a: Tensor, b: Tensor, temperature: float) -> Tensor:
    return F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T / temperature


class Objective:
    """Base: `columns` is how many texts an example needs; `setup` may add modules (SG-OPT's frozen copy)."""

    name: ClassVar[str] = ""
    columns: ClassVar[int] = 1
    default_temperature: ClassVar[float] = 0.05  # SimCSE's τ
    default_betas: ClassVar[tuple[float, float]] = (0.9, 0.999)  # AdamW's (and SimCSE's) default

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.name:
            REGISTRY[cls.name] = cls

    def __init__(self, temperature: float | None = None) -> None:
        self.temperature = self.default_temperature if temperature is None else temperature

    def setup(self, model: SentenceModel) -> None:
        """Called once the model is on its device, before the optimiser is built."""

    def loss(self, model: SentenceModel, batch: Sequence[Example]) -> Tensor:  # pragma: no cover
        raise NotImplementedError

    def usable(self, example: Example) -> bool:
        return len(example) >= self.columns


def build_objective(name: str, temperature: float | None = None, **options: Any) -> Objective:
    if name not in REGISTRY:
        raise ValueError(f"unknown objective {name!r}; known: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name](temperature, **options)
