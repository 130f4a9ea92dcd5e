"""Gated attention (Qiu et al. 2025, G1 elementwise): proj(SDPA ⊙ σ(x W_θ + b)), the gate from the attention's own
input; half the attention output when the gate's logits are 0; a modifier that reaches every block's attention."""

from __future__ import annotations

import pytest
import torch
from timm.models.vision_transformer import Attention
from torch import nn

from normbench.layers import LayerError, get_spec, registry, resolve_layer
from normbench.layers.gated_attention import GatedAttention
from tests.layers._cases import tiny_vit
from tests.layers._reference import attention, layer_norm, mlp, randomize_


def test_a_block_with_gated_attention_matches_its_equation():
    model = randomize_(tiny_vit("gated_attn")).eval()
    block = model.blocks[2]
    x = torch.randn(2, 17, 32)
    normed = layer_norm(block.norm1, x)
    y = x + attention(block.attn, normed, gate=(block.attn.gate.weight, block.attn.gate.bias))
    y = y + mlp(block.mlp, layer_norm(block.norm2, y))
    torch.testing.assert_close(block(x), y, rtol=1e-5, atol=1e-5)


def test_with_zero_gate_logits_the_output_is_half_the_ungated_attentions():
    torch.manual_seed(0)
    gated, plain = GatedAttention(32, num_heads=2, qkv_bias=True), Attention(32, num_heads=2, qkv_bias=True)
    plain.load_state_dict(gated.state_dict(), strict=False)
    with torch.no_grad():
        gated.gate.weight.zero_()
        gated.gate.bias.zero_()
    x = torch.randn(2, 9, 32)
    bias = gated.proj.bias
    torch.testing.assert_close(gated(x) - bias, 0.5 * (plain(x) - bias), rtol=1e-5, atol=1e-6)


def test_the_gate_starts_as_the_query_rows_do_and_near_one_half():
    model = tiny_vit("gated_attn", embed_dim=64, num_heads=4)
    attn = model.blocks[0].attn
    assert attn.gate.weight.shape == (64, 64) and torch.equal(attn.gate.bias, torch.zeros(64))
    assert attn.gate.weight.std().item() == pytest.approx(attn.qkv.weight[:64].std().item(), rel=0.1)  # both 0.02
    gates = torch.sigmoid(attn.gate(torch.randn(8, 17, 64)))  # logits ~ N(0, 0.02² · 64): σ within a few % of 1/2
    assert (gates - 0.5).abs().mean() < 0.05


@pytest.mark.parametrize("layer", ["gated_attn", "layerscale+gated_attn", "hc+gated_attn", "hybridnorm+gated_attn",
                                   "value_residual+gated_attn", "rmsnorm+gated_attn"])
def test_every_block_of_every_combination_gets_the_gate(layer):
    model = tiny_vit(layer)
    assert all(block.attn.gate is not None for block in model.blocks)
    assert tiny_vit(layer.replace("+gated_attn", "").replace("gated_attn", "layernorm")).blocks[0].attn.gate is None


def test_alone_it_brings_layernorm():
    plan = resolve_layer("gated_attn")
    assert plan.norm.name == "layernorm" and plan.attn_kwargs == {"gated": True}
    assert get_spec("gated_attn").kind == "modifier"


def test_two_entries_that_set_the_attention_differently_are_refused(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    registry.register_layer("toy_ungated", kind="modifier", attn_kwargs={"gated": False}, formula="f",
                            source="s")(nn.Identity)
    with pytest.raises(LayerError, match="set the attention's `gated` differently") as excinfo:
        resolve_layer("layernorm+gated_attn+toy_ungated")
    assert "\n" not in str(excinfo.value)
