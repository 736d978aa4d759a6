"""SG-OPT's projection head, stored as the checkpoint's pooler: at inference the sentence vector is the tuned
copy's last-layer [CLS] (as in the paper); the head only shapes the training loss. The paper's head is a
2-layer MLP with a 4096-wide GELU hidden layer (`hidden_dim`), projecting back to the hidden size unless
`projection_dim` says otherwise."""

from __future__ import annotations

from torch import Tensor, nn

from models.poolers.base import HiddenStates, Pooler, init_bert_linear

PAPER_HIDDEN = 4096


class SGOptHead(Pooler):
    kind = "sgopt_head"

    def __init__(
        self, hidden_size: int, num_layers: int, projection_dim: int | None = None, hidden_dim: int = PAPER_HIDDEN
    ) -> None:
        super().__init__(hidden_size, num_layers, projection_dim=projection_dim, hidden_dim=hidden_dim)
        p = projection_dim or hidden_size
        self.projection = nn.Sequential(nn.Linear(hidden_size, hidden_dim), nn.GELU(), nn.Linear(hidden_dim, p))
        init_bert_linear(self)

    def forward(self, hidden_states: HiddenStates, attention_mask: Tensor) -> Tensor:
        return hidden_states[-1][:, 0]

    def project(self, x: Tensor) -> Tensor:
        return self.projection(x)
