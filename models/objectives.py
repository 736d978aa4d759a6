"""Contrastive objectives (SimCSE family). Each objective turns a batch of text tuples into a loss through
the model's pooler output; cosine similarities are divided by the temperature τ (0.05 by default)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from models.data import Example
from models.sentence_model import SentenceModel


def cosine_logits(a: Tensor, b: Tensor, temperature: float) -> Tensor:
    return F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T / temperature


class Objective:
    """Base: `columns` is how many texts an example needs; `setup` may add modules (SG-OPT's frozen copy)."""

    name = ""
    columns = 1

    def __init__(self, temperature: float = 0.05) -> None:
        self.temperature = temperature

    def setup(self, model: SentenceModel) -> None:
        """Called once the model is on its device, before the optimiser is built."""

    def extra_parameters(self) -> list[nn.Parameter]:
        return []

    def loss(self, model: SentenceModel, batch: Sequence[Example]) -> Tensor:  # pragma: no cover
        raise NotImplementedError

    def usable(self, example: Example) -> bool:
        return len(example) >= self.columns


class UnsupSimCSE(Objective):
    """Each sentence encoded twice; the two dropout views are positives, the rest of the batch negatives."""

    name, columns = "unsup", 1

    def loss(self, model: SentenceModel, batch: Sequence[Example]) -> Tensor:
        texts = [ex[0] for ex in batch]
        z = model(texts + texts)  # one pass, two independent dropout masks
        z1, z2 = z[: len(texts)], z[len(texts) :]
        logits = cosine_logits(z1, z2, self.temperature)
        return F.cross_entropy(logits, torch.arange(len(texts), device=logits.device))


class SupSimCSE(Objective):
    """(anchor, positive) pairs with in-batch negatives."""

    name, columns = "sup", 2

    def loss(self, model: SentenceModel, batch: Sequence[Example]) -> Tensor:
        a, p = [ex[0] for ex in batch], [ex[1] for ex in batch]
        z = model(a + p)
        logits = cosine_logits(z[: len(a)], z[len(a) :], self.temperature)
        return F.cross_entropy(logits, torch.arange(len(a), device=logits.device))


class SupHardNegSimCSE(Objective):
    """(anchor, positive, hard negative) triplets: every positive and hard negative in the batch competes."""

    name, columns = "sup_hardneg", 3

    def loss(self, model: SentenceModel, batch: Sequence[Example]) -> Tensor:
        n = len(batch)
        z = model([ex[0] for ex in batch] + [ex[1] for ex in batch] + [ex[2] for ex in batch])
        anchors, candidates = z[:n], z[n:]
        logits = cosine_logits(anchors, candidates, self.temperature)  # (n, 2n): positives then negatives
        return F.cross_entropy(logits, torch.arange(n, device=logits.device))


def build_objective(name: str, temperature: float = 0.05, sgopt_lambda: float = 0.1) -> Objective:
    from models.sgopt import SGOpt

    objectives: dict[str, Objective] = {
        "unsup": UnsupSimCSE(temperature),
        "sup": SupSimCSE(temperature),
        "sup_hardneg": SupHardNegSimCSE(temperature),
        "sgopt": SGOpt(temperature, sgopt_lambda),
    }
    if name not in objectives:
        raise ValueError(f"unknown objective {name!r}; known: {', '.join(objectives)}")
    return objectives[name]
