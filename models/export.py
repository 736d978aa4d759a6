"""ONNX exporter: a Hugging Face encoder checkpoint → a serving folder whose graph outputs the pooled,
L2-normalised sentence vector. The served vector (`--pooling`):

- `cls`: the last-layer [CLS] — the serving vector of pooler-trained Strata encoders, whose training pooler is
  detached (never exported);
- `mean`: the masked token mean of the last layer (checkpoints trained that way, like all-MiniLM-L6-v2);
- `layers:I,J,…`: BERT-LC's training-free layer combination — the masked token mean of the average of hidden
  layers I, J, … (0 = the embedding output), still one graph and no extra serving cost;
- `pooler`: the checkpoint's own trained pooler, kept in the graph (for poolers whose output *is* the sentence
  vector, like S2Sent's selector; it costs the pooler's compute at serving time).

Without a pooling given, the checkpoint's own is used when it declares one (sentence-transformers' `modules.json`
and its Pooling module's `config.json`, e.g. all-MiniLM-L6-v2's mean), else `cls` (`resolve_pooling`), so a stock
sentence-transformers model is never served as [CLS] by accident."""

from __future__ import annotations

import json
import logging
import os
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from indexer.runtime.atomic import atomic_dir, sha256_file, write_json_atomic
from indexer.runtime.encoder import ENCODER_META, ENCODER_ONNX, EncoderMeta, OnnxEncoder
from indexer.runtime.progress import Working
from models.checkpoint import CheckpointError, check_max_length, default_max_length, encoder_folder
from models.parity import PARITY_SENTENCES

log = logging.getLogger(__name__)

Pooling = str  # "cls" | "mean" | "layers:I,J,…" | "pooler" (see parse_pooling)
Exporter = Literal["torchscript", "dynamo"]
OPSET = 18
# The TorchScript exporter is the default because its graph runs faster: on all-MiniLM-L6-v2, int8, 2 cores,
# 1.39x the sentences/s of the dynamo graph at batch 64 (850 vs 610) and 0.2 ms less at batch 1 (interleaved
# runs, see the #6 note). It needs eager attention: traced SDPA mis-handles padding (parity cosine 0.90).
MIN_COSINE = 0.9999


class ParityError(RuntimeError):
    """The exported graph does not reproduce the torch model closely enough."""


def parse_pooling(pooling: str, num_layers: int | None = None) -> tuple[str, list[int]]:
    """("cls" | "mean" | "pooler", []) or ("layers", [I, J, …]); raises ValueError with the accepted forms."""
    if pooling in ("cls", "mean", "pooler"):
        return pooling, []
    if pooling.startswith("layers:"):
        try:
            layers = sorted({int(x) for x in pooling.removeprefix("layers:").split(",") if x.strip()})
        except ValueError:
            layers = []
        if layers and all(i >= 0 and (num_layers is None or i <= num_layers) for i in layers):
            return "layers", layers
        bound = f"0..{num_layers}" if num_layers is not None else "0..L"
        raise ValueError(f"--pooling {pooling!r}: layers must be comma-separated integers in {bound}, "
                         "e.g. layers:0,6")
    raise ValueError(f"unknown pooling {pooling!r}: use cls, mean, layers:I,J,… or pooler")


# sentence-transformers' Pooling config flags → the pooling Strata serves; the other modes (max, mean_sqrt_len,
# weightedmean, lasttoken) have no Strata equivalent and are refused rather than replaced silently.
_ST_POOLING_FLAGS = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean"}
_ST_POOLING_TYPE = "sentence_transformers.models.Pooling"
_ST_DEFAULT_POOLING_DIR = "1_Pooling"


@dataclass(frozen=True)
class PoolingChoice:
    """The pooling an export serves and where it came from (printed by `encoder export`)."""

    pooling: Pooling
    origin: str  # "--pooling", "FILE (sentence-transformers)" or "default: the checkpoint declares none"
    notes: tuple[str, ...] = ()  # modules the checkpoint applies after pooling that the export leaves out


