"""ONNX exporter: a Hugging Face encoder checkpoint → a serving folder whose graph outputs the pooled,
L2-normalised sentence vector. Pooler weights of a Strata checkpoint are never exported: the serving vector
is the last-layer [CLS] (`cls`) or the masked mean (`mean`, for checkpoints trained that way)."""

from __future__ import annotations

import logging
import os
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch import nn

from indexer.atomic import atomic_dir, sha256_file, write_json_atomic
from indexer.onnx_encoder import ENCODER_META, ENCODER_ONNX, EncoderMeta, OnnxEncoder
from models.checkpoint import CheckpointError, default_max_length, encoder_folder

log = logging.getLogger(__name__)

Pooling = Literal["cls", "mean"]
Exporter = Literal["torchscript", "dynamo"]
OPSET = 18
# The TorchScript exporter is the default because its graph runs faster: on all-MiniLM-L6-v2, int8, 2 cores,
# 1.39x the sentences/s of the dynamo graph at batch 64 (850 vs 610) and 0.2 ms less at batch 1 (interleaved
# runs, see the #6 note). It needs eager attention: traced SDPA mis-handles padding (parity cosine 0.90).
MIN_COSINE = 0.9999

# Varied lengths on purpose: padding inside a batch is where exported graphs go wrong.
PARITY_SENTENCES = [
    "hi",
    "How do I learn Python quickly?",
    "What is the best way to invest ten thousand dollars in India right now, given the inflation rate?",
    "A man is playing a guitar.",
    " ".join(["Why is the sky blue and the sea green and the grass so much greener elsewhere?"] * 40),
    "Quelle est la capitale de la France ?",
    "12345 67890 !!! ??? ...",
]


class ParityError(RuntimeError):
    """The exported graph does not reproduce the torch model closely enough."""


class PooledEncoder(nn.Module):
    """The serving graph: transformer → pooling → L2 normalisation."""

    def __init__(self, model: nn.Module, pooling: Pooling) -> None:
        super().__init__()
        self.model = model
        self.pooling = pooling

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        if self.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return nn.functional.normalize(pooled, p=2.0, dim=-1)


def _torch_vectors(wrapper: PooledEncoder, tokenizer, texts: list[str], max_length: int) -> np.ndarray:
    batch = tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.inference_mode():
        return wrapper(batch["input_ids"], batch["attention_mask"]).numpy()


def check_parity(wrapper: PooledEncoder, tokenizer, folder: Path, max_length: int) -> float:
    """Minimum cosine between torch and the exported folder (its own tokenizer.json and ONNX session), at
    batch 1 for every sample sentence and at batch N for all of them padded together."""
    runtime = OnnxEncoder(folder, threads=min(2, os.cpu_count() or 1), providers=["CPUExecutionProvider"])
    worst = 1.0
    batches = [[s] for s in PARITY_SENTENCES] + [PARITY_SENTENCES]
    for texts in batches:
        ref = _torch_vectors(wrapper, tokenizer, texts, max_length)
        # one padded run on purpose: padding inside a batch is what this check is for
        got, _ = runtime.encode_with_flags(texts, batch_size=len(texts), group_by_length=False)
        worst = min(worst, float(np.min(np.sum(ref * got, axis=1))))
    return worst


