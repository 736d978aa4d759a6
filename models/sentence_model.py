"""A Hugging Face encoder plus a detachable pooler, and the checkpoint layout that keeps them apart:
`CKPT/encoder/` (plain Hugging Face folder) and `CKPT/pooler/` (pooler config + weights)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor, nn

from models.checkpoint import CheckpointError, default_max_length, encoder_folder
from models.poolers import Pooler, build_pooler, load_pooler, masked_mean

EncodeMode = Literal["pooler", "cls", "mean"]


def load_backbone(folder: str | Path) -> tuple[nn.Module, Any]:
    from transformers import AutoModel, AutoTokenizer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    folder = encoder_folder(folder)
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        model = AutoModel.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"cannot load a Hugging Face model from {folder}: {exc}") from exc
    return model, tokenizer


class SentenceModel(nn.Module):
    def __init__(
        self, encoder: nn.Module, tokenizer: Any, pooler: Pooler, max_length: int = 32, serving_max_length: int = 256
    ) -> None:
        super().__init__()
        self.encoder, self.tokenizer, self.pooler, self.max_length = encoder, tokenizer, pooler, max_length
        # Training truncates short (max_length); serving keeps the backbone's own limit, saved with the encoder.
        self.serving_max_length = serving_max_length

    @classmethod
    def from_checkpoint(
        cls, checkpoint: str | Path, pooler: str | None = None, max_length: int = 32, **pooler_options: Any
    ) -> SentenceModel:
        """Load a Strata checkpoint (its own pooler unless `pooler` is given) or a plain HF folder."""
        encoder, tokenizer = load_backbone(checkpoint)
        pooler_dir = Path(checkpoint) / "pooler"
        if pooler is None and pooler_dir.is_dir():
            p = load_pooler(pooler_dir)
        else:
            p = build_pooler(
                pooler or "cls_last", encoder.config.hidden_size, encoder.config.num_hidden_layers, **pooler_options
            )
        return cls(encoder, tokenizer, p, max_length, default_max_length(encoder_folder(checkpoint)))

    @property
    def device(self) -> torch.device:
        return next(self.encoder.parameters()).device

    def tokenize(self, texts: Sequence[str]) -> dict[str, Tensor]:
        batch = self.tokenizer(
            list(texts), padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        )
        return {
            k: v.to(self.device) for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")
        }

    def hidden_states(self, batch: dict[str, Tensor]) -> tuple[Tensor, ...]:
        return self.encoder(**batch, output_hidden_states=True).hidden_states

    def forward(self, texts: Sequence[str], mode: EncodeMode = "pooler") -> Tensor:
        batch = self.tokenize(texts)
        hs = self.hidden_states(batch)
        if mode == "cls":  # the detached serving vector: the pooler is not used
            return hs[-1][:, 0]
        if mode == "mean":
            return masked_mean(hs[-1], batch["attention_mask"])
        return self.pooler(hs, batch["attention_mask"])

    @torch.inference_mode()
    def encode(self, texts: Sequence[str], mode: EncodeMode = "pooler", batch_size: int = 128) -> np.ndarray:
        """L2-normalised float32 vectors in input order (batches sorted by length to pad little)."""
        was_training = self.training
        self.eval()
        order = np.argsort([len(t) for t in texts], kind="stable")
        out = np.empty((len(texts), 0), dtype=np.float32)
        chunks: list[tuple[np.ndarray, np.ndarray]] = []
        for start in range(0, len(texts), batch_size):
            idx = order[start : start + batch_size]
            v = nn.functional.normalize(self.forward([texts[i] for i in idx], mode).float(), dim=-1)
            chunks.append((idx, v.cpu().numpy()))
        if chunks:
            out = np.empty((len(texts), chunks[0][1].shape[1]), dtype=np.float32)
            for idx, v in chunks:
                out[idx] = v
        self.train(was_training)
        return out

    def save(self, checkpoint: str | Path) -> Path:
        """Write `encoder/` (save_pretrained) and `pooler/` separately."""
        checkpoint = Path(checkpoint)
        self.encoder.save_pretrained(checkpoint / "encoder")
        self.tokenizer.save_pretrained(checkpoint / "encoder")
        # sentence-transformers' file: the exporter reads the serving max length from it (else 512 would apply).
        (checkpoint / "encoder" / "sentence_bert_config.json").write_text(
            json.dumps({"max_seq_length": self.serving_max_length, "do_lower_case": False})
        )
        self.pooler.save(checkpoint / "pooler")
        return checkpoint
