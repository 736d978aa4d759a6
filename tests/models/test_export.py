"""Exporter: real torch → real ONNX, checked against torch, written atomically."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from indexer.runtime.atomic import sha256_file  # noqa: E402
from indexer.runtime.encoder import OnnxEncoder  # noqa: E402
from models.export import ParityError, export_encoder  # noqa: E402

SENTENCES = ["how do i learn python quickly ?", "the sky is blue", "a man is playing a guitar in the sea"]


def _torch_reference(checkpoint: Path, texts: list[str], pooling: str) -> np.ndarray:
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModel.from_pretrained(checkpoint).eval()
    batch = tok(texts, padding=True, return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**{k: batch[k] for k in ("input_ids", "attention_mask")}).last_hidden_state
    if pooling == "cls":
        pooled = hidden[:, 0]
    else:
        mask = batch["attention_mask"].unsqueeze(-1).float()
        pooled = (hidden * mask).sum(1) / mask.sum(1)
    return torch.nn.functional.normalize(pooled, dim=-1).numpy()


@pytest.fixture(scope="module")
def exported(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("tiny-exports")
    for pooling in ("cls", "mean"):
        export_encoder(tiny_checkpoint, base / pooling, pooling=pooling)
    return {"cls": base / "cls", "mean": base / "mean"}


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_export_matches_torch(tiny_checkpoint: Path, exported: dict[str, Path], pooling: str) -> None:
    out = exported[pooling]
    assert {"encoder.json", "encoder.onnx", "tokenizer.json"} <= {p.name for p in out.iterdir()}
    written = json.loads((out / "encoder.json").read_text())
    assert written["pooling"] == pooling and written["dim"] == 32 and written["max_length"] == 64
    assert written["onnx_sha256"] == sha256_file(out / "encoder.onnx")
    assert written["parity_min_cosine"] >= 0.9999

    enc = OnnxEncoder(out, threads=1, verify_sha256=True)
    got = enc.encode(SENTENCES, batch_size=2)  # length-sorted batching must keep input order
    ref = _torch_reference(tiny_checkpoint, SENTENCES, pooling)
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert np.min(np.sum(got * ref, axis=1)) > 0.9999
    # dynamic axes: a batch of one and a batch of three with different lengths both run
    one, _ = enc.encode_with_flags(SENTENCES[:1])
    assert np.allclose(one[0], got[0], atol=1e-5)


def test_cls_and_mean_differ(exported: dict[str, Path]) -> None:
    a, b = OnnxEncoder(exported["cls"]), OnnxEncoder(exported["mean"])
    assert np.max(np.abs(a.encode(SENTENCES) - b.encode(SENTENCES))) > 1e-3


def test_refuses_below_parity_and_writes_nothing(tiny_checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "refused"
    with pytest.raises(ParityError, match="min cosine"):
        export_encoder(tiny_checkpoint, out, pooling="cls", min_cosine=1.5)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []  # no temporary folder left behind


def test_existing_output_needs_force(tiny_checkpoint: Path, exported: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "m"
    shutil.copytree(exported["cls"], out)
    first = sha256_file(out / "encoder.onnx")
    with pytest.raises(FileExistsError, match="--force"):
        export_encoder(tiny_checkpoint, out, pooling="cls")
    export_encoder(tiny_checkpoint, out, pooling="mean", force=True)
    assert json.loads((out / "encoder.json").read_text())["pooling"] == "mean"
    assert sha256_file(out / "encoder.onnx") != first


def test_truncation_is_flagged(exported: dict[str, Path]) -> None:
    enc = OnnxEncoder(exported["cls"])  # max_length 64 tokens
    _, flags = enc.encode_with_flags(["the sky", " ".join(["the sky is blue"] * 20)])
    assert flags == [False, True]


def test_cli_reports_missing_checkpoint(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "models.cli", "export", "--checkpoint", str(tmp_path / "nope"),
                        "--out", str(tmp_path / "out")], capture_output=True, text=True)
    assert r.returncode == 2
    assert "does not exist" in r.stderr and "Traceback" not in r.stderr


def test_int8_export_records_quantization(tiny_checkpoint: Path, exported: dict[str, Path], tmp_path: Path) -> None:
    from models.quantize import CHECK_TEXTS, DETERMINISM_TOL, PARITY_SENTENCES

    out = tmp_path / "int8"
    meta = export_encoder(tiny_checkpoint, out, pooling="cls", quantize="int8", skip_gate=True)
    assert meta.quantization == "int8-static-qdq" and meta.quality_gate is None
    written = json.loads((out / "encoder.json").read_text())
    assert written["onnx_sha256"] == sha256_file(out / "encoder.onnx")
    details = written["quantization_details"]
    assert details["scheme"] == "int8-static-qdq" and "MinMax over 512 sentences" in details["calibration"]
    assert details["quantized_ops"].startswith("12 MatMul nodes")  # 2 layers x (Q, K, V, out, 2 feed-forward)
    inv = details["batch_invariance"]
    assert inv["texts"] == CHECK_TEXTS + len(PARITY_SENTENCES)
    assert inv["max_abs_diff"] <= DETERMINISM_TOL == inv["tolerance"]
    assert (out / "encoder.onnx").stat().st_size < (exported["cls"] / "encoder.onnx").stat().st_size
    assert not (out / ".int8").exists()
    q, f = OnnxEncoder(out, verify_sha256=True).encode(SENTENCES), OnnxEncoder(exported["cls"]).encode(SENTENCES)
    assert np.min(np.sum(q * f, axis=1)) > 0.9  # same model, int8 weights


def test_int8_export_whose_gate_passes_records_the_gate(tiny_checkpoint: Path, exported: dict[str, Path],
                                                         tmp_path: Path, quora_file: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    import logging

    out = tmp_path / "int8"
    # max_drop 100: a random tiny BERT passes whatever it loses; the gate still measures both graphs
    with caplog.at_level(logging.INFO, logger="indexer.runtime.encoder"):
        meta = export_encoder(tiny_checkpoint, out, pooling="cls", quantize="int8", gate_rows=300, max_drop=100)
    # one int8 session serves the batch-invariance check and the gate (each used to load its own)
    assert sum(r.getMessage().startswith("loaded encoder") and "/.int8 " in r.getMessage()
               for r in caplog.records) == 1
    written = json.loads((out / "encoder.json").read_text())
    assert meta.quantization == written["quantization"] == "int8-static-qdq"
    assert written["quality_gate"] == meta.quality_gate and written["onnx_sha256"] == sha256_file(out / "encoder.onnx")
    gate = meta.quality_gate
    assert gate is not None and gate["quora_rows"] == 300 and gate["max_drop"] == 100
    assert gate["stsb_drop"] == pytest.approx(gate["stsb_dev_fp32"] - gate["stsb_dev_int8"], abs=1e-3)
    assert gate["mrr_drop"] == pytest.approx((gate["quora_mrr_fp32"] - gate["quora_mrr_int8"]) * 100, abs=1e-3)
    assert 0 < gate["quora_mrr_fp32"] <= 1 and 0 < gate["quora_mrr_int8"] <= 1
    assert (out / "encoder.onnx").stat().st_size < (exported["cls"] / "encoder.onnx").stat().st_size
    assert {p.name for p in out.iterdir()} == {p.name for p in exported["cls"].iterdir()}  # no .int8 left behind


def test_int8_export_refuses_batch_dependent_vectors(tiny_checkpoint: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Swap the static quantizer for the dynamic one: the real batch-invariance check must catch it."""
    import models.quantize as quantize

    def dynamic(model_dir: Path, dst: Path, texts: list[str], *args: object) -> dict[str, object]:
        quantize.quantize_dynamic_onnx(model_dir / "encoder.onnx", dst)
        return {"scheme": "dynamic"}

    monkeypatch.setattr(quantize, "quantize_static_onnx", dynamic)
    out = tmp_path / "int8"
    with pytest.raises(quantize.DeterminismError, match=r"depend on their batch .* --quantize none"):
        export_encoder(tiny_checkpoint, out, pooling="cls", quantize="int8", skip_gate=True)
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_cli_exports_int8_by_default_and_fp32_on_request(tiny_checkpoint: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import logging

    from models.cli import main

    args = ["export", "--checkpoint", str(tiny_checkpoint), "--pooling", "cls"]
    # the command as a user runs it (a process of its own)
    r = subprocess.run([sys.executable, "-m", "models.cli", *args, "--out", str(tmp_path / "int8"), "--skip-gate"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "int8-static-qdq" in r.stdout and "int8 batch invariance: max |change|" in r.stdout
    assert json.loads((tmp_path / "int8" / "encoder.json").read_text())["quantization"] == "int8-static-qdq"

    def here(*extra: str) -> tuple[int, str, str]:
        """The same command through `models.cli.main` in this process (torch is loaded already: seconds less);
        the root logger it configures on capsys's stream is restored after."""
        root = logging.getLogger()
        saved = (root.handlers[:], root.level)
        capsys.readouterr()
        try:
            rc = main([*args, *extra])
        finally:
            root.handlers[:] = saved[0]
            root.setLevel(saved[1])
        out, err = capsys.readouterr()
        return rc, out, err

    rc, out, _ = here("--out", str(tmp_path / "fp32"), "--quantize", "none")
    assert rc == 0 and "fp32" in out
    assert json.loads((tmp_path / "fp32" / "encoder.json").read_text())["quantization"] is None
    rc, _, err = here("--out", str(tmp_path / "x"), "--quantize", "none", "--skip-gate")
    assert rc == 2 and err.count("\n") == 1 and "apply to int8 only" in err
    assert not (tmp_path / "x").exists()

def test_cli_auto_quantize_writes_fp32_when_the_int8_data_is_missing(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """A container without the shared data folder (the nightly job's default) still gets an encoder: fp32, and
    the reason on stderr; with the data, `auto` is int8 (the demo test covers that path end to end)."""
    env = {**os.environ, "STRATA_DATA_DIR": str(tmp_path / "no-data")}
    r = subprocess.run([sys.executable, "-m", "models.cli", "export", "--checkpoint", str(tiny_checkpoint),
                        "--pooling", "cls", "--out", str(tmp_path / "m"), "--quantize", "auto"],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "--quantize auto writes fp32" in r.stderr and str(tmp_path / "no-data") in r.stderr
    assert json.loads((tmp_path / "m" / "encoder.json").read_text())["quantization"] is None



def test_int8_gate_refuses_and_writes_nothing(tiny_checkpoint: Path, tmp_path: Path, quora_file: Path) -> None:
    from models.quantize import QualityGateError

    out = tmp_path / "int8"
    # max_drop -100 demands int8 be 100 points *better* than fp32: the real gate must measure and refuse
    with pytest.raises(QualityGateError, match=r"STS-B dev .* Quora MRR@10 \(300 rows"):
        export_encoder(tiny_checkpoint, out, pooling="cls", quantize="int8", gate_rows=300, max_drop=-100)
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_dynamo_exporter_agrees_with_the_default(tiny_checkpoint: Path, exported: dict[str, Path],
                                                 tmp_path: Path) -> None:
    meta = export_encoder(tiny_checkpoint, tmp_path / "dynamo", pooling="cls", exporter="dynamo")
    default = json.loads((exported["cls"] / "encoder.json").read_text())
    assert meta.exporter == "dynamo" and default["exporter"] == "torchscript"
    assert meta.onnx_sha256 != default["onnx_sha256"]  # two different graphs...
    a, b = OnnxEncoder(exported["cls"]), OnnxEncoder(tmp_path / "dynamo")
    assert np.min(np.sum(a.encode(SENTENCES) * b.encode(SENTENCES), axis=1)) > 0.9999  # ...one function


def test_exporter_failure_is_a_clear_error_and_writes_nothing(tiny_checkpoint: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from models.checkpoint import CheckpointError

    def untraceable(*args: object, **kwargs: object) -> None:
        raise RuntimeError("unsupported operator")

    monkeypatch.setattr(torch.onnx, "export", untraceable)
    out = tmp_path / "out"
    message = r"torchscript ONNX exporter failed on .*unsupported operator \(try --exporter dynamo\)"
    with pytest.raises(CheckpointError, match=message):
        export_encoder(tiny_checkpoint, out, pooling="cls")
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("max_length", [-5, 0, 1, 65, 1000])
def test_max_length_outside_what_the_checkpoint_takes_is_refused(tiny_checkpoint: Path, tmp_path: Path,
                                                                 max_length: int) -> None:
    """The tiny BERT has 64 position embeddings: a longer --max-length crashed inside torch (a traceback) and
    would have crashed every served text past 64 tokens; 0 silently meant the default and a negative one
    overflowed in the tokenizer. Each is a one-line error saying what the checkpoint takes; nothing is written."""
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "models.cli", "export", "--checkpoint", str(tiny_checkpoint),
                        "--out", str(out), "--quantize", "none", "--max-length", str(max_length)],
                       capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 2, r.stderr[-2000:]
    assert f"--max-length {max_length}: " in r.stderr and "takes 2..64 tokens" in r.stderr
    assert "Traceback" not in r.stderr and not out.exists()


def test_default_max_length_never_exceeds_the_position_embeddings(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """A tokenizer that claims more tokens than the model has positions (model_max_length 512 on a 64-position
    BERT) exports at 64, so the served graph never sees an input it cannot run."""
    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint, ckpt)
    config = json.loads((ckpt / "tokenizer_config.json").read_text())
    (ckpt / "tokenizer_config.json").write_text(json.dumps({**config, "model_max_length": 512}))
    meta = export_encoder(ckpt, tmp_path / "out", pooling="mean")
    assert meta.max_length == 64
    enc = OnnxEncoder(tmp_path / "out")
    vectors, flags = enc.encode_with_flags(["the sky", " ".join(["the sky is blue"] * 60)])
    assert flags == [False, True] and np.all(np.isfinite(vectors))


def test_roberta_positions_leave_out_the_padding_offset(tmp_path: Path) -> None:
    from models.checkpoint import max_positions

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "roberta", "max_position_embeddings": 514,
                                                      "pad_token_id": 1}))
    assert max_positions(tmp_path) == 512
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "max_position_embeddings": 512}))
    assert max_positions(tmp_path) == 512


