"""SG-OPT (Kim et al. 2021, "Self-Guided Contrastive Learning for BERT Sentence Representations").

The encoder is cloned into a frozen copy F and the tuned copy T (T's layer 0, the embeddings, stays frozen). For
sentence i: c_i = T's last-layer [CLS]; views h_{i,k} = max-pool over tokens of F's layer k (k = 0..L, the
embedding output included). Both go through a shared 2-layer GELU projection head f (4096 wide, the paper's). The
opt3 loss (our reading of the paper's final objective): every (c_i, h_{i,k}) is a positive, contrasted only against
the other sentences' views h_{m,n} (m ≠ i) — no c–c or h–h terms — averaged over i and k; plus λ·‖θ_F − θ_T‖²
keeping T near F. Only T (and the head, as the checkpoint's pooler) is kept; F is discarded after training. The
paper's optimisation settings are the defaults: τ = 0.01 and AdamW betas (0.9, 0.9).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from models.data import Example
from models.objectives.base import Objective
from models.poolers import SGOptHead, masked_max
from models.sentence_model import SentenceModel


class SGOpt(Objective):
    name, columns = "sgopt", 1
    default_temperature = 0.01
    default_betas = (0.9, 0.9)

    def __init__(self, temperature: float | None = None, reg_lambda: float = 0.1) -> None:
        super().__init__(temperature)
        self.reg_lambda = reg_lambda
        self.frozen: nn.Module | None = None

    def setup(self, model: SentenceModel) -> None:
        if not isinstance(model.pooler, SGOptHead):
            raise ValueError("SG-OPT needs the sgopt_head pooler (train with --pooler sgopt_head)")
        self.frozen = copy.deepcopy(model.encoder).eval()
        for p in self.frozen.parameters():
            p.requires_grad_(False)
        for p in model.encoder.get_input_embeddings().parameters():
            p.requires_grad_(False)
        emb = getattr(model.encoder, "embeddings", None)  # the whole layer 0 (positions, token types, norm)
        if emb is not None:
            for p in emb.parameters():
                p.requires_grad_(False)

    def loss(self, model: SentenceModel, batch: Sequence[Example]) -> Tensor:
        assert self.frozen is not None, "setup() was not called"
        head: SGOptHead = model.pooler  # type: ignore[assignment]
        enc = model.tokenize([ex[0] for ex in batch])
        c = head.project(model.hidden_states(enc)[-1][:, 0])  # (b, p)
        with torch.no_grad():
            frozen_hs = self.frozen(**enc, output_hidden_states=True).hidden_states  # layers 0..L
            views = torch.stack([masked_max(h, enc["attention_mask"]) for h in frozen_hs], 1)  # (b, L, H)
        b, n_layers, _ = views.shape
        h = F.normalize(head.project(views), dim=-1)  # (b, L, p)
        sims = torch.einsum("ip,mnp->imn", F.normalize(c, dim=-1), h) / self.temperature  # (b, b, L)
        eye = torch.eye(b, dtype=torch.bool, device=sims.device)
        negatives = sims.masked_fill(eye.unsqueeze(-1), float("-inf")).flatten(1)  # other sentences' views
        neg_lse = torch.logsumexp(negatives, 1, keepdim=True)  # (b, 1)
        positives = sims[eye]  # (b, L): sims[i, i, k]
        # -log( e^{pos} / (e^{pos} + Σ e^{neg}) ) = logaddexp(pos, neg_lse) - pos
        contrastive = (torch.logaddexp(positives, neg_lse.expand(b, n_layers)) - positives).mean()
        reg = sum(
            ((pf - pt) ** 2).sum() for pf, pt in zip(self.frozen.parameters(), model.encoder.parameters(), strict=True)
        )
        return contrastive + self.reg_lambda * reg
