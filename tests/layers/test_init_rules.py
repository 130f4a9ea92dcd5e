"""Each method's formula and init rule, checked against its source (the seeds and the papers they cite)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from normbench.layers import (
    DeepNormBlock,
    DyT,
    FixupBias,
    FixupGate,
    LayerNorm,
    LayerScale,
    LearnableScaler,
    LearnableScaler2d,
    PostNormBlock,
    ReZero,
    ReZeroShared,
    SkipInit,
    cait_init_values,
    get_layer,
)
from normbench.layers.fixup import fixup_scalars, fixup_scales
from tests.layers._cases import images, tiny_vit


def _xavier_std(linear_or_weight) -> float:
    w = getattr(linear_or_weight, "weight", linear_or_weight)
    fan_out, fan_in = w.shape
    return math.sqrt(2.0 / (fan_in + fan_out))


def _close(a: float, b: float, rel: float = 0.1) -> bool:
    return abs(a - b) <= rel * abs(b)


# --- ReZero, SkipInit, Fixup: every block is the identity at init ---------------------------------------------------


@pytest.mark.parametrize("layer", ["rezero", "rezero_per_branch", "skipinit", "fixup", "fixup_official",
                                   "dyt+rezero", "learnable_scaler+skipinit"])
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
    for layer in ("rezero", "rezero_per_branch", "skipinit"):
        model = tiny_vit(layer)
        assert not any(isinstance(m, (nn.LayerNorm, nn.RMSNorm)) for m in model.modules())


def test_rezero_shares_one_alpha_per_block_as_rztx_does():
    # majumderb/rezero rztx.py: `self.resweight` (one per layer) multiplies both the attention and the FFN output
    model = tiny_vit("rezero", depth=3)
    alphas = [n for n, _ in model.named_parameters() if n.endswith("alpha")]
    assert alphas == [f"blocks.{i}.ls1.alpha" for i in range(3)], "one α per block"
    for block in model.blocks:
        assert isinstance(block.ls1, ReZeroShared) and block.ls2.alpha is block.ls1.alpha
        with torch.no_grad():
            block.ls1.alpha.fill_(0.25)
        x = torch.randn(2, 17, 32)
        with torch.no_grad():
            h = x + 0.25 * block.attn(block.norm1(x))
            torch.testing.assert_close(block(x), h + 0.25 * block.mlp(block.norm2(h)))
    # the shared α's gradient is that of the formula with one α in both branches
    x = torch.randn(2, 17, 32)
    block = model.blocks[0]
    block(x).square().sum().backward()
    alpha = torch.tensor(0.25, requires_grad=True)
    h = x + alpha * block.attn(block.norm1(x))
    (grad,) = torch.autograd.grad((h + alpha * block.mlp(block.norm2(h))).square().sum(), alpha)
    torch.testing.assert_close(block.ls1.alpha.grad[0], grad)


def test_rezero_per_branch_has_two_alphas_per_block():
    model = tiny_vit("rezero_per_branch", depth=2)
    alphas = sorted(n for n, _ in model.named_parameters() if n.endswith("alpha"))
    assert alphas == ["blocks.0.ls1.alpha", "blocks.0.ls2.alpha", "blocks.1.ls1.alpha", "blocks.1.ls2.alpha"]
    assert model.blocks[0].ls1.alpha is not model.blocks[0].ls2.alpha


def _official_fixup_std(fan_in: int, fan_out: int, num_blocks: int, power: float) -> tuple[float, float]:
    """(std, bound) of the official rule: `nn.init.xavier_uniform_` then `*= num_blocks ** power`, with
    `num_blocks = encoder_layers * 2 + decoder_layers * 3` (hongyi-zhang/Fixup fairseq, no decoder here)."""
    bound = math.sqrt(6.0 / (fan_in + fan_out)) * num_blocks ** power  # U(-a, a) has std a / √3
    return bound / math.sqrt(3.0), bound


@pytest.mark.parametrize(("depth", "dim"), [(3, 32), (12, 64)])
def test_fixup_in_projection_and_fc1_follow_the_official_rule(depth, dim):
    model = tiny_vit("fixup", seed=7, depth=depth, embed_dim=dim)
    num_blocks = depth * 2 + 0 * 3
    qkv_std, qkv_bound = _official_fixup_std(dim, 3 * dim, num_blocks, -1.0 / 6.0)  # in_proj_weight (3C, C)
    fc1_std, fc1_bound = _official_fixup_std(dim, 4 * dim, num_blocks, -0.5)        # Linear(C, ffn), scale 1/√L
    for block in model.blocks:
        for w, std, bound in ((block.attn.qkv.weight, qkv_std, qkv_bound), (block.mlp.fc1.weight, fc1_std, fc1_bound)):
            # sampling error of a uniform's std over n draws is ~√(0.8 / 4n): under 1% here; allow 5%
            assert _close(w.std().item(), std, rel=0.05), (w.std().item(), std)
            # uniform, not normal: every entry within the bound, and the extremes reach it
            assert w.abs().max().item() <= bound * (1 + 1e-6) and w.abs().max().item() > 0.97 * bound


def test_fixup_qkv_std_at_the_issue_configuration():
    # C = 192, depth 36: the official std is sqrt(6 / 768) / √3 × 72^(-1/6) = 0.0250, 10.6x the old rule's
    # 0.02 × 72^(-1/2) = 0.00236
    std, _ = _official_fixup_std(192, 576, 72, -1.0 / 6.0)
    assert std == pytest.approx(0.02502, abs=1e-4)
    assert std / (0.02 * 72 ** -0.5) == pytest.approx(10.6, abs=0.05)
    assert fixup_scales(36) == pytest.approx((72 ** (-1 / 6), 72 ** -0.5))


@pytest.mark.parametrize("layer", ["fixup", "fixup_official"])
def test_fixup_zeroes_the_out_projection_fc2_and_head_exactly(layer):
    model = tiny_vit(layer)
    assert torch.equal(model(images()), torch.zeros(2, 5))
    assert not model.head.weight.any() and not model.head.bias.any()
    for block in model.blocks:
        assert not block.attn.proj.weight.any() and not block.mlp.fc2.weight.any()
        for linear in (block.attn.qkv, block.attn.proj, block.mlp.fc1, block.mlp.fc2):
            assert not linear.bias.any()
        for gate in (block.ls1, block.ls2):
            assert isinstance(gate, FixupGate)
            assert [n for n, _ in gate.named_parameters()] == ["scale"] and gate.scale.item() == 1.0
        for shift in (block.norm1, block.norm2, block.mlp.norm):  # shift0/shift1 and shift3 of the official layer
            assert isinstance(shift, FixupBias) and shift.bias.shape == (1,) and shift.bias.item() == 0.0


def test_fixup_bias_subtracts_a_scalar():
    # the official LayerShift: `return x - self.bias`
    norm = get_layer("fixup_bias")(32)
    assert norm.bias.shape == (1,)
    with torch.no_grad():
        norm.bias.fill_(0.5)
    x = torch.randn(2, 5, 32)
    torch.testing.assert_close(norm(x), x - 0.5)


def test_fixup_gate_is_a_scalar_multiplier():
    # the official LayerScale: `return x * self.weight`, weight = ones(1)
    gate = FixupGate(32, depth=12)
    with torch.no_grad():
        gate.scale.fill_(2.0)
    x = torch.randn(2, 5, 32)
    torch.testing.assert_close(gate(x), 2.0 * x)


def test_fixup_official_tags_the_scalars_and_decays_everything():
    plain, official = tiny_vit("fixup", seed=3), tiny_vit("fixup_official", seed=3)
    for a, b in zip(plain.parameters(), official.parameters(), strict=True):
        assert torch.equal(a, b), "the same init; only the optimizer recipe differs"
    scalars = {id(p) for p in fixup_scalars(official)}
    assert len(scalars) == 3 * 5 + 1  # per block: 3 shifts, 2 multipliers; plus the final shift
    for p in official.parameters():
        assert p._force_weight_decay
        assert getattr(p, "_lr_scale", 1.0) == (0.1 if id(p) in scalars else 1.0)
    assert not any(hasattr(p, "_lr_scale") or hasattr(p, "_force_weight_decay") for p in plain.parameters())


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


# --- LearnableScaler ------------------------------------------------------------------------------------------------


def test_learnable_scaler_formula():
    scaler = LearnableScaler(32)
    with torch.no_grad():
        scaler.b.copy_(torch.randn(32))
    x = torch.randn(2, 7, 32)
    torch.testing.assert_close(scaler(x), scaler.a * x + scaler.b)
    torch.testing.assert_close(scaler(x), scaler.a[None, None, :] * x + scaler.b[None, None, :])


def test_learnable_scaler_runs_where_batch_norm_refuses_eps_zero(monkeypatch):
    # torch before 2.14 (the H200 image's 2.11) raises "batch_norm eps must be positive" for eps 0 in every mode
    real = F.batch_norm

    def strict(*args, **kwargs):
        if kwargs["eps"] <= 0:
            raise ValueError(f"batch_norm eps must be positive, but got {kwargs['eps']}")
        return real(*args, **kwargs)

    monkeypatch.setattr(F, "batch_norm", strict)
    scaler = LearnableScaler(8)
    x = torch.randn(4, 8)
    assert torch.equal(scaler(x), torch.addcmul(scaler.b, scaler.a, x))  # the eps changes no bit


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
    embed = model.patch_embed.proj
    fan_in = 3 * 4 * 4
    assert _close(embed.weight.std().item(), (9 * depth) ** -0.25 / math.sqrt(fan_in))
    assert not embed.bias.any()


@pytest.mark.parametrize("depth", [4, 9])
def test_tfixup_scales_value_from_its_own_xavier(depth):
    model = tiny_vit("tfixup", depth=depth, embed_dim=64)
    scale = 0.67 * depth ** -0.25
    for block in model.blocks:
        v = block.attn.qkv.weight.chunk(3)[2]
        assert _close(v.std().item(), scale * _xavier_std(v))


# T-Fixup's embedding: entries of std (9N)^(-1/4), measured on real inputs --------------------------------------------


def _digits_batch() -> torch.Tensor:
    from normbench.data.digits import DIGITS_MEAN, DIGITS_STD, load_digits_splits

    x = load_digits_splits().train_x[:512]
    return (x - DIGITS_MEAN[0]) / DIGITS_STD[0]  # normalized as the data pipeline feeds the model


@pytest.mark.parametrize(("name", "in_chans", "img_size", "patch_size", "dim"),
                         [("digits", 1, 8, 2, 64), ("cifar-shaped", 3, 32, 4, 192)])
@pytest.mark.parametrize("depth", [6, 36])
@torch.no_grad()
def test_tfixup_embedding_entries_have_the_official_std(name, in_chans, img_size, patch_size, dim, depth):
    # layer6ai-labs/T-Fixup TransformerEncoder.__init__: embedding table (std d^-1/2) × (9N)^(-1/4), looked up ×
    # sqrt(d): entry std (9N)^(-1/4); 0.236 at N = 36
    want = (9 * depth) ** -0.25
    x = _digits_batch() if name == "digits" else torch.randn(256, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    stds = []
    for seed in range(3):
        model = tiny_vit("tfixup", seed=seed, depth=depth, embed_dim=dim, num_heads=2, patch_size=patch_size,
                         img_size=img_size, in_chans=in_chans)
        stds.append(model.patch_embed(x).std().item())
    assert _close(sum(stds) / len(stds), want, rel=0.1), (stds, want)
