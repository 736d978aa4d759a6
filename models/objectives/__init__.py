"""Training objectives, one file per family: `simcse` (unsupervised, supervised pairs, supervised with hard
negatives) and `sgopt` (self-guided contrastive learning). Importing this package registers every objective.
May import torch, `models.data`, `models.poolers` and `models.sentence_model`; nothing imports it but the trainer
and the CLI."""

from models.objectives.base import REGISTRY, Objective, build_objective, cosine_logits
from models.objectives.sgopt import SGOpt
from models.objectives.simcse import SupHardNegSimCSE, SupSimCSE, UnsupSimCSE

__all__ = ["REGISTRY", "Objective", "build_objective", "cosine_logits", "UnsupSimCSE", "SupSimCSE",
           "SupHardNegSimCSE", "SGOpt"]
