"""The detachable pooler: exporting a pooler-trained checkpoint with `--pooling cls` writes an ONNX graph with no
pooler parameters whose vector is the tuned encoder's normalised last-layer [CLS]."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from models.cli import main as encoder_cli
from models.sentence_model import SentenceModel
from models.trainer import Trainer
from tests.models.fixtures import SENTENCES, tiny_sts
from tests.models.test_training import config, examples


@pytest.fixture(scope="module")
def layer_att_checkpoint(tiny_bert, tmp_path_factory):
    out = tmp_path_factory.mktemp("layer-att-run")
    Trainer(
        config(tiny_bert, out, pooler="layer_att", objective="unsup", max_steps=3, eval_every=3),
        examples=examples(1),
        dev=tiny_sts(),
    ).train()
    return out / "last"


def test_export_cls_drops_pooler_and_matches_tuned_cls(layer_att_checkpoint, tiny_bert, tmp_path, capsys):
    onnx_dir = tmp_path / "onnx"
    assert (
        encoder_cli(["export", "--checkpoint", str(layer_att_checkpoint), "--out", str(onnx_dir), "--pooling", "cls",
                     "--quantize", "none"])  # fp32: compared with torch at 1e-4 below
        == 0
    )
    graph = onnx.load(str(onnx_dir / "encoder.onnx")).graph
    initializers = [numpy_helper.to_array(t) for t in graph.initializer]
    tuned = SentenceModel.from_checkpoint(layer_att_checkpoint).eval()
    pooler_tensors = [p.detach().numpy() for p in tuned.pooler.parameters()]
    assert pooler_tensors, "the layer-attention pooler has parameters"
    for w in pooler_tensors:  # no initializer (nor its transpose) carries a pooler weight
        for init in initializers:
            assert not (init.shape == w.shape and np.allclose(init, w)), "pooler weight found in the ONNX graph"
            assert not (init.shape == w.T.shape and np.allclose(init, w.T)), "pooler weight found in the ONNX graph"
    n_encoder = sum(p.numel() for p in tuned.encoder.parameters())
    assert sum(i.size for i in initializers) <= n_encoder

    from indexer.runtime.encoder import OnnxEncoder

    got = OnnxEncoder(onnx_dir).encode(SENTENCES)
    want = tuned.encode(SENTENCES, mode="cls")
    np.testing.assert_allclose(got, want, atol=1e-4)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    # The tuned encoder really moved, and the pooler output is a different vector from the served one.
    base = SentenceModel.from_checkpoint(tiny_bert).encode(SENTENCES, mode="cls")
    assert np.abs(base - want).max() > 1e-3
    assert np.abs(tuned.encode(SENTENCES, mode="pooler") - want).max() > 1e-2

    from tests.models.fixtures import shared_data

    shared_data()  # `encoder sts --onnx` scores the served vector itself (torch-free runtime)
    import json

    assert encoder_cli(["sts", "--onnx", str(onnx_dir), "--tasks", "STSB", "--max-pairs", "30", "--json"]) == 0
    onnx_row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    from models.sts import evaluate_tasks

    # Same runtime, same pairs: the CLI reports exactly what the served ONNX vectors score. (Comparing with torch
    # by Spearman is ill-posed on a random tiny BERT: its cosines all sit near 1, so 1e-6 noise reorders pairs.)
    direct = evaluate_tasks(OnnxEncoder(onnx_dir).encode, ["STSB"], max_pairs=30)
    assert onnx_row["STSB"] == pytest.approx(round(direct["STSB"], 2), abs=0.01)


def test_checkpoint_layout_is_encoder_plus_pooler(layer_att_checkpoint):
    from models.checkpoint import encoder_folder

    assert encoder_folder(layer_att_checkpoint) == layer_att_checkpoint / "encoder"


def test_trained_checkpoint_keeps_the_backbones_serving_length(tiny_bert, tmp_path):
    """A backbone that serves at 40 tokens (sentence-transformers' max_seq_length) keeps 40 through a Strata
    checkpoint and its export, rather than falling back to the tokenizer's or position table's 64."""
    import json
    import shutil

    from models.export import export_encoder

    backbone = tmp_path / "backbone"
    shutil.copytree(tiny_bert, backbone)
    (backbone / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 40}))
    model = SentenceModel.from_checkpoint(backbone, pooler="layer_att", max_length=16)
    ckpt = model.save(tmp_path / "ckpt")
    assert json.loads((ckpt / "encoder" / "sentence_bert_config.json").read_text())["max_seq_length"] == 40
    assert export_encoder(ckpt, tmp_path / "onnx").max_length == 40


def test_exporting_a_training_run_folder_names_its_best_checkpoint(layer_att_checkpoint, tmp_path):
    """`encoder export --checkpoint RUN` (the --out of `encoder train`) said only "no config.json"; it names
    RUN/best, the checkpoint to pass."""
    from models.checkpoint import CheckpointError
    from models.export import export_encoder

    run = layer_att_checkpoint.parent
    with pytest.raises(CheckpointError, match=f"it holds an `encoder train` run: pass {run / 'best'}"):
        export_encoder(run, tmp_path / "out", pooling="cls")
    assert not (tmp_path / "out").exists()
