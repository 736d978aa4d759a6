"""The static int8 scheme's calibration ranges, cached by content, so that a repeated export does not calibrate again.

Calibration runs the fp32 graph, unoptimised, over the 512 calibration sentences to find each quantized tensor's
min and max: most of the quantization's CPU time (docs/cli.md). Its result (ONNX Runtime's own JSON calibration cache,
`quantize_static(calibration_cache_path=...)`) is a function of the fp32 graph's bytes, the calibration texts, the
scheme and the ONNX Runtime version, so it is stored under a key made of exactly those
(`$STRATA_HOME/cache/int8-calib/<key>.json`), and the package ships those of `encoder export`'s default graph and
of the demo's (mean and layers:0,6: `models/gate_refs/calib-<key>.json`). A hit writes the same int8 graph bit
for bit as calibrating again (`tests/models/test_int8_calibration.py`); any other graph, text, scheme or ONNX
Runtime misses the key and is calibrated. The int8 graph is then checked as always (batch invariance, the quality
gate): the cache decides how fast the graph is made, never whether it ships.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

from indexer.runtime.atomic import sha256_file
from indexer.runtime.encoder import ENCODER_META, ENCODER_ONNX
from indexer.runtime.paths import strata_home

log = logging.getLogger(__name__)

PACKAGED = Path(__file__).resolve().parent / "gate_refs"  # shipped with the gate's fp32 references
VERSION = 1
# How TextCalibrationReader feeds the texts (same-length runs of up to 32, no padding): part of what the ranges are
READER = "same-length runs of 32, no padding"


def calibration_key(model_dir: Path, texts: list[str], scheme_label: str) -> str:
    """What the ranges depend on: the fp32 graph's bytes (its sha256, hashed here rather than trusted from
    encoder.json), its max length, the texts, the scheme and the ONNX Runtime version."""
    from onnxruntime import __version__ as ort_version

    meta = json.loads((model_dir / ENCODER_META).read_text())
    spec = {"onnx": sha256_file(model_dir / ENCODER_ONNX), "max_length": meta.get("max_length"),
            "texts": hashlib.sha256(json.dumps(texts).encode()).hexdigest(), "scheme": scheme_label,
            "reader": READER, "onnxruntime": ort_version, "v": VERSION}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:32]


def _readable(path: Path) -> bool:
    from onnxruntime.quantization.calibrate import load_tensors_data

    try:
        load_tensors_data(path)
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return True


def calibration_cache(model_dir: Path, texts: list[str], scheme_label: str) -> tuple[Path | None, bool]:
    """(path for `quantize_static`'s `calibration_cache_path`, hit): the user's cached or the package's shipped
    ranges when they exist and load; else where the user's cache should be written (None when it cannot be: the
    export then calibrates without caching)."""
    key = calibration_key(model_dir, texts, scheme_label)
    user = strata_home() / "cache" / "int8-calib" / f"{key}.json"
    for where in (user, PACKAGED / f"calib-{key}.json"):
        if where.is_file() and _readable(where):
            log.info("int8 calibration ranges of %s read from %s", model_dir, where)
            return where, True
    try:
        user.unlink(missing_ok=True)  # unreadable: calibrate again and write it anew
        user.parent.mkdir(parents=True, exist_ok=True)
        if os.access(user.parent, os.W_OK):
            return user, False
    except OSError as exc:
        log.warning("int8 calibration: cannot cache the ranges in %s: %s", user.parent, exc)
    return None, False
