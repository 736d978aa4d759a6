"""S2Sent selector: spatial selection over the last-k blocks nested with frequency selection.

Spatial: stack the last k layers X ∈ (B, k, T, H); a squeeze–excitation self-gate turns a per-feature
descriptor z ∈ R^H into k gates per feature — Eq. 3's excitation σ(W_b δ(W_down z)) with a shared down-projection
H → H/r, ReLU, one up-projection per block and the sigmoid — then a softmax over blocks per feature selects, and
the fused tokens are Σ_b a_{b,c} X[b, :, c]. The selector's output is the token mean of the fused tokens, as in
the paper (`output="mean"`); `output="cls"` is the separate "train through the selector, detach it and serve
the last-layer [CLS]" variant.

Frequency: the squeeze is not plain averaging. Features are split into m groups and group g is squeezed with
the g-th lowest 2-D DCT basis over (block, token) — zig-zag order by u + v. The (0, 0) basis is the mean, so
m = 1 is exactly average pooling. The token axis uses each sentence's true length (padding excluded).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor, nn

from models.poolers.base import HiddenStates, Pooler, masked_mean


def lowest_dct_indices(m: int, blocks: int) -> list[tuple[int, int]]:
    """The m lowest-frequency (u over blocks, v over tokens) pairs, zig-zag order."""
    pairs = [(u, v) for u in range(blocks) for v in range(m)]
    return sorted(pairs, key=lambda p: (p[0] + p[1], p[0]))[:m]


def dct_weights(indices: list[tuple[int, int]], blocks: int, mask: Tensor) -> Tensor:
    """(B, k, T, m) weights; basis (0, 0) gives 1 / (k · n_tokens), i.e. the masked mean."""
    mask = mask.to(torch.float32)
    lengths = mask.sum(1, keepdim=True).clamp(min=1)  # (B, 1)
    t = torch.arange(mask.shape[1], device=mask.device, dtype=torch.float32)
    b = torch.arange(blocks, device=mask.device, dtype=torch.float32)
    out = []
    for u, v in indices:
        over_tokens = torch.cos(math.pi * (t + 0.5) * v / lengths) * mask / lengths  # (B, T)
        over_blocks = torch.cos(math.pi * (b + 0.5) * u / blocks) / blocks  # (k,)
        out.append(over_blocks[None, :, None] * over_tokens[:, None, :])
    return torch.stack(out, -1)


class S2SentPooler(Pooler):
    kind = "s2sent"

    def __init__(
        self,
        hidden_size: int,
        num_layers: int,
        last_k: int | Literal["all"] = 3,
        reduction: int = 16,
        freq_groups: int = 1,
        output: Literal["cls", "mean"] = "mean",
    ) -> None:
        super().__init__(
            hidden_size, num_layers, last_k=last_k, reduction=reduction, freq_groups=freq_groups, output=output
        )
        self.k = num_layers if last_k == "all" else int(last_k)
        if not 1 <= self.k <= num_layers:
            raise ValueError(f"last_k must be in 1..{num_layers} or 'all', not {last_k!r}")
        if hidden_size % freq_groups:
            raise ValueError(f"hidden size {hidden_size} is not divisible by freq_groups={freq_groups}")
        if output not in ("cls", "mean"):
            raise ValueError(f"output must be mean (the paper) or cls (detached variant), not {output!r}")
        self.m, self.output = freq_groups, output
        self.indices = lowest_dct_indices(freq_groups, self.k)
        self.register_buffer(
            "group_of_feature", torch.arange(hidden_size) // (hidden_size // freq_groups), persistent=False
        )
        squeezed = max(1, hidden_size // reduction)
        self.down = nn.Linear(hidden_size, squeezed)
        self.up = nn.ModuleList(nn.Linear(squeezed, hidden_size) for _ in range(self.k))

    def block_weights(self, hidden_states: HiddenStates, attention_mask: Tensor) -> tuple[Tensor, Tensor]:
        """(X of shape (B, k, T, H), softmax weights a of shape (B, k, H))."""
        x = torch.stack(hidden_states[-self.k :], 1)
        w = dct_weights(self.indices, self.k, attention_mask).to(x.dtype)  # (B, k, T, m)
        z = (w[..., self.group_of_feature] * x).sum((1, 2))  # (B, H): feature c squeezed by its group's basis
        s = torch.relu(self.down(z))
        gates = torch.sigmoid(torch.stack([up(s) for up in self.up], 1))  # Eq. 3: σ(W_b δ(W_down z))
        return x, torch.softmax(gates, dim=1)

    def forward(self, hidden_states: HiddenStates, attention_mask: Tensor) -> Tensor:
        x, a = self.block_weights(hidden_states, attention_mask)
        fused = (a.unsqueeze(2) * x).sum(1)
        return fused[:, 0] if self.output == "cls" else masked_mean(fused, attention_mask)
