"""SG-OPT's projection head, stored as the checkpoint's pooler: at inference the sentence vector is the tuned
copy's last-layer [CLS] (as in the paper); the 2-layer GELU head only shapes the training loss."""

from __future__ import annotations

from torch import Tensor, nn

from models.poolers.base import HiddenStates, Pooler


class SGOptHead(Pooler):
    kind = "sgopt_head"

    def __init__(self, hidden_size: int, num_layers: int, projection_dim: int | None = None) -> None:
        super().__init__(hidden_size, num_layers, projection_dim=projection_dim)
        p = projection_dim or hidden_size
        self.projection = nn.Sequential(nn.Linear(hidden_size, hidden_size), nn.GELU(), nn.Linear(hidden_size, p))

    def forward(self, hidden_states: HiddenStates, attention_mask: Tensor) -> Tensor:
        return hidden_states[-1][:, 0]

    def project(self, x: Tensor) -> Tensor:
        return self.projection(x)
