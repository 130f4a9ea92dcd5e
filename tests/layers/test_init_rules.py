"""Each method's formula and init rule, checked against its source (the seeds and the papers they cite)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from normbench.layers import (
    DeepNormBlock,
    DyT,
    FixupGate,
    LayerNorm,
    LayerScale,
    LearnableScaler,
    LearnableScaler2d,
    PostNormBlock,
    ReZero,
    SkipInit,
    cait_init_values,
    get_layer,
)
from tests.layers._cases import images, tiny_vit


def _xavier_std(linear_or_weight) -> float:
    w = getattr(linear_or_weight, "weight", linear_or_weight)
    fan_out, fan_in = w.shape
    return math.sqrt(2.0 / (fan_in + fan_out))


def _close(a: float, b: float, rel: float = 0.1) -> bool:
    return abs(a - b) <= rel * abs(b)


# --- ReZero, SkipInit, Fixup: every block is the identity at init ---------------------------------------------------


@pytest.mark.parametrize("layer", ["rezero", "skipinit", "fixup", "dyt+rezero", "learnable_scaler+skipinit"])
@torch.no_grad()
def test_zero_init_blocks_are_the_identity(layer):
    model = tiny_vit(layer).eval()
    x = torch.randn(2, 17, 32)
    for block in model.blocks:
        assert torch.equal(block(x), x)


@pytest.mark.parametrize("cls", [ReZero, SkipInit])
def test_rezero_alpha_is_a_zero_scalar(cls):
    gate = cls(32, depth=12)
    assert gate.alpha.shape == (1,) and gate.alpha.item() == 0.0
    assert gate.alpha._no_weight_decay
    assert cls(32, depth=12, init_values=0.3).alpha.item() == pytest.approx(0.3)
    x = torch.randn(2, 5, 32)
    torch.testing.assert_close(cls(32, depth=12, init_values=0.3)(x), 0.3 * x)


def test_rezero_and_skipinit_models_have_no_norm():
    for layer in ("rezero", "skipinit"):
        model = tiny_vit(layer)
        assert not any(isinstance(m, (nn.LayerNorm, nn.RMSNorm)) for m in model.modules())


def test_fixup_zeroes_the_head_and_each_branch_output():
    model = tiny_vit("fixup")
    assert torch.equal(model(images()), torch.zeros(2, 5))
    for block in model.blocks:
        assert not block.attn.proj.weight.any() and not block.mlp.fc2.weight.any()
        for gate in (block.ls1, block.ls2):
            assert isinstance(gate, FixupGate)
            assert gate.scale.item() == 1.0 and gate.bias.item() == 0.0
        assert block.norm1.bias.item() == 0.0 and block.norm2.bias.item() == 0.0


@pytest.mark.parametrize("depth", [3, 6])
def test_fixup_scales_the_other_branch_layers(depth):
    fixup, plain = tiny_vit("fixup", seed=7, depth=depth), tiny_vit("none", seed=7, depth=depth)
    num_branches, layers_per_branch = 2 * depth, 2
    scale = num_branches ** (-1 / (2 * layers_per_branch - 2))
    assert scale == pytest.approx(depth ** -0.5 / math.sqrt(2))
    for b_fix, b_plain in zip(fixup.blocks, plain.blocks, strict=True):
        torch.testing.assert_close(b_fix.attn.qkv.weight, b_plain.attn.qkv.weight * scale)
        torch.testing.assert_close(b_fix.mlp.fc1.weight, b_plain.mlp.fc1.weight * scale)


def test_fixup_bias_adds_a_scalar():
    norm = get_layer("fixup_bias")(32)
    assert norm.bias.shape == (1,)
    with torch.no_grad():
        norm.bias.fill_(0.5)
    x = torch.randn(2, 5, 32)
    torch.testing.assert_close(norm(x), x + 0.5)


def test_fixup_gate_is_scale_then_bias():
    gate = FixupGate(32, depth=12)
    with torch.no_grad():
        gate.scale.fill_(2.0)
        gate.bias.fill_(-1.0)
    x = torch.randn(2, 5, 32)
    torch.testing.assert_close(gate(x), 2.0 * x - 1.0)


# --- LayerScale -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("depth", "eps"), [(1, 0.1), (12, 0.1), (18, 0.1), (24, 1e-5), (36, 1e-6), (48, 1e-6)])
def test_layerscale_eps_follows_cait_by_depth(depth, eps):
    assert cait_init_values(depth) == eps
    gate = LayerScale(16, depth=depth)
    assert gate.init_values == eps
    assert torch.equal(gate.gamma, torch.full((16,), eps))


def test_layerscale_model_uses_the_depth_rule():
    model = tiny_vit("layerscale", depth=24)
    for block in model.blocks:
        assert torch.equal(block.ls1.gamma, torch.full((32,), 1e-5))
        assert torch.equal(block.ls2.gamma, torch.full((32,), 1e-5))


def test_layerscale_init_values_override():
    assert torch.equal(LayerScale(8, depth=36, init_values=1e-4).gamma, torch.full((8,), 1e-4))
    assert torch.equal(LayerScale(8, depth=36, init_values=0.0).gamma, torch.zeros(8))
    model = tiny_vit("layerscale", depth=36, init_values=1e-2)
    assert all(torch.equal(b.ls1.gamma, torch.full((32,), 1e-2)) for b in model.blocks)


def test_layerscale_gamma_is_excluded_from_weight_decay():
    gate = LayerScale(8, depth=12)
    assert [n for n, _ in gate.named_parameters()] == ["gamma"]
    assert gate.gamma._no_weight_decay is True


@pytest.mark.parametrize("num_tokens", [1, 197])
def test_layerscale_flop_count(num_tokens):
    assert LayerScale(192, depth=12).flop_count(num_tokens) == num_tokens * 192


@pytest.mark.parametrize("shape", [(2, 7, 16), (2, 3, 4, 16), (2, 5, 3, 4, 16)])
def test_layerscale_scales_each_channel_of_any_channels_last_layout(shape):
    gate = LayerScale(16, depth=12)
    with torch.no_grad():
        gate.gamma.copy_(torch.randn(16))
    x = torch.randn(shape)
    y = gate(x)
    assert y.shape == x.shape
    torch.testing.assert_close(y, x * gate.gamma.view(*([1] * (len(shape) - 1)), 16))
    torch.testing.assert_close(y[..., 3], x[..., 3] * gate.gamma[3])


# --- DyT ------------------------------------------------------------------------------------------------------------


def test_dyt_init_and_formula():
    dyt = DyT(32)
    assert dyt.alpha.shape == (1,) and dyt.alpha.item() == 0.5
    assert torch.equal(dyt.weight, torch.ones(32)) and torch.equal(dyt.bias, torch.zeros(32))
    with torch.no_grad():
        dyt.alpha.fill_(1.3)
        dyt.weight.copy_(torch.randn(32))
        dyt.bias.copy_(torch.randn(32))
    x = torch.randn(2, 7, 32)
    torch.testing.assert_close(dyt(x), dyt.weight * torch.tanh(dyt.alpha * x) + dyt.bias)
    assert DyT(8, alpha_init=1.0).alpha.item() == 1.0


def test_dyt_norm_kwargs_reach_every_slot():
    model = tiny_vit("dyt", norm_kwargs={"alpha_init": 2.0})
    dyts = [m for m in model.modules() if isinstance(m, DyT)]
    assert len(dyts) == 2 * 3 + 1
    assert all(m.alpha.item() == 2.0 for m in dyts)


# --- LearnableScaler (seed 004) -------------------------------------------------------------------------------------


def test_learnable_scaler_formula():
    scaler = LearnableScaler(32)
    with torch.no_grad():
        scaler.b.copy_(torch.randn(32))
    x = torch.randn(2, 7, 32)
    torch.testing.assert_close(scaler(x), scaler.a * x + scaler.b)
    torch.testing.assert_close(scaler(x), scaler.a[None, None, :] * x + scaler.b[None, None, :])


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_learnable_scaler_gradients_match_the_formula(layout):
    # the op runs through batch_norm's inference kernel; its dx, da and db must be those of a ⊙ x + b
    scaler = LearnableScaler(16)
    with torch.no_grad():
        scaler.b.copy_(torch.randn(16))
    x = torch.randn(3, 16, 5).transpose(1, 2) if layout == "transposed" else torch.randn(3, 5, 16)
    x.requires_grad_(True)
    g = torch.randn(3, 5, 16)
    got = torch.autograd.grad(scaler(x), [x, scaler.a, scaler.b], g)
    want = torch.autograd.grad(scaler.a * x + scaler.b, [x, scaler.a, scaler.b], g)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)


def test_learnable_scaler_checkpoint_holds_only_a_and_b():
    scaler = LearnableScaler(8).to(torch.float64)
    assert set(scaler.state_dict()) == {"a", "b"}
    x = torch.randn(2, 8, dtype=torch.float64)
    torch.testing.assert_close(scaler(x), scaler.a * x + scaler.b)


def test_learnable_scaler_default_a_is_drawn_from_a_standard_normal():
    # the source writes `nn.init.normal_(torch.ones(C))`, which overwrites the ones with N(0, 1) draws
    torch.manual_seed(0)
    scaler = LearnableScaler(4096)
    assert abs(scaler.a.mean().item()) < 0.1
    assert 0.9 < scaler.a.std().item() < 1.1
    assert not torch.equal(scaler.a, torch.ones(4096))
    assert (scaler.a < 0).any(), "N(0, 1) draws include negative scales"
    assert torch.equal(scaler.b, torch.zeros(4096))


def test_learnable_scaler_ones_variant():
    scaler = get_layer("learnable_scaler_ones")(64)
    assert torch.equal(scaler.a, torch.ones(64)) and torch.equal(scaler.b, torch.zeros(64))
    x = torch.randn(2, 7, 64)
    assert torch.equal(scaler(x), x)


def test_learnable_scaler_rejects_an_unknown_init():
    with pytest.raises(ValueError, match="init"):
        LearnableScaler(8, init="zeros")


def test_learnable_scaler_2d_is_channels_first():
    scaler = LearnableScaler2d(6)
    with torch.no_grad():
        scaler.b.copy_(torch.randn(6))
    x = torch.randn(2, 6, 5, 4)
    y = scaler(x)
    assert y.shape == x.shape
    torch.testing.assert_close(y, scaler.a[None, :, None, None] * x + scaler.b[None, :, None, None])


def test_learnable_scaler_model_draws_a_per_slot():
    model = tiny_vit("learnable_scaler")
    a1, a2 = model.blocks[0].norm1.a, model.blocks[0].norm2.a
    assert not torch.equal(a1, torch.ones(32)) and not torch.equal(a1, a2)


# --- DeepNorm and post-LN -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [4, 12])
def test_deepnorm_alpha_and_beta(depth):
    model = tiny_vit("deepnorm", depth=depth, embed_dim=64)
    alpha, beta = (2 * depth) ** 0.25, (8 * depth) ** -0.25
    for block in model.blocks:
        assert isinstance(block, DeepNormBlock)
        assert block.alpha == pytest.approx(alpha)
    # Xavier-normal with gain β for v, out proj and the MLP; gain 1 for q and k (std within 10%)
    weights = [(w, 1.0) for b in model.blocks for w in b.attn.qkv.weight.chunk(3)[:2]]
    weights += [(b.attn.qkv.weight.chunk(3)[2], beta) for b in model.blocks]
    weights += [(lin.weight, beta) for b in model.blocks for lin in (b.attn.proj, b.mlp.fc1, b.mlp.fc2)]
    for w, gain in weights:
        assert _close(w.std().item(), gain * _xavier_std(w)), (w.shape, gain)


@torch.no_grad()
def test_deepnorm_block_formula():
    block = tiny_vit("deepnorm", depth=6).blocks[0].eval()
    x = torch.randn(2, 17, 32)
    h = block.norm1(block.alpha * x + block.attn(x))
    torch.testing.assert_close(block(x), block.norm2(block.alpha * h + block.mlp(h)))


@torch.no_grad()
def test_post_ln_block_formula():
    block = tiny_vit("post_ln").blocks[0].eval()
    assert isinstance(block, PostNormBlock) and isinstance(block.norm1, LayerNorm)
    x = torch.randn(2, 17, 32)
    h = block.norm1(x + block.attn(x))
    torch.testing.assert_close(block(x), block.norm2(h + block.mlp(h)))


@pytest.mark.parametrize("layer", ["post_ln", "deepnorm", "post_ln+layerscale"])
@torch.no_grad()
def test_post_norm_blocks_output_normalized_tokens(layer):
    model = tiny_vit(layer).eval()
    x = 3.0 * torch.randn(2, 17, 32) + 1.0
    for block in model.blocks:
        y = block(x)
        torch.testing.assert_close(y.mean(-1), torch.zeros(2, 17), atol=1e-5, rtol=0)
        torch.testing.assert_close(y.std(-1, unbiased=False), torch.ones(2, 17), atol=1e-3, rtol=0)


@pytest.mark.parametrize(("layer", "final_norm"), [("post_ln", False), ("deepnorm", False), ("layernorm", True),
                                                   ("post_ln+layerscale", False), ("layerscale", True)])
def test_only_pre_norm_models_add_a_final_norm(layer, final_norm):
    # a post-norm stack already ends in its last block's norm (BERT, DeepNet): a second one would be redundant
    model = tiny_vit(layer)
    assert isinstance(model.norm, LayerNorm) == final_norm
    assert model.blocks[-1].output_is_normalized != final_norm


@torch.no_grad()
def test_pre_norm_blocks_do_not_normalize_the_stream():
    block = tiny_vit("layernorm").blocks[0].eval()
    x = torch.randn(2, 17, 32)
    h = x + block.attn(block.norm1(x))
    torch.testing.assert_close(block(x), h + block.mlp(block.norm2(h)))


# --- T-Fixup --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [4, 9])
def test_tfixup_scales_output_and_mlp_and_keeps_query_and_key(depth):
    model = tiny_vit("tfixup", depth=depth, embed_dim=64)
    scale = 0.67 * depth ** -0.25
    for block in model.blocks:
        q, k, _ = block.attn.qkv.weight.chunk(3)
        # q and k keep Xavier, as the official code sets them (fairseq: gain 1/√2 per (C, C) = fused (3C, C) Xavier)
        assert _close(q.std().item(), _xavier_std(q) / math.sqrt(2))
        assert _close(k.std().item(), _xavier_std(k) / math.sqrt(2))
        for linear in (block.attn.proj, block.mlp.fc1, block.mlp.fc2):
            assert _close(linear.weight.std().item(), scale * _xavier_std(linear))
    assert not any(isinstance(m, (nn.LayerNorm, nn.RMSNorm)) for m in model.modules()), "T-Fixup has no norm"
    embed = model.patch_embed.proj.weight
    assert _close(embed.std().item(), 64 ** -0.5)


@pytest.mark.parametrize("depth", [4, 9])
def test_tfixup_scales_value_from_its_own_xavier(depth):
    model = tiny_vit("tfixup", depth=depth, embed_dim=64)
    scale = 0.67 * depth ** -0.25
    for block in model.blocks:
        v = block.attn.qkv.weight.chunk(3)[2]
        assert _close(v.std().item(), scale * _xavier_std(v))
