"""The calibration-range cache (`models.int8_calibration`): a hit writes the same int8 graph bit for bit as
calibrating, anything else is calibrated, an unreadable cache is measured again, and the package's shipped ranges are
those of this machine's default export. Real exports, real ONNX Runtime calibration."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime.quantization")

from indexer.runtime.atomic import sha256_file  # noqa: E402
from models.int8_calibration import PACKAGED, calibration_key  # noqa: E402
from models.quantize import StaticScheme, calibration_texts, quantize_static_onnx  # noqa: E402


def test_cached_ranges_write_the_same_int8_graph(tiny_exported: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("STRATA_HOME", str(tmp_path / "home"))
    texts = calibration_texts(32)
    runs = []
    for k in range(2):
        dst = tmp_path / f"q{k}.onnx"
        with caplog.at_level(logging.INFO, logger="models.int8_calibration"):
            details = quantize_static_onnx(tiny_exported, dst, texts)
        runs.append((details["calibration_ranges"], sha256_file(dst)))
    assert [r[0] for r in runs] == ["measured", "cached"] and runs[0][1] == runs[1][1]
    key = calibration_key(tiny_exported, texts, StaticScheme().label)
    cached = tmp_path / "home" / "cache" / "int8-calib" / f"{key}.json"
    assert f"read from {cached}" in caplog.text
    cached.write_text("{not json")  # an unreadable cache is measured again (and rewritten), never an error
    assert quantize_static_onnx(tiny_exported, tmp_path / "q2.onnx", texts)["calibration_ranges"] == "measured"
    assert sha256_file(tmp_path / "q2.onnx") == runs[0][1]
    # other texts or another scheme miss the key: they are calibrated
    assert quantize_static_onnx(tiny_exported, tmp_path / "q3.onnx", texts[:16])["calibration_ranges"] == "measured"
    assert calibration_key(tiny_exported, texts, StaticScheme(fuse_bias=False).label) != cached.stem


def test_the_shipped_calibration_is_this_machines_export(minilm_mean: Path) -> None:
    """`models/gate_refs/calib-*.json` holds the calibration ranges of `encoder export`'s default graph: this
    session's export of the same checkpoint has the same key (another torch, ONNX Runtime or calibration text set
    fails this: write it anew as models/gate_refs/README.md says)."""
    key = calibration_key(minilm_mean, calibration_texts(), StaticScheme().label)
    assert (PACKAGED / f"calib-{key}.json").is_file()


def test_one_read_of_the_data_gives_the_same_calibration_and_check_texts():
    """The export samples both from one pass; the calibration cache is keyed by these exact texts."""
    from models.quantize import calibration_and_check_texts, check_texts

    calibration, check = calibration_and_check_texts()
    assert calibration == calibration_texts()
    assert check == check_texts()
    assert not set(calibration) & set(check)


@pytest.mark.parametrize("model", ["tiny_exported", "minilm_mean"])
def test_the_pre_process_without_its_shape_pass_writes_the_same_graph(model: str, request: pytest.FixtureRequest,
                                                                      tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """`PRE_PROCESS` skips ONNX Runtime's ONNX shape inference before quantizing (1.5 s of the export): the int8
    graph must be the one the full pre-processing gives, bit for bit, or the shipped calibration and the gate's
    recorded decisions would not hold."""
    import models.quantize as quantize

    fp32 = request.getfixturevalue(model)
    monkeypatch.setenv("STRATA_HOME", str(tmp_path / "home"))
    texts = calibration_texts(32)
    quantize_static_onnx(fp32, tmp_path / "fast.onnx", texts)
    monkeypatch.setattr(quantize, "PRE_PROCESS", {"skip_symbolic_shape": True})  # ONNX Runtime's default pass
    quantize_static_onnx(fp32, tmp_path / "full.onnx", texts)
    assert sha256_file(tmp_path / "fast.onnx") == sha256_file(tmp_path / "full.onnx")
