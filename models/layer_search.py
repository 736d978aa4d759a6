"""BERT-LC search: which ≤ max_layers subset of layers, averaged (tokens and layers), scores best on STS-B dev.

Pruned beam search instead of all 2^(L+1) subsets: score every single layer, then grow only the `beam` best
subsets of each size by one layer. Per-layer token means are computed once, so scoring a subset is a
cheap mean of cached vectors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from models.poolers import masked_mean
from models.sentence_model import SentenceModel
from models.sts import StsSet, spearman_x100


@dataclass
class LayerSearchResult:
    layers: list[int]
    dev_spearman: float
    evaluated: int  # how many subsets were scored
    leaderboard: list[tuple[list[int], float]]


@torch.inference_mode()
def per_layer_means(
    model: SentenceModel, texts: list[str], batch_size: int = 128, mlp_head: bool = False
) -> np.ndarray:
    """(L + 1, n, H) masked token means of every layer."""
    model.eval()
    out = []
    for start in range(0, len(texts), batch_size):
        batch = model.tokenize(texts[start : start + batch_size])
        hs = model.hidden_states(batch)
        out.append(torch.stack([masked_mean(h, batch["attention_mask"]) for h in hs]).float().cpu().numpy())
    return np.concatenate(out, 1)


def search_layers(
    model: SentenceModel, dev: StsSet, max_layers: int = 4, beam: int = 5, mlp_head: bool = False
) -> LayerSearchResult:
    unique = sorted(set(dev.s1) | set(dev.s2))
    row = {s: i for i, s in enumerate(unique)}
    means = per_layer_means(model, unique)
    i1, i2 = [row[s] for s in dev.s1], [row[s] for s in dev.s2]
    head = getattr(getattr(model.encoder, "pooler", None), "dense", None) if mlp_head else None

    def score(layers: tuple[int, ...]) -> float:
        v = means[list(layers)].mean(0)
        if head is not None:
            with torch.inference_mode():
                v = torch.tanh(head(torch.from_numpy(v).to(model.device))).float().cpu().numpy()
        return spearman_x100(dev, v[i1], v[i2])

    scored: dict[tuple[int, ...], float] = {}
    frontier = [(i,) for i in range(means.shape[0])]
    for size in range(1, max_layers + 1):
        for subset in frontier:
            if subset not in scored:
                scored[subset] = score(subset)
        best_of_size = sorted((s for s in scored if len(s) == size), key=scored.get, reverse=True)[:beam]
        frontier = sorted({tuple(sorted({*s, i})) for s in best_of_size for i in range(means.shape[0]) if i not in s})
    board = sorted(scored.items(), key=lambda kv: kv[1], reverse=True)
    best, best_score = board[0]
    return LayerSearchResult(list(best), best_score, len(scored), [(list(k), v) for k, v in board[:10]])