def declared_pooling(folder: Path) -> PoolingChoice | None:
    """The pooling a sentence-transformers checkpoint folder declares: its `modules.json`'s Pooling module's
    `config.json` (or `1_Pooling/config.json` without a `modules.json`); None when it declares none. A mode
    Strata cannot serve (max, mean_sqrt_len, weighted mean, last token, or several concatenated) raises
    `CheckpointError`, naming the file: exporting it as something else would change the model."""
    modules_file = folder / "modules.json"
    notes: list[str] = []
    config_file: Path | None = None
    if modules_file.is_file():
        try:
            modules = json.loads(modules_file.read_text())
            entries = [(str(m.get("type", "")), str(m.get("path", ""))) for m in modules]
        except (ValueError, TypeError, AttributeError) as exc:
            raise CheckpointError(f"{modules_file}: not sentence-transformers' list of modules: {exc}") from exc
        after_pooling = False
        for kind, path in entries:
            if kind == _ST_POOLING_TYPE:
                config_file, after_pooling = folder / path / "config.json", True
            elif after_pooling and not kind.endswith(".Normalize"):  # Strata always L2-normalises
                notes.append(f"{modules_file} applies {kind} ({path}) after pooling; the export leaves it out")
    elif (folder / _ST_DEFAULT_POOLING_DIR / "config.json").is_file():
        config_file = folder / _ST_DEFAULT_POOLING_DIR / "config.json"
    if config_file is None:
        return None
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{config_file}: unreadable pooling config: {exc}") from exc
    if not isinstance(config, dict):
        raise CheckpointError(f"{config_file}: expected a JSON object (sentence-transformers' Pooling config)")
    modes = sorted(k for k, v in config.items() if k.startswith("pooling_mode_") and v is True)
    if len(modes) == 1 and modes[0] in _ST_POOLING_FLAGS:
        return PoolingChoice(_ST_POOLING_FLAGS[modes[0]], f"{config_file} (sentence-transformers)", tuple(notes))
    if not modes:
        raise CheckpointError(f"{config_file}: no pooling_mode_* flag is true; pass --pooling explicitly")
    raise CheckpointError(f"{config_file} declares {' + '.join(modes)}, which Strata cannot serve (it serves cls, "
                          f"mean, layers:I,J,… or a Strata pooler); pass --pooling explicitly")


def resolve_pooling(checkpoint: str | Path, pooling: Pooling | None) -> PoolingChoice:
    """`pooling` when given; else the checkpoint's declared pooling (`declared_pooling`); else `cls`, the
    serving vector of pooler-trained Strata checkpoints (which declare none)."""
    if pooling is not None:
        return PoolingChoice(pooling, "--pooling")
    declared = declared_pooling(encoder_folder(checkpoint))
    return declared or PoolingChoice("cls", "default: the checkpoint declares no pooling")


def _masked_mean(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)


