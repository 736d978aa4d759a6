"""Poolers over all hidden layers. Importing this package registers every kind."""

from models.poolers.base import REGISTRY, Pooler, build_pooler, load_pooler, masked_max, masked_mean
from models.poolers.baselines import AvgFirstLast, AvgLast, ClsLast, ClsMlp, ScalarMix
from models.poolers.layer_att import LayerAttPooler
from models.poolers.layer_combination import LayerCombination
from models.poolers.s2sent import S2SentPooler
from models.poolers.sgopt_head import SGOptHead

__all__ = [
    "REGISTRY",
    "Pooler",
    "build_pooler",
    "load_pooler",
    "masked_mean",
    "masked_max",
    "ClsLast",
    "ClsMlp",
    "AvgLast",
    "AvgFirstLast",
    "ScalarMix",
    "LayerAttPooler",
    "S2SentPooler",
    "LayerCombination",
    "SGOptHead",
]
