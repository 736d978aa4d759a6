"""Poolers on a real (tiny, random) BERT: shapes, masking, save/load, and each method's defining property."""

from __future__ import annotations

import pytest
import torch

from models.poolers import REGISTRY, LayerAttPooler, build_pooler, load_pooler
from models.poolers.s2sent import dct_weights, lowest_dct_indices
from models.sentence_model import SentenceModel
from tests.models.fixtures import SENTENCES

OPTIONS = {
    "cls_last": {},
    "cls_mlp": {},
    "avg_last": {},
    "avg_first_last": {},
    "scalar_mix": {},
    "layer_att": {},
    "s2sent": {"last_k": 2, "freq_groups": 4, "reduction": 4},
    "layer_combination": {"layers": [1, 3]},
    "sgopt_head": {},
}



def hidden(tiny_bert, texts):
    model = SentenceModel.from_checkpoint(tiny_bert).eval()
    batch = model.tokenize(texts)
    with torch.no_grad():
        return model.hidden_states(batch), batch["attention_mask"]


def test_every_registered_pooler_is_covered():
    assert set(REGISTRY) == set(OPTIONS)


@pytest.mark.parametrize("kind", sorted(OPTIONS))
def test_pooler_shape_padding_invariance_and_roundtrip(kind, tiny_bert, tmp_path):
    torch.manual_seed(0)
    pooler = build_pooler(kind, 32, 3, **OPTIONS[kind]).eval()
    for p in pooler.parameters():  # non-trivial weights so a broken save/load cannot pass by accident
        torch.nn.init.normal_(p, std=0.5)
    short, mask_short = hidden(tiny_bert, SENTENCES[:1])
    padded, mask_padded = hidden(tiny_bert, [SENTENCES[0], SENTENCES[5] + " and the sea is green and blue"])
    assert mask_padded[0].sum() < mask_padded.shape[1], "the second sentence must force padding"
    with torch.no_grad():
        alone = pooler(short, mask_short)
        in_batch = pooler(padded, mask_padded)
    assert alone.shape == (1, pooler.output_dim) and in_batch.shape == (2, pooler.output_dim)
    torch.testing.assert_close(alone[0], in_batch[0], atol=1e-4, rtol=1e-4)  # padding never leaks in
    pooler.save(tmp_path / "pooler")
    again = load_pooler(tmp_path / "pooler").eval()
    assert type(again) is type(pooler) and again.options == pooler.options
    with torch.no_grad():
        torch.testing.assert_close(again(padded, mask_padded), in_batch)


def test_layer_att_cls_only_ablation_ignores_token_means(tiny_bert):
    hs, mask = hidden(tiny_bert, SENTENCES[:3])
    changed = tuple(torch.cat([h[:, :1], h[:, 1:] + 3.0], 1) for h in hs)  # move every non-[CLS] token
    cls_only = LayerAttPooler(32, 3, attention="cls", concat_cls_last=False).eval()
    full = LayerAttPooler(32, 3).eval()
    with torch.no_grad():
        torch.testing.assert_close(cls_only(hs, mask), cls_only(changed, mask))
        assert not torch.allclose(full(hs, mask), full(changed, mask))
        _, alpha = full.layer_attention(hs, mask)
    assert alpha.shape == (3, 4, 4)  # the embedding output and layers 1..3
    torch.testing.assert_close(alpha.sum(-1), torch.ones(3, 4))


def test_layer_att_without_cls_concat_has_smaller_mlp():
    assert LayerAttPooler(32, 3, concat_cls_last=False).mlp[0].in_features == 32
    assert LayerAttPooler(32, 3).mlp[0].in_features == 64


def test_s2sent_m1_is_plain_averaging_and_higher_m_uses_dct(tiny_bert):
    _, mask = hidden(tiny_bert, SENTENCES[:2] + ["a man"])
    w = dct_weights(lowest_dct_indices(1, 3), 3, mask)[..., 0]  # (B, k, T)
    n = mask.sum(1, keepdim=True).float()
    torch.testing.assert_close(w, (mask / (3 * n)).unsqueeze(1).expand_as(w))
    assert lowest_dct_indices(4, 3) == [(0, 0), (0, 1), (1, 0), (0, 2)]
    w4 = dct_weights(lowest_dct_indices(4, 3), 3, mask)
    torch.testing.assert_close(w4.sum((1, 2))[:, 0], torch.ones(3))  # DC basis sums to 1 (a mean)
    assert w4.sum((1, 2))[:, 1:].abs().max() < 1e-5  # higher bases are zero-mean: a different squeeze


def test_s2sent_block_weights_are_a_softmax_over_blocks(tiny_bert):
    hs, mask = hidden(tiny_bert, SENTENCES[:4])
    pooler = build_pooler("s2sent", 32, 3, last_k="all", freq_groups=2, reduction=4)
    x, a = pooler.block_weights(hs, mask)
    assert x.shape[1] == 3 and a.shape == (4, 3, 32)
    torch.testing.assert_close(a.sum(1), torch.ones(4, 32))
    with pytest.raises(ValueError):
        build_pooler("s2sent", 32, 3, last_k=5)


def test_layer_combination_of_last_layer_equals_avg_last(tiny_bert):
    hs, mask = hidden(tiny_bert, SENTENCES[:4])
    lc = build_pooler("layer_combination", 32, 3, layers=[3])
    torch.testing.assert_close(lc(hs, mask), build_pooler("avg_last", 32, 3)(hs, mask))
    two = build_pooler("layer_combination", 32, 3, layers=[0, 3])(hs, mask)
    first_last = build_pooler("avg_first_last", 32, 3)(hs, mask)
    assert not torch.allclose(two, first_last)  # layer 0 (embeddings) is not avg_first_last's layer 1


def test_scalar_mix_starts_as_uniform_mean(tiny_bert):
    hs, mask = hidden(tiny_bert, SENTENCES[:2])
    mix = build_pooler("scalar_mix", 32, 3)
    lc = build_pooler("layer_combination", 32, 3, layers=[0, 1, 2, 3])
    torch.testing.assert_close(mix(hs, mask), lc(hs, mask))
