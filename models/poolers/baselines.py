"""Fixed pooling baselines (no parameters) and the learned scalar mix of layers."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from models.poolers.base import HiddenStates, Pooler, init_bert_linear, masked_mean


class ClsLast(Pooler):
    """Last-layer [CLS]: the serving vector of Strata."""

    kind = "cls_last"

    def forward(self, hidden_states: HiddenStates, attention_mask: Tensor) -> Tensor:
        return hidden_states[-1][:, 0]


class ClsMlp(Pooler):
    """SimCSE's training head: last-layer [CLS] through an MLP (dense + tanh, BERT init). It is the control arm
    of the layer-pooling experiments — the paper's baselines all train with it — and, like every Strata pooler,
    it is detached at export: the served vector is the [CLS] *before* the MLP (SimCSE's `cls_before_pooler`)."""

    kind = "cls_mlp"

    def __init__(self, hidden_size: int, num_layers: int) -> None:
        super().__init__(hidden_size, num_layers)
        self.mlp = nn.Sequential(nn.Linear(hidden_size, hidden_size), nn.Tanh())
        init_bert_linear(self)

    def forward(self, hidden_states: HiddenStates, attention_mask: Tensor) -> Tensor:
        return self.mlp(hidden_states[-1][:, 0])


class AvgLast(Pooler):
    kind = "avg_last"

    def forward(self, hidden_states: HiddenStates, attention_mask: Tensor) -> Tensor:
        return masked_mean(hidden_states[-1], attention_mask)


class AvgFirstLast(Pooler):
    """Mean of the first transformer layer and the last one (SimCSE's `avg_first_last`: index 1, not the
    embedding output at index 0)."""

    kind = "avg_first_last"

    def forward(self, hidden_states: HiddenStates, attention_mask: Tensor) -> Tensor:
        return masked_mean((hidden_states[1] + hidden_states[-1]) / 2, attention_mask)


class ScalarMix(Pooler):
    """Softmax-weighted sum of all layers (ELMo-style scalar mix, γ-scaled), then masked mean over tokens."""

    kind = "scalar_mix"

    def __init__(self, hidden_size: int, num_layers: int, include_embeddings: bool = True) -> None:
        super().__init__(hidden_size, num_layers, include_embeddings=include_embeddings)
        self.start = 0 if include_embeddings else 1
        self.weights = nn.Parameter(torch.zeros(num_layers + 1 - self.start))
        self.gamma = nn.Parameter(torch.ones(()))

    def forward(self, hidden_states: HiddenStates, attention_mask: Tensor) -> Tensor:
        stacked = torch.stack(hidden_states[self.start :], 0)
        w = torch.softmax(self.weights, 0).to(stacked.dtype)
        mixed = self.gamma * torch.einsum("l,lbth->bth", w, stacked)
        return masked_mean(mixed, attention_mask)
