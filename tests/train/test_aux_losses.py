"""LearnableScaler's auxiliary losses, checked against the source's formulas (boolean indexing, as the fork writes
them) and wired into training as opt-in keys."""

from __future__ import annotations

import pytest
import torch

from normbench.contracts.recipe import CellConfig, ModelConfig, TrainConfig
from normbench.train.aux_losses import AuxLosses, attention_probs, attn_extra_loss, feature_decay_loss
from normbench.train.loop import train_cell
from tests.layers._cases import images, tiny_vit


def source_attn_extra_loss(attn: torch.Tensor) -> torch.Tensor:
    # nghiemtuan/LearnableScaler timm/models/vision_transformer.py, Attention.compute_extra_loss
    values_max, _ = torch.max(attn, dim=-1)
    bad_values_max = values_max[values_max < 0.5]
    if len(bad_values_max) == 0:
        return torch.tensor(0.0)
    return 1 - torch.mean(bad_values_max)


def source_feature_decay_loss(features: torch.Tensor) -> torch.Tensor:
    # idem, Block.compute_feature_decay_loss
    absolute = torch.abs(features)
    danger = absolute[absolute > 200] - 200
    if len(danger) > 0:
        return torch.mean(danger) + torch.max(danger)
    return torch.tensor(0.0)


@pytest.mark.parametrize("temperature", [0.1, 1.0, 30.0])  # peaked (no bad rows), mixed, flat (all bad)
def test_attn_extra_loss_matches_the_source(temperature):
    attn = (torch.randn(2, 3, 9, 9, generator=torch.Generator().manual_seed(0)) / temperature).softmax(-1)
    torch.testing.assert_close(attn_extra_loss(attn), source_attn_extra_loss(attn))


@pytest.mark.parametrize("scale", [1.0, 150.0, 400.0])  # none above 200, a few, many
def test_feature_decay_loss_matches_the_source(scale):
    x = scale * torch.randn(2, 17, 32, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(feature_decay_loss(x), source_feature_decay_loss(x))
    if scale == 1.0:
        assert feature_decay_loss(x).item() == 0.0


def test_attention_probs_are_the_modules_own():
    attn = tiny_vit("layernorm").blocks[0].attn
    x = torch.randn(2, 17, 32)
    probs = attention_probs(attn, x)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 2, 17))
    v = attn.qkv(x).reshape(2, 17, 3, 2, 16).permute(2, 0, 3, 1, 4)[2]
    out = attn.proj((probs @ v).transpose(1, 2).reshape(2, 17, 32))
    torch.testing.assert_close(out, attn(x), atol=1e-5, rtol=1e-5)


def test_hooks_gather_the_terms_of_the_first_layers_in_training_only():
    model = tiny_vit("learnable_scaler", depth=3)
    aux = AuxLosses(model, attn_extra_loss=0.03, attn_extra_loss_layers=2, train_feature_decay=0.1)
    x = images(batch=4)
    model.train()
    model(x)
    gathered = aux.pop()
    # by hand: the attention term on blocks 0 and 1, the feature term on every block's output
    want, h = torch.zeros(()), model.pos_drop(torch.cat([model.cls_token.expand(4, -1, -1), model.patch_embed(x)], 1)
                                              + model.pos_embed)
    for i, block in enumerate(model.blocks):
        if i < 2:
            want = want + 0.03 * attn_extra_loss(attention_probs(block.attn, block.norm1(h)))
        h = block(h)
        want = want + 0.1 * feature_decay_loss(h)
    aux.pop()  # the by-hand pass ran the hooks too
    torch.testing.assert_close(gathered, want)
    assert gathered.requires_grad
    model.eval()
    model(x)
    assert aux.pop() == 0.0, "the source adds the losses in training only"
    aux.remove()
    model.train()
    model(x)
    assert aux.pop() == 0.0


def test_losses_are_off_by_default_and_train_when_on():
    tc = TrainConfig()
    assert tc.attn_extra_loss == 0.0 and tc.train_feature_decay == 0.0
    model = ModelConfig(layer="learnable_scaler", depth=2, embed_dim=32, num_heads=2, patch_size=4)
    base = dict(epochs=1, batch_size=128, warmup_epochs=0, seed=0)
    off = train_cell(CellConfig(model=model, train=TrainConfig(**base)), device="cpu")
    on = train_cell(CellConfig(model=model, train=TrainConfig(**base, attn_extra_loss=0.03, attn_extra_loss_layers=2,
                                                                train_feature_decay=0.1)), device="cpu")
    assert off.status == on.status == "ok"
    assert on.train_loss != off.train_loss, "the attention term is non-zero on a fresh model"
