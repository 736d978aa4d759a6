"""SimCSE's objectives (Gao et al. 2021): cosine similarities over the pooler output divided by τ (0.05)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torch.nn import functional as F

from models.data import Example
from models.objectives.base import Objective, cosine_logits
from models.sentence_model import SentenceModel


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
    """(anchor, positive, hard negative) triplets: every positive and hard negative in the batch competes (the
    in-batch negatives plus the mined ones). Examples without a negative are not usable."""

    name, columns = "sup_hardneg", 3

    def loss(self, model: SentenceModel, batch: Sequence[Example]) -> Tensor:
        n = len(batch)
        z = model([ex[0] for ex in batch] + [ex[1] for ex in batch] + [ex[2] for ex in batch])
        anchors, candidates = z[:n], z[n:]
        logits = cosine_logits(anchors, candidates, self.temperature)  # (n, 2n): positives then negatives
        return F.cross_entropy(logits, torch.arange(n, device=logits.device))