def _to_onnx(wrapper: PooledEncoder, args: tuple[torch.Tensor, torch.Tensor], path: Path, exporter: Exporter) -> None:
    names = {"input_names": ["input_ids", "attention_mask"], "output_names": ["sentence_embedding"]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript path warns that it is deprecated
        if exporter == "torchscript":
            torch.onnx.export(wrapper, args, str(path), **names, opset_version=OPSET, dynamo=False,
                              dynamic_axes={"input_ids": {0: "batch", 1: "sequence"},
                                            "attention_mask": {0: "batch", 1: "sequence"},
                                            "sentence_embedding": {0: "batch"}})
        else:
            batch_dim, seq_dim = torch.export.Dim("batch"), torch.export.Dim("sequence")
            torch.onnx.export(wrapper, args, str(path), **names, opset_version=OPSET, dynamo=True,
                              dynamic_shapes={"input_ids": {0: batch_dim, 1: seq_dim},
                                              "attention_mask": {0: batch_dim, 1: seq_dim}},
                              external_data=False, verbose=False)


def export_encoder(
    checkpoint: str | Path,
    out_dir: str | Path,
    *,
    pooling: Pooling = "cls",
    max_length: int | None = None,
    min_cosine: float = MIN_COSINE,
    force: bool = False,
    source: str | None = None,
    quantize: Literal["int8"] | None = None,
    gate_rows: int = 20_000,
    max_drop: float = 0.5,
    skip_gate: bool = False,
    exporter: Exporter = "torchscript",
) -> EncoderMeta:
    """Export `checkpoint` to `out_dir` atomically; refuse (writing nothing) if parity is below `min_cosine`
    or, with `quantize="int8"` (static int8, `models.quantize`), if a vector changes by more than
    `DETERMINISM_TOL` between a batch of one and a padded batch, or if int8 loses more than `max_drop` points on
    STS-B dev or Quora MRR@10. The Python default is fp32; the `encoder export` command defaults to int8."""
    from transformers import AutoModel, AutoTokenizer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    folder = encoder_folder(checkpoint)
    max_length = max_length or default_max_length(folder)
    out_dir = Path(out_dir)
    if out_dir.exists() and not force:
        raise FileExistsError(f"{out_dir} already exists (pass --force to replace it)")

    log.info("loading %s", folder)
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        extra = {"attn_implementation": "eager"} if exporter == "torchscript" else {}
        model = AutoModel.from_pretrained(folder, local_files_only=True, **extra).eval().to("cpu")
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"cannot load a Hugging Face model from {folder}: {exc}") from exc
    if not tokenizer.is_fast:
        raise CheckpointError(f"{folder} has no fast tokenizer (tokenizer.json); the serving side needs one")
    wrapper = PooledEncoder(model, pooling).eval()
    dim = int(model.config.hidden_size)

    with atomic_dir(out_dir, overwrite=force) as tmp:
        sample = tokenizer(PARITY_SENTENCES[:2], padding=True, return_tensors="pt")
        log.info("exporting to ONNX (%s exporter, opset %d, pooling=%s)", exporter, OPSET, pooling)
        try:
            _to_onnx(wrapper, (sample["input_ids"], sample["attention_mask"]), tmp / ENCODER_ONNX, exporter)
        except Exception as exc:  # tracer/torch.export failures: name the way out instead of a traceback
            other = "dynamo" if exporter == "torchscript" else "torchscript"
            raise CheckpointError(f"the {exporter} ONNX exporter failed on {folder}: {type(exc).__name__}: "
                                  f"{str(exc)[:300]} (try --exporter {other})") from exc
        tokenizer.save_pretrained(tmp)
        meta = EncoderMeta(
            pooling=pooling,
            dim=dim,
            max_length=max_length,
            source=source or str(Path(checkpoint).resolve()),
            onnx_sha256=sha256_file(tmp / ENCODER_ONNX),
            exported_at=datetime.now(timezone.utc),
            opset=OPSET,
            exporter=exporter,
        )
        write_json_atomic(tmp / ENCODER_META, meta.model_dump(mode="json"))
        worst = check_parity(wrapper, tokenizer, tmp, max_length)
        log.info("parity torch vs ONNX: min cosine %.6f (threshold %.4f)", worst, min_cosine)
        if not worst >= min_cosine:
            raise ParityError(
                f"refusing to write {out_dir}: ONNX output differs from torch (min cosine {worst:.6f} < "
                f"{min_cosine}) on the sample sentences at batch 1 and batch {len(PARITY_SENTENCES)}"
            )
        meta.parity_min_cosine = round(worst, 7)
        write_json_atomic(tmp / ENCODER_META, meta.model_dump(mode="json"))
        if quantize == "int8":
            meta = _quantize_in_place(tmp, meta, gate_rows=gate_rows, max_drop=max_drop, skip_gate=skip_gate,
                                      out_dir=out_dir)
    return meta


def _quantize_in_place(folder: Path, meta: EncoderMeta, *, gate_rows: int, max_drop: float, skip_gate: bool,
                       out_dir: Path) -> EncoderMeta:
    """Replace the fp32 graph in `folder` by its static int8 version if its vectors do not depend on the batch
    and it passes the quality gate."""
    import shutil

    from models.quantize import (
        DETERMINISM_TOL,
        QUANTIZATION,
        DeterminismError,
        QualityGateError,
        batch_invariance,
        calibration_texts,
        check_texts,
        quality_gate,
        quantize_static_onnx,
    )

    int8_dir = folder / ".int8"
    shutil.copytree(folder, int8_dir, ignore=shutil.ignore_patterns(".int8", ENCODER_ONNX))
    log.info("quantizing to int8 (static: weights per channel, activation scales calibrated once)")
    details = quantize_static_onnx(folder, int8_dir / ENCODER_ONNX, calibration_texts())
    int8_meta = meta.model_copy(update={"onnx_sha256": sha256_file(int8_dir / ENCODER_ONNX),
                                        "quantization": QUANTIZATION, "quantization_details": details})
    write_json_atomic(int8_dir / ENCODER_META, int8_meta.model_dump(mode="json"))
    invariance = batch_invariance(int8_dir, check_texts())
    log.info("int8 batch invariance: max |change| %.3g over %d texts alone vs in padded batches (tolerance %g)",
             invariance["max_abs_diff"], invariance["texts"], DETERMINISM_TOL)
    if not invariance["max_abs_diff"] <= DETERMINISM_TOL:
        raise DeterminismError(
            f"refusing to write {out_dir}: int8 vectors depend on their batch (max change "
            f"{invariance['max_abs_diff']:.3g} > {DETERMINISM_TOL:g} over {invariance['texts']} texts); "
            "export fp32 with --quantize none")
    int8_meta.quantization_details = details | {"batch_invariance": invariance}
    if not skip_gate:
        report = quality_gate(folder, int8_dir, rows=gate_rows, max_drop=max_drop)
        if not report.passed:
            raise QualityGateError(f"refusing to write {out_dir}: int8 loses too much quality: {report.summary()} "
                                   "(export fp32 with --quantize none)")
        int8_meta.quality_gate = report.as_dict()
    else:
        log.warning("int8 quality gate skipped (--skip-gate): quality is unmeasured")
    os.replace(int8_dir / ENCODER_ONNX, folder / ENCODER_ONNX)
    shutil.rmtree(int8_dir)
    write_json_atomic(folder / ENCODER_META, int8_meta.model_dump(mode="json"))
    return int8_meta
