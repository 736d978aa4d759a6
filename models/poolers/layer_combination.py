"""BERT-LC: training-free layer combination. The sentence vector is the mean over tokens and over a chosen set
of layers, optionally passed through the backbone's own MLP head (BERT's dense + tanh pooler). The layer set is
chosen by `models.layer_search`."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from models.poolers.base import HiddenStates, Pooler, masked_mean


class LayerCombination(Pooler):
    kind = "layer_combination"

    def __init__(
        self, hidden_size: int, num_layers: int, layers: list[int] | None = None, mlp_head: bool = False
    ) -> None:
        layers = list(layers) if layers else [num_layers]
        super().__init__(hidden_size, num_layers, layers=layers, mlp_head=mlp_head)
        if any(not 0 <= i <= num_layers for i in layers):
            raise ValueError(f"layers must be in 0..{num_layers}, got {layers}")
        self.layers = layers
        # The backbone's head is copied in (see `copy_head_from`) so the pooler folder stays self-contained.
        self.head = nn.Linear(hidden_size, hidden_size) if mlp_head else None

    def copy_head_from(self, model: nn.Module) -> None:
        dense = getattr(getattr(model, "pooler", None), "dense", None)
        if self.head is None or dense is None:
            raise ValueError("the backbone has no MLP head (pooler.dense) to copy")
        self.head.load_state_dict(dense.state_dict())

    def forward(self, hidden_states: HiddenStates, attention_mask: Tensor) -> Tensor:
        mixed = torch.stack([hidden_states[i] for i in self.layers], 0).mean(0)
        out = masked_mean(mixed, attention_mask)
        return torch.tanh(self.head(out)) if self.head is not None else out