class PooledEncoder(nn.Module):
    """The serving graph: transformer → pooling → L2 normalisation."""

    def __init__(self, model: nn.Module, pooling: Pooling, pooler: nn.Module | None = None) -> None:
        super().__init__()
        self.model = model
        self.pooling = pooling
        self.kind, self.layers = parse_pooling(pooling, getattr(getattr(model, "config", None),
                                                                "num_hidden_layers", None))
        if self.kind == "pooler" and pooler is None:
            raise ValueError("--pooling pooler needs a Strata checkpoint with a pooler/ folder")
        self.pooler = pooler if self.kind == "pooler" else None

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden_states_needed = self.kind in ("layers", "pooler")
        out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                         output_hidden_states=hidden_states_needed)
        if self.kind == "cls":
            pooled = out.last_hidden_state[:, 0]
        elif self.kind == "mean":
            pooled = _masked_mean(out.last_hidden_state, attention_mask)
        elif self.kind == "layers":
            mixed = torch.stack([out.hidden_states[i] for i in self.layers], 0).mean(0)
            pooled = _masked_mean(mixed, attention_mask)
        else:
            pooled = self.pooler(out.hidden_states, attention_mask)
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
    pooling: Pooling | None = None,
    max_length: int | None = None,
    min_cosine: float = MIN_COSINE,
    force: bool = False,
    source: str | None = None,
    quantize: Literal["int8"] | None = None,
    gate_rows: int = 20_000,
    gate_screen_rows: int = 2_000,
    max_drop: float = 0.5,
    skip_gate: bool = False,
    exporter: Exporter = "torchscript",
    adaptation: dict[str, Any] | None = None,
) -> EncoderMeta:
    """Export `checkpoint` to `out_dir` atomically; refuse (writing nothing) if parity is below `min_cosine`
    or, with `quantize="int8"` (static int8, `models.quantize`), if a vector changes by more than
    `DETERMINISM_TOL` between a batch of one and a padded batch, or if int8 loses more than `max_drop` points on
    STS-B dev or Quora MRR@10 (screened on `gate_screen_rows` rows first, `models.int8_gate`; 0: the full gate
    only). The Python default is fp32; the `encoder export` command defaults to int8.
    `pooling` None: the checkpoint's declared pooling, else `cls` (`resolve_pooling`)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    folder = encoder_folder(checkpoint)
    choice = _pooling_choice(checkpoint, pooling)
    pooling = choice.pooling
    max_length = default_max_length(folder) if max_length is None else check_max_length(folder, max_length)
    out_dir = Path(out_dir)
    _check_out(out_dir, Path(checkpoint), folder, force)

    tokenizer, wrapper, dim = _load(folder, Path(checkpoint), pooling, exporter)

    with atomic_dir(out_dir, overwrite=force) as tmp:
        _export_onnx(tokenizer, wrapper, tmp / ENCODER_ONNX, exporter, f"{folder}", pooling)
        tokenizer.save_pretrained(tmp)
        meta = EncoderMeta(
            pooling=pooling,
            pooling_origin=choice.origin,
            dim=dim,
            max_length=max_length,
            source=source or str(Path(checkpoint).resolve()),
            onnx_sha256=sha256_file(tmp / ENCODER_ONNX),
            exported_at=datetime.now(timezone.utc),
            opset=OPSET,
            exporter=exporter,
            adaptation=adaptation,
        )
        write_json_atomic(tmp / ENCODER_META, meta.model_dump(mode="json"))
        meta.parity_min_cosine = round(_parity(wrapper, tokenizer, tmp, max_length, min_cosine, out_dir), 7)
        write_json_atomic(tmp / ENCODER_META, meta.model_dump(mode="json"))
        if quantize == "int8":
            meta = _quantize_in_place(tmp, meta, gate_rows=gate_rows, max_drop=max_drop, skip_gate=skip_gate,
                                      out_dir=out_dir, screen_rows=gate_screen_rows)
    return meta


def _check_out(out_dir: Path, checkpoint: Path, folder: Path, force: bool) -> None:
    """`FileExistsError` for an existing `out_dir` without `force`; `CheckpointError` when `out_dir` is or holds
    the checkpoint: replacing it would delete the checkpoint it is exported from (a training run's best/ with
    it)."""
    if out_dir.exists() and not force:
        raise FileExistsError(f"{out_dir} already exists (pass --force to replace it)")
    source_dir = checkpoint.resolve()
    if out_dir.resolve() in (source_dir, folder.resolve(), *source_dir.parents):
        raise CheckpointError(f"--out {out_dir} is or holds the checkpoint {checkpoint} being exported: writing it "
                              "would delete the checkpoint; write the export to another folder")


def _pooling_choice(checkpoint: str | Path, pooling: Pooling | None) -> PoolingChoice:
    """The pooling exported (`resolve_pooling`), logged with where it came from and any notes on it."""
    choice = resolve_pooling(checkpoint, pooling)
    log.info("pooling %s (%s)", choice.pooling, choice.origin)
    for note in choice.notes:
        log.warning("%s", note)
    return choice


def _export_onnx(tokenizer: Any, wrapper: PooledEncoder, path: Path, exporter: Exporter, folder: str,
                 pooling: Pooling) -> None:
    """The ONNX graph of `wrapper` at `path`, traced on two sample sentences; an exporter's failure is a
    `CheckpointError` that names the other exporter to try."""
    sample = tokenizer(PARITY_SENTENCES[:2], padding=True, return_tensors="pt")
    try:
        with Working(f"exporting to ONNX ({exporter} exporter, opset {OPSET}, pooling={pooling})", logger=log):
            _to_onnx(wrapper, (sample["input_ids"], sample["attention_mask"]), path, exporter)
    except Exception as exc:  # tracer/torch.export failures: name the way out instead of a traceback
        other = "dynamo" if exporter == "torchscript" else "torchscript"
        raise CheckpointError(f"the {exporter} ONNX exporter failed on {folder}: {type(exc).__name__}: "
                              f"{str(exc)[:300]} (try --exporter {other})") from exc


def _parity(wrapper: PooledEncoder, tokenizer: Any, tmp: Path, max_length: int, min_cosine: float,
            out_dir: Path) -> float:
    """The worst cosine between torch's and the exported graph's vectors (`check_parity`); `ParityError` below
    `min_cosine`, so that nothing is written to `out_dir`."""
    with Working("checking parity torch vs ONNX", logger=log):
        worst = check_parity(wrapper, tokenizer, tmp, max_length)
    log.info("parity torch vs ONNX: min cosine %.6f (threshold %.4f)", worst, min_cosine)
    if not worst >= min_cosine:
        raise ParityError(
            f"refusing to write {out_dir}: ONNX output differs from torch (min cosine {worst:.6f} < "
            f"{min_cosine}) on the sample sentences at batch 1 and batch {len(PARITY_SENTENCES)}"
        )
    return worst


def _load(folder: Path, checkpoint: Path, pooling: Pooling, exporter: Exporter) -> tuple[Any, PooledEncoder, int]:
    """The checkpoint's fast tokenizer, its encoder wrapped with `pooling` (a Strata checkpoint's own pooler for
    `pooler`) and its dimension; CheckpointError saying why it cannot be loaded."""
    from transformers import AutoModel, AutoTokenizer

    log.info("loading %s", folder)
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        extra = {"attn_implementation": "eager"} if exporter == "torchscript" else {}
        model = AutoModel.from_pretrained(folder, local_files_only=True, **extra).eval().to("cpu")
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"cannot load a Hugging Face model from {folder}: {exc}") from exc
    if not tokenizer.is_fast:
        raise CheckpointError(f"{folder} has no fast tokenizer (tokenizer.json); the serving side needs one")
    pooler = None
    if pooling == "pooler":
        from models.poolers import load_pooler

        pooler_dir = checkpoint / "pooler"
        if not pooler_dir.is_dir():
            raise CheckpointError(f"--pooling pooler: {checkpoint} has no pooler/ folder (a Strata checkpoint)")
        pooler = load_pooler(pooler_dir).eval()
    try:
        wrapper = PooledEncoder(model, pooling, pooler).eval()
    except ValueError as exc:
        raise CheckpointError(str(exc)) from exc
    return tokenizer, wrapper, int(model.config.hidden_size)


def _quantize_in_place(folder: Path, meta: EncoderMeta, *, gate_rows: int, max_drop: float, skip_gate: bool,
                       out_dir: Path, screen_rows: int) -> EncoderMeta:
    """Replace the fp32 graph in `folder` by its static int8 version if its vectors do not depend on the batch
    and it passes the quality gate."""
    import shutil

    from models.quantize import (
        CALIBRATION_TEXTS,
        DETERMINISM_TOL,
        QUANTIZATION,
        DeterminismError,
        QualityGateError,
        batch_invariance,
        calibration_and_check_texts,
        quality_gate,
        quantize_static_onnx,
    )

    int8_dir = folder / ".int8"
    calibration, check = calibration_and_check_texts()  # one read of the data files for both
    shutil.copytree(folder, int8_dir, ignore=shutil.ignore_patterns(".int8", ENCODER_ONNX))
    with Working("quantizing to int8 (static: weights per channel, activation scales calibrated on "
                 f"{CALIBRATION_TEXTS} sentences)", logger=log):
        details = quantize_static_onnx(folder, int8_dir / ENCODER_ONNX, calibration)
    int8_meta = meta.model_copy(update={"onnx_sha256": sha256_file(int8_dir / ENCODER_ONNX),
                                        "quantization": QUANTIZATION, "quantization_details": details})
    write_json_atomic(int8_dir / ENCODER_META, int8_meta.model_dump(mode="json"))
    int8 = OnnxEncoder(int8_dir)  # one session for both checks
    try:
        with Working("checking that int8 vectors do not depend on their batch", logger=log):
            invariance = batch_invariance(int8, check)
        log.info("int8 batch invariance: max |change| %.3g over %d texts alone vs in padded batches "
                 "(tolerance %g)", invariance["max_abs_diff"], invariance["texts"], DETERMINISM_TOL)
        if not invariance["max_abs_diff"] <= DETERMINISM_TOL:
            raise DeterminismError(
                f"refusing to write {out_dir}: int8 vectors depend on their batch (max change "
                f"{invariance['max_abs_diff']:.3g} > {DETERMINISM_TOL:g} over {invariance['texts']} texts); "
                "export fp32 with --quantize none")
        int8_meta.quantization_details = details | {"batch_invariance": invariance}
        if not skip_gate:
            report = quality_gate(folder, int8_dir, rows=gate_rows, max_drop=max_drop, screen_rows=screen_rows,
                                  int8=int8)
            if not report.passed:
                raise QualityGateError(f"refusing to write {out_dir}: int8 loses too much quality: "
                                       f"{report.summary()} (export fp32 with --quantize none)")
            int8_meta.quality_gate = report.as_dict()
        else:
            log.warning("int8 quality gate skipped (--skip-gate): quality is unmeasured")
    finally:
        int8.close()
    os.replace(int8_dir / ENCODER_ONNX, folder / ENCODER_ONNX)
    shutil.rmtree(int8_dir)
    write_json_atomic(folder / ENCODER_META, int8_meta.model_dump(mode="json"))
    return int8_meta
