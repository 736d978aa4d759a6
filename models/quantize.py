"""int8 quantisation of an exported encoder, with a quality gate and a batch-invariance check.

The default scheme (`int8`, recorded as `int8-static-qdq`) is static: activation scales are calibrated once, at
export, on training-safe sentences, so a text's vector does not depend on what else is in its batch. Dynamic
quantisation (`quantize_dynamic`) picks each activation scale from the whole input tensor of every run —
padding included — so the same text differs alone and inside a padded batch (by how much: docs/cli.md, the int8
table); it is kept here only as the reference the static scheme is measured against
(docs/decisions.md).

What the static scheme does (`StaticScheme`, candidates measured in docs/decisions.md):
- the 36 MatMuls with a weight (Q/K/V, attention output, both feed-forward layers) run in int8: weights int8
  symmetric per output channel, inputs uint8 with one calibrated scale per tensor (MinMax over 512 sentences,
  one sentence per run so padding never enters a range); each is written, with its bias Add, as one
  `com.microsoft.MatMulIntegerToFloat` node — what ONNX Runtime would fuse the QDQ pattern into at load time,
  minus the bias it leaves outside (same vectors bit for bit, and faster: docs/cli.md, the int8 table);
- everything else stays float32: attention's two activation × activation MatMuls, softmax, LayerNorm, GELU,
  residual Adds, pooling; and the residual stream keeps the float LayerNorm outputs (`quantize_static` would
  otherwise feed the rounded copy to every consumer, the residual Add included, which costs STS-B dev points).

The quality gate (`models.int8_gate`, re-exported here) compares the int8 graph against the fp32 one on STS-B dev
(Spearman × 100) and Quora MRR@10 (paper protocol, exact search so only the encoder differs) and refuses when
either drops more than `max_drop` points: a small screen first, the full gate when the screen cannot decide.
The batch-invariance check encodes held-out texts alone and inside shuffled, padded batches (and through the
encoder's parallel row-sliced runs) and refuses when any vector moves by more than `DETERMINISM_TOL`.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from indexer.runtime.encoder import ENCODER_META, ENCODER_ONNX, TOKENIZER_FILE, EncoderMeta, OnnxEncoder
from models.int8_gate import GateReport, quality_gate, quora_mrr  # noqa: F401 (this module's API since #15)
from models.int8_graph import fuse_matmul_bias, restore_float_side_inputs
from models.parity import PARITY_SENTENCES
from models.sts import load_task

log = logging.getLogger(__name__)

QUANTIZATION = "int8-static-qdq"
DYNAMIC_QUANTIZATION = "int8-dynamic-per-channel"
CALIBRATION_TEXTS = 512
# 64 (+ the 7 parity sentences): a batch-dependent graph moves every padded row (dynamic int8: all of them, by up
# to 5e-2), so more texts find nothing more; the cost is the padded batches (measured: 9.4 instead of 19.3
# CPU-seconds on all-MiniLM-L6-v2).
CHECK_TEXTS = 64
# The check's shuffled padded batches, and the batch of its corpus-path pass. 71 texts in runs of 8 (the last of 7):
# the run that holds the truncated parity sentence pads to max_length, and each run is split over parallel 1-thread
# runs of 4 rows, as the service's micro-batches are; the corpus path's run of the 8 longest texts pads to
# max_length too. Rows never meet inside an int8 MatMul (integer sums, exact), LayerNorm, Softmax or pooling, so
# more rows per run add no arithmetic that could move a vector; what moves one is a scale taken from the run's
# tensor (dynamic int8: any mixed batch shows it) or a float kernel that changes with the padded length, which
# these runs reach. Padding 8 rows to 256 tokens instead of 64 is what the check saves (measured: batches of 7 and
# 64 and a corpus batch of 16 before): the same verdicts on static and dynamic int8
# (bench/results/int8-invariance-20261127T212709Z.md: 3.3-3.5 instead of 8.7-8.8 CPU-seconds for the whole check).
INVARIANCE_BATCHES = (8,)
INVARIANCE_CORPUS_BATCH = 8
# Largest allowed change of any vector component between a text encoded alone and inside a padded batch. fp32
# itself moves by ~1e-7 (float rounding differs between a run of 1 row and of many); dynamic int8 by ~5e-2.
DETERMINISM_TOL = 1e-6


class QualityGateError(RuntimeError):
    """int8 lost more quality than allowed."""


class DeterminismError(QualityGateError):
    """The quantized graph's vectors depend on the batch they are encoded in."""


# ---------------------------------------------------------------------------------------------- data


