"""Contracts every registry entry (and a few `+` combinations) must keep, generated from the registry."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from timm.models.vision_transformer import VisionTransformer
from torch import nn

import normbench
from normbench.layers import get_spec
from tests.layers._cases import ALL_LAYERS, GATES, MODIFIERS, NORMS, NUM_CLASSES, PLACEMENTS, images, tiny_vit

DIM = 32
QK_NORMS = [n for n in MODIFIERS if get_spec(n).qk_norm]  # their class is the norm q and k get: a norm contract


@pytest.mark.parametrize("layer", ALL_LAYERS)
def test_model_output_has_the_class_shape_and_is_finite(layer):
    model = tiny_vit(layer)
    out = model(images(batch=3))
    assert out.shape == (3, NUM_CLASSES)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", NORMS + QK_NORMS)
def test_norm_keeps_the_input_shape(name):
    norm = normbench.get_layer(name)(DIM)
    for shape in [(2, 7, DIM), (2, 4, 4, DIM)]:
        x = torch.randn(shape)
        y = norm(x)
        assert y.shape == x.shape and y.dtype == x.dtype
        assert torch.isfinite(y).all()


@pytest.mark.parametrize("name", GATES)
def test_gate_keeps_the_input_shape_channels_last(name):
    gate = normbench.get_layer(name)(DIM, depth=12)
    for shape in [(2, 7, DIM), (2, 4, 4, DIM), (2, 3, 4, 4, DIM)]:
        x = torch.randn(shape)
        y = gate(x)
        assert y.shape == x.shape and y.dtype == x.dtype


@pytest.mark.parametrize("name", PLACEMENTS)
def test_placement_block_keeps_the_token_shape(name):
    block = normbench.get_layer(name)(DIM, 2, depth=3, norm_layer=normbench.get_layer("layernorm"),
                                      gate_layer=lambda dim: nn.Identity())
    x = torch.randn(2, 7, DIM)
    assert block(x).shape == x.shape


@pytest.mark.parametrize("layer", ALL_LAYERS)
def test_gradients_reach_every_parameter(layer):
    model = tiny_vit(layer)
    x, y = images(batch=4), torch.arange(4) % NUM_CLASSES
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):  # zero-init layers (Fixup's head and last branch layers, ReZero's α) open up after a step
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    opt.zero_grad()
    F.cross_entropy(model(x), y).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, f"{name} gets no gradient"
        assert torch.isfinite(p.grad).all(), f"{name} has a non-finite gradient"
        assert p.grad.abs().sum() > 0, f"{name} has an all-zero gradient"


@pytest.mark.parametrize("name", NORMS + QK_NORMS)
def test_norm_follows_timms_norm_layer_contract(name):
    cls = normbench.get_layer(name)
    norm = cls(DIM, eps=1e-5, device="cpu", dtype=torch.float64)
    assert all(p.dtype == torch.float64 and p.device.type == "cpu" for p in norm.parameters())
    x = torch.randn(2, 7, DIM, dtype=torch.float64)
    assert norm(x).dtype == torch.float64
    if hasattr(norm, "eps"):
        assert norm.eps == 1e-5


@pytest.mark.parametrize("name", NORMS)
def test_norm_plugs_into_timms_own_vit(name):
    cls = normbench.get_layer(name)
    torch.manual_seed(0)
    model = VisionTransformer(img_size=16, patch_size=4, embed_dim=DIM, depth=2, num_heads=2, num_classes=5,
                              norm_layer=cls)
    assert isinstance(model.blocks[0].norm1, cls) and isinstance(model.norm, cls)
    out = model(images())
    assert out.shape == (2, 5) and torch.isfinite(out).all()


_SLOT = re.compile(r"(blocks\.\d+\.(norm1|norm2|ls1|ls2)|norm|fc_norm)\..+")


@pytest.mark.parametrize("layer", ALL_LAYERS)
def test_norm_and_gate_parameters_are_excluded_from_weight_decay(layer):
    model = tiny_vit(layer)
    no_wd = model.no_weight_decay()
    params = dict(model.named_parameters(remove_duplicate=False))  # a tied parameter (ReZero's α) has two names
    assert no_wd <= set(params), f"names that are not parameters: {no_wd - set(params)}"
    slot_params = {n for n in params if _SLOT.fullmatch(n)}
    assert slot_params <= no_wd, f"norm/gate parameters with weight decay: {slot_params - no_wd}"
    assert {"pos_embed", "cls_token"} <= no_wd
    for decayed in ("blocks.0.attn.qkv.weight", "blocks.0.attn.proj.weight", "blocks.0.mlp.fc1.weight",
                    "blocks.0.mlp.fc2.weight", "head.weight", "patch_embed.proj.weight"):
        assert decayed not in no_wd


def test_fc_norm_is_excluded_from_weight_decay_with_avg_pooling():
    model = tiny_vit("dyt+layerscale", global_pool="avg")
    fc_norm = {f"fc_norm.{n}" for n, _ in model.fc_norm.named_parameters()}
    assert fc_norm and fc_norm <= model.no_weight_decay()


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("layer", ALL_LAYERS)
def test_model_compiles_without_graph_breaks(layer, fresh_dynamo):
    # depth 1 keeps tracing fast; every block runs the same code, so a break in one would show in the first
    model = tiny_vit(layer, depth=1)
    explanation = torch._dynamo.explain(model)(images())
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1