@pytest.mark.parametrize("flags, message", [
    (["--quantize", "none", "--min-cosine", "nan"], "--min-cosine must be a cosine in -1..1, got nan"),
    (["--min-cosine", "2"], "--min-cosine must be a cosine in -1..1, got 2.0"),
    (["--max-drop", "nan"], "--max-drop must be 0 or more points, got nan"),
    (["--max-drop", "-1"], "--max-drop must be 0 or more points, got -1.0"),
])
def test_thresholds_no_export_can_meet_are_refused_up_front(tiny_checkpoint: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str], flags: list[str],
                                                           message: str) -> None:
    """--min-cosine nan or 2 exported, then refused every graph as "differs from torch (min cosine 1.000000 <
    nan)"; --max-drop nan or -1 refused every int8 graph after its whole gate. Each is a usage error first."""
    from models.cli import main

    rc = main(["export", "--checkpoint", str(tiny_checkpoint), "--out", str(tmp_path / "out"), *flags])
    assert rc == 2 and f"encoder export: error: {message}" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_force_never_replaces_the_checkpoint_being_exported(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """`--out` naming the checkpoint itself (or a folder holding it, like a training run's OUT for OUT/best) with
    --force exported fine and deleted the checkpoint: the atomic replace removed the model it had just read."""
    from models.checkpoint import CheckpointError

    ckpt = tmp_path / "run" / "best"
    shutil.copytree(tiny_checkpoint, ckpt)
    before = sorted(p.name for p in ckpt.iterdir())
    for out in (ckpt, ckpt.parent, tmp_path):
        with pytest.raises(CheckpointError, match="is or holds the checkpoint .* being exported"):
            export_encoder(ckpt, out, pooling="cls", force=True)
    assert sorted(p.name for p in ckpt.iterdir()) == before
    export_encoder(ckpt, ckpt / "onnx", pooling="cls")  # a folder inside it is fine
    assert (ckpt / "onnx" / "encoder.onnx").is_file() and (ckpt / "model.safetensors").is_file()