def sample_texts(n: int, *, skip: int = 0, data: Path | None = None) -> list[str]:
    """`n` training-safe sentences, half Wikipedia (the unsupervised training file, from line `skip // 2`) and
    half Quora questions from rows 100,000-299,999 whose qids never occur in the evaluation rows (< 100,000),
    after the first `skip // 2` such questions. Rows >= 300,000 are never read; neither the gate's STS-B dev
    pairs nor its Quora rows are among them."""
    return sample_text_sets([n], skip=skip, data=data)[0]


def sample_text_sets(sizes: list[int], *, skip: int = 0, data: Path | None = None) -> list[list[str]]:
    """`[sample_texts(sizes[0], skip=skip), sample_texts(sizes[1], skip=skip + sizes[0]), ...]` (consecutive,
    disjoint samples; each size even but the last) from one read of the data files: the Quora part reads the
    100,000 evaluation rows first to know their qids, once for every sample."""
    from models.data import EVAL_ROWS, HELD_OUT, QUORA, WIKI, DataError, data_dir, quora_rows, read_sentences

    if any(n % 2 for n in sizes[:-1]):
        raise ValueError(f"sample sizes {sizes}: all but the last must be even to split into halves")
    root = data or data_dir()
    n = sum(sizes)
    n_wiki, n_quora, offset = n - n // 2, n // 2, skip // 2
    wiki = [s for (s,) in read_sentences(root / WIKI, limit=offset + n_wiki)][offset:]
    eval_qids: set[int] = set()
    seen: set[int] = set()
    quora: list[str] = []
    for rid, q1, q2, t1, t2, _dup in quora_rows(root / QUORA):
        if rid >= HELD_OUT or len(quora) >= offset + n_quora:
            break
        if rid < EVAL_ROWS:
            eval_qids.update((q1, q2))
            continue
        for qid, text in ((q1, t1), (q2, t2)):
            if qid not in eval_qids and qid not in seen and text.strip():
                seen.add(qid)
                quora.append(text.strip())
    quora = quora[offset : offset + n_quora]
    if len(wiki) < n_wiki or len(quora) < n_quora:
        raise DataError(f"int8 calibration needs {n_wiki} sentences of {root / WIKI} and {n_quora} training-range "
                        f"questions of {root / QUORA}; found {len(wiki)} and {len(quora)}")
    out, w, q = [], 0, 0
    for size in sizes:
        out.append(wiki[w : w + size - size // 2] + quora[q : q + size // 2])
        w, q = w + size - size // 2, q + size // 2
    return out


def int8_data_problem(data: Path | None = None) -> str | None:
    """Why static int8 cannot be calibrated, checked and gated on this machine (its data is missing or
    unreadable), or None when it can. `encoder export --quantize auto` then writes fp32 instead of failing: a
    container without the shared data folder must still get a served encoder."""
    from models.data import DataError

    try:
        calibration_and_check_texts(data)
        load_task("STSB-dev", data)
    except (DataError, OSError, ValueError) as exc:
        return str(exc)
    return None


def calibration_texts(n: int = CALIBRATION_TEXTS, data: Path | None = None) -> list[str]:
    return sample_texts(n, data=data)


def check_texts(n: int = CHECK_TEXTS, data: Path | None = None) -> list[str]:
    """Texts for the batch-invariance check: disjoint from the calibration texts, plus the exporter's parity
    sentences (one short, one long enough to be truncated: the most padding a batch can hold)."""
    return sample_texts(n, skip=CALIBRATION_TEXTS, data=data) + PARITY_SENTENCES


def calibration_and_check_texts(data: Path | None = None) -> tuple[list[str], list[str]]:
    """`(calibration_texts(), check_texts())` from one read of the data files."""
    calibration, check = sample_text_sets([CALIBRATION_TEXTS, CHECK_TEXTS], data=data)
    return calibration, check + PARITY_SENTENCES


class TextCalibrationReader:
    """ONNX Runtime calibration data without padding: texts of the same token length share a run (up to
    `per_run`), so no padded position enters the activation ranges. MinMax takes each tensor's min and max over
    every run, so the ranges are those of one text per run (the same int8 graph bit for bit as one text per
    run, in far fewer runs: docs/decisions.md)."""

    def __init__(self, model_dir: Path, texts: list[str], per_run: int = 32) -> None:
        from tokenizers import Tokenizer

        meta = EncoderMeta.model_validate_json((model_dir / ENCODER_META).read_text())
        tok = Tokenizer.from_file(str(model_dir / TOKENIZER_FILE))
        tok.enable_truncation(max_length=meta.max_length)
        tok.no_padding()
        by_length: dict[int, list[list[int]]] = {}
        for e in tok.encode_batch(texts):
            by_length.setdefault(len(e.ids), []).append(e.ids)
        self._feeds = [{"input_ids": np.asarray(ids[i:i + per_run], dtype=np.int64),
                        "attention_mask": np.ones((len(ids[i:i + per_run]), n), dtype=np.int64)}
                       for n, ids in sorted(by_length.items()) for i in range(0, len(ids), per_run)]
        self._pos, self._stop = 0, len(self._feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self._pos >= self._stop:
            return None
        self._pos += 1
        return self._feeds[self._pos - 1]

    def __len__(self) -> int:
        return len(self._feeds)

    def set_range(self, start_index: int, end_index: int) -> None:
        self._pos, self._stop = start_index, min(end_index, len(self._feeds))


# ---------------------------------------------------------------------------------------------- quantizers


def quantize_dynamic_onnx(src: Path, dst: Path) -> None:
    """Dynamic int8 (the reference the static scheme is compared with): weights int8 per channel, activation scales
    computed by every run from its whole input (so they depend on the batch). `per_channel=True`: the per-tensor
    default lost several times more."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=True)


@dataclass(frozen=True)
class StaticScheme:
    """A static int8 recipe. The default is the one `encoder export` writes; the others are the alternatives
    the static scheme was measured against (docs/decisions.md)."""

    weight_matmuls_only: bool = True  # False: also attention's Q·Kᵀ and P·V (activation × activation)
    float_side_inputs: bool = True  # False: the residual Add reads the int8-rounded LayerNorm output too
    quant_format: Literal["qdq", "qoperator"] = "qdq"  # qoperator: QLinearMatMul, outputs requantized as well
    # Rewrite each QDQ MatMul and its bias Add as the `com.microsoft.MatMulIntegerToFloat` node ONNX Runtime fuses
    # it into at load time anyway, but with the bias inside: the same vectors bit for bit, ~7% more sentences/s.
    fuse_bias: bool = True

    @property
    def label(self) -> str:
        parts = [QUANTIZATION if self.quant_format == "qdq" else "int8-static-qoperator"]
        if not self.weight_matmuls_only:
            parts.append("all-matmuls")
        if not self.float_side_inputs:
            parts.append("shared-qdq")
        if self.quant_format == "qdq" and not self.fuse_bias:
            parts.append("unfused-bias")
        return "+".join(parts)

    def describe(self, quantized: int, texts: int) -> dict[str, object]:
        from onnxruntime import __version__ as ort_version

        return {
            "scheme": self.label,
            "tool": f"onnxruntime {ort_version} quantization.quantize_static",
            "quantized_ops": (f"{quantized} MatMul nodes " + ("with a weight (Q/K/V, attention output, "
                              "feed-forward)" if self.weight_matmuls_only else "(all, attention included)")),
            "float_ops": "embeddings, LayerNorm, Softmax, GELU, Add, pooling"
            + (", attention's activation x activation MatMuls" if self.weight_matmuls_only else ""),
            "weights": "int8 symmetric, per output channel",
            "activations": "uint8 asymmetric, one static scale per tensor",
            "calibration": f"MinMax over {texts} sentences, one per run (no padding): half the first lines of "
                           "train/wiki1m_for_simcse, half Quora questions of rows 100,000-299,999 whose qids are "
                           "not in rows < 100,000",
            "format": self.quant_format + (", each quantized MatMul and its bias Add then written as one "
                                           "com.microsoft.MatMulIntegerToFloat node (ONNX Runtime only)"
                                           if self.quant_format == "qdq" and self.fuse_bias else ""),
            "residual_stream": "float" if self.float_side_inputs else "int8-rounded",
        }


# ONNX Runtime's pre-processing before quantizing: its basic graph optimisations only. Symbolic shape inference cannot
# size this graph; its ONNX shape inference pass is redundant here (`quantize_static` infers the shapes of the graph it
# reads itself) and costs 1.5 s of the export: without it the int8 graph is the same bit for bit
# (tests/models/test_int8_calibration.py::test_the_pre_process_without_its_shape_pass_writes_the_same_graph).
PRE_PROCESS = {"skip_symbolic_shape": True, "skip_onnx_shape": True}


def quantize_static_onnx(model_dir: Path, dst: Path, texts: list[str],
                         scheme: StaticScheme = StaticScheme(), *, cache: bool = True) -> dict[str, object]:
    """Write the static int8 graph of `model_dir`'s encoder.onnx to `dst`; returns what was done (encoder.json's
    `quantization_details`). `cache`: read the calibration ranges from the content-keyed cache when this graph,
    these texts and this scheme were calibrated before (`models.int8_calibration`), else calibrate and cache them."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from models.int8_calibration import calibration_cache

    cache_path, hit = calibration_cache(model_dir, texts, scheme.label) if cache else (None, False)

    with tempfile.TemporaryDirectory(prefix="strata-quant.") as tmp:
        pre = Path(tmp) / "pre.onnx"
        # ORT's basic graph optimisations (`PRE_PROCESS`)
        quant_pre_process(str(model_dir / ENCODER_ONNX), str(pre), **PRE_PROCESS)
        graph = onnx.load(str(pre)).graph
        weights = {t.name for t in graph.initializer}
        chosen = [n.name for n in graph.node if n.op_type == "MatMul"
                  and (n.input[1] in weights or not scheme.weight_matmuls_only)]
        if not chosen:
            raise QualityGateError(f"{model_dir / ENCODER_ONNX} has no MatMul with a constant weight to quantize; "
                                   "export fp32 with --quantize none")
        options: dict[str, object] = {"MatMulConstBOnly": scheme.weight_matmuls_only}
        if scheme.quant_format == "qdq":
            options["OpTypesToExcludeOutputQuantization"] = ["MatMul"]  # float out: MatMulIntegerToFloat
        quantize_static(str(pre), str(dst), None if hit else TextCalibrationReader(model_dir, texts),
                        quant_format=QuantFormat.QDQ if scheme.quant_format == "qdq" else QuantFormat.QOperator,
                        op_types_to_quantize=["MatMul"], nodes_to_quantize=chosen, per_channel=True,
                        reduce_range=False, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod.MinMax, extra_options=options,
                        calibration_cache_path=cache_path)
    restore = scheme.quant_format == "qdq" and scheme.float_side_inputs
    fuse = scheme.quant_format == "qdq" and scheme.fuse_bias
    if restore or fuse:  # one load and one save for both rewrites (~90 MB of protobuf each way)
        model = onnx.load(str(dst))
        if restore:
            restore_float_side_inputs(model, set(chosen))
        if fuse:
            fused = fuse_matmul_bias(model, set(chosen))
            if fused != len(chosen):
                raise QualityGateError(f"only {fused} of the {len(chosen)} quantized MatMuls could be written as "
                                       "MatMulIntegerToFloat")
        onnx.save(model, str(dst))
    return scheme.describe(len(chosen), len(texts)) | {"calibration_ranges": "cached" if hit else "measured"}


# ---------------------------------------------------------------------------------------------- checks


def batch_invariance(model: Path | OnnxEncoder, texts: list[str], *, threads: int | None = None, seed: int = 0
                     ) -> dict[str, float]:
    """How far each text's vector moves between being encoded alone (a run of one, no padding) and inside
    shuffled batches of `INVARIANCE_BATCHES` padded to their longest text (row-sliced over parallel 1-thread runs,
    as the service runs them), and inside the corpus path (`encode`: length-sorted batches on the run pool).
    `model`: a model folder (a session is made and closed here) or an open encoder (the caller's, left open)."""
    enc = model if isinstance(model, OnnxEncoder) else OnnxEncoder(model, threads=threads)
    try:
        # each text alone: one unpadded run of one row per text, the runs spread over the encoder's threads
        alone, _ = enc.encode_with_flags(texts, batch_size=1, group_by_length=False)
        rng = np.random.default_rng(seed)
        worst = np.zeros(len(texts))
        cosine = 1.0
        for batch in INVARIANCE_BATCHES:
            perm = rng.permutation(len(texts))
            got, _ = enc.encode_with_flags([texts[i] for i in perm], batch_size=batch, group_by_length=False)
            worst[perm] = np.maximum(worst[perm], np.abs(got - alone[perm]).max(axis=1))
            cosine = min(cosine, float(np.min(np.sum(got * alone[perm], axis=1))))
        got = enc.encode(texts, batch_size=INVARIANCE_CORPUS_BATCH)
        worst = np.maximum(worst, np.abs(got - alone).max(axis=1))
        cosine = min(cosine, float(np.min(np.sum(got * alone, axis=1))))
    finally:
        if enc is not model:
            enc.close()
    return {"texts": len(texts), "max_abs_diff": float(worst.max()), "min_cosine": round(cosine, 9),
            "rows_bitwise_equal": int((worst == 0).sum()), "tolerance": DETERMINISM_TOL}
