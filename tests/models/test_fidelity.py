"""Each fidelity fix of the layer-pooling methods against their papers, pinned on a tiny random BERT:
every test here fails on the code before the fix."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from models.objectives import build_objective
from models.poolers import ClsMlp, LayerAttPooler, S2SentPooler, SGOptHead
from models.sentence_model import SentenceModel
from models.train_config import TrainConfig
from tests.models import fixtures
from tests.models.fixtures import SENTENCES


def hidden(tiny_bert, texts):
    model = SentenceModel.from_checkpoint(tiny_bert).eval()
    batch = model.tokenize(texts)
    with torch.no_grad():
        return model.hidden_states(batch), batch["attention_mask"]


def test_layer_att_pools_the_embedding_layer_by_default(tiny_bert):
    hs, mask = hidden(tiny_bert, SENTENCES[:4])
    pooler = LayerAttPooler(32, 3).eval()
    _, alpha = pooler.layer_attention(hs, mask)
    assert alpha.shape == (4, 4, 4)  # layers 0..3: the embedding output is attended over
    # changing only the embedding-layer output changes the pooled vector
    moved = (hs[0] + 1.0, *hs[1:])
    assert not torch.allclose(pooler(hs, mask), pooler(moved, mask))
    excluded = LayerAttPooler(32, 3, include_embeddings=False).eval()
    assert excluded.layer_attention(hs, mask)[1].shape == (4, 3, 3)
    excluded.load_state_dict(pooler.state_dict())
    assert torch.allclose(excluded(hs, mask), excluded(moved, mask))


@pytest.mark.parametrize("pooler", [LayerAttPooler(384, 6), ClsMlp(384, 6), SGOptHead(384, 6)])
def test_poolers_use_bert_init_normal_002_and_zero_bias(pooler):
    for m in pooler.modules():
        if isinstance(m, torch.nn.Linear):
            assert m.bias is None or torch.count_nonzero(m.bias) == 0
            std = m.weight.std().item()
            assert 0.018 < std < 0.022, std  # PyTorch's default would be U(±1/√fan_in): std 0.029 at 384
            assert abs(m.weight.mean().item()) < 0.002


def test_one_learning_rate_for_encoder_and_pooler_by_default(tiny_bert, tmp_path):
    from models.trainer import Trainer

    examples = [(s, s) for s in SENTENCES]
    common = dict(model=str(tiny_bert), out=tmp_path / "o", pooler="layer_att", objective="sup", batch_size=4,
                  max_steps=1, lr=2e-5, progress=False, device="cpu")
    t = Trainer(TrainConfig(**common), examples=examples, dev=fixtures.tiny_sts())
    assert [g["lr"] for g in t.optimizer.param_groups] == [2e-5, 2e-5]
    t2 = Trainer(TrainConfig(**common, pooler_lr=1e-3), examples=examples, dev=fixtures.tiny_sts())
    assert [g["lr"] for g in t2.optimizer.param_groups] == [2e-5, 1e-3]  # still an option


def test_control_arm_trains_through_an_mlp_on_cls_and_serves_cls_before_it(tiny_bert):
    hs, mask = hidden(tiny_bert, SENTENCES[:3])
    head = ClsMlp(32, 3).eval()
    cls = hs[-1][:, 0]
    assert torch.allclose(head(hs, mask), torch.tanh(head.mlp[0](cls)))
    model = SentenceModel.from_checkpoint(tiny_bert, pooler="cls_mlp").eval()
    with torch.no_grad():
        served = model(SENTENCES[:3], mode="cls")
        trained = model(SENTENCES[:3])
    assert torch.allclose(served, model.hidden_states(model.tokenize(SENTENCES[:3]))[-1][:, 0])
    assert not torch.allclose(served, trained)


def test_s2sent_applies_eq3_sigmoid_before_selecting_blocks(tiny_bert):
    hs, mask = hidden(tiny_bert, SENTENCES[:3])
    pooler = S2SentPooler(32, 3, last_k=3, freq_groups=1, reduction=4).eval()
    with torch.no_grad():
        for up in pooler.up:  # huge excitation logits: without the sigmoid the softmax would be one-hot
            up.weight.mul_(1e4)
            up.bias.normal_(0, 1e3)
        _, a = pooler.block_weights(hs, mask)
    # sigmoid gates lie in (0, 1), so softmax weights over k = 3 blocks lie in [1/(1+2e), e/(e+2)]
    assert a.min() >= 1 / (1 + 2 * np.e) - 1e-6 and a.max() <= np.e / (np.e + 2) + 1e-6


def test_s2sent_keeps_the_token_mean_and_the_cls_variant_is_separate(tiny_bert):
    hs, mask = hidden(tiny_bert, SENTENCES[:3])
    kept = S2SentPooler(32, 3, last_k=2, freq_groups=1, reduction=4).eval()
    assert kept.output == "mean"
    x, a = kept.block_weights(hs, mask)
    fused = (a.unsqueeze(2) * x).sum(1)
    m = mask.unsqueeze(-1).float()
    assert torch.allclose(kept(hs, mask), (fused * m).sum(1) / m.sum(1), atol=1e-6)
    detached = S2SentPooler(32, 3, last_k=2, freq_groups=1, reduction=4, output="cls").eval()
    detached.load_state_dict(kept.state_dict())
    assert torch.allclose(detached(hs, mask), fused[:, 0], atol=1e-6)
    with pytest.raises(ValueError, match="output"):
        S2SentPooler(32, 3, output="max")


def test_sgopt_defaults_are_the_papers(tiny_bert):
    obj = build_objective("sgopt")
    assert obj.temperature == 0.01 and obj.default_betas == (0.9, 0.9)
    assert build_objective("sup_hardneg").temperature == 0.05
    head = SGOptHead(32, 3)
    assert head.projection[0].out_features == 4096 and isinstance(head.projection[1], torch.nn.GELU)
    assert head.projection[2].out_features == 32


def test_sgopt_trainer_uses_paper_betas_and_views_from_every_layer(tiny_bert, tmp_path, monkeypatch):
    from models.trainer import Trainer

    cfg = TrainConfig(model=str(tiny_bert), out=tmp_path / "o", pooler="sgopt_head",
                      pooler_options={"hidden_dim": 64}, objective="sgopt", batch_size=4, max_steps=1,
                      progress=False, device="cpu")
    t = Trainer(cfg, examples=[(s,) for s in SENTENCES], dev=fixtures.tiny_sts())
    assert all(g["betas"] == (0.9, 0.9) for g in t.optimizer.param_groups)
    seen = {}
    project = t.model.pooler.project

    def spy(x):
        if x.dim() == 3:
            seen["views"] = x.shape[1]
        return project(x)

    monkeypatch.setattr(t.model.pooler, "project", spy)
    t.objective.loss(t.model, [(s,) for s in SENTENCES[:4]])
    assert seen["views"] == 4  # layers 0..3 of the frozen copy


def test_objectives_are_a_registry_without_import_cycle():
    import subprocess
    import sys

    code = "import models.objectives.sgopt as s; import models.objectives as o; print(sorted(o.REGISTRY))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.replace("'", '"')) == ["sgopt", "sup", "sup_hardneg", "unsup"]
