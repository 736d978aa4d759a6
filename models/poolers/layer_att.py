"""LayerAttPooler (Oh et al. 2022, "Don't Judge a Language Model by Its Last Layer").

For each transformer layer i: h_i^c = [CLS], h_i^a = masked mean. Multiplicative attention across layers,
α = softmax(W_q h^c · (W_k h^a)ᵀ / √d), h_i^l = Σ_j α_ij W_v h_j^a, h^L = mean_i h_i^l, and the sentence vector
h = MLP([h_last^c ; h^L]) back to the hidden size.

Layers pooled: the embedding-layer output (index 0) and transformer layers 1..L, as in the authors' code
(`include_embeddings=False` pools 1..L only). Linear layers start from N(0, 0.02) weights and zero biases, the
authors' (BERT's) initialisation, not PyTorch's default.

Ablations (`attention`): "cls_avg" (the method: queries from CLS_all, keys/values from AVG_all), "cls" (CLS_all
only), "avg" (AVG_all only); `concat_cls_last=False` drops the [CLS]_last concat so only h^L feeds the MLP.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor, nn

from models.poolers.base import HiddenStates, Pooler, init_bert_linear, masked_mean

Attention = Literal["cls_avg", "cls", "avg"]


class LayerAttPooler(Pooler):
    kind = "layer_att"

    def __init__(
        self,
        hidden_size: int,
        num_layers: int,
        attention: Attention = "cls_avg",
        concat_cls_last: bool = True,
        include_embeddings: bool = True,
    ) -> None:
        super().__init__(
            hidden_size,
            num_layers,
            attention=attention,
            concat_cls_last=concat_cls_last,
            include_embeddings=include_embeddings,
        )
        if attention not in ("cls_avg", "cls", "avg"):
            raise ValueError(f"attention must be cls_avg, cls or avg, not {attention!r}")
        d = hidden_size
        self.attention, self.concat_cls_last = attention, concat_cls_last
        self.start = 0 if include_embeddings else 1
        self.w_q, self.w_k, self.w_v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(2 * d if concat_cls_last else d, d), nn.Tanh())
        init_bert_linear(self)

    def layer_attention(self, hidden_states: HiddenStates, attention_mask: Tensor) -> tuple[Tensor, Tensor]:
        """(h^L of shape (B, d), α of shape (B, L, L))."""
        layers = hidden_states[self.start :]
        cls = torch.stack([h[:, 0] for h in layers], 1)
        avg = torch.stack([masked_mean(h, attention_mask) for h in layers], 1)
        q_src = avg if self.attention == "avg" else cls
        kv_src = cls if self.attention == "cls" else avg
        q, k, v = self.w_q(q_src), self.w_k(kv_src), self.w_v(kv_src)
        alpha = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(q.shape[-1]), dim=-1)
        return (alpha @ v).mean(1), alpha

    def forward(self, hidden_states: HiddenStates, attention_mask: Tensor) -> Tensor:
        h_l, _ = self.layer_attention(hidden_states, attention_mask)
        if self.concat_cls_last:
            h_l = torch.cat([hidden_states[-1][:, 0], h_l], -1)
        return self.mlp(h_l)
