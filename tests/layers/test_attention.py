"""SlotAttention (normbench/layers/attention.py) is timm's Attention when its slots are empty (both attention paths,
with and without the gate), and its value slot computes w·v_first + (1 - w)·v, its values those of the fused qkv."""

from __future__ import annotations

import pytest
import torch
from timm.models.vision_transformer import Attention

from normbench.layers.attention import SlotAttention
from tests.layers._reference import attention, qkv, randomize_


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("fused", [False, True])
def test_with_empty_slots_it_is_timms_attention(gated, fused):
    torch.manual_seed(0)
    timm_attn = randomize_(Attention(32, num_heads=2, qkv_bias=True, gated=gated))
    slot = SlotAttention(32, num_heads=2, qkv_bias=True, gated=gated)
    slot.load_state_dict(timm_attn.state_dict())
    timm_attn.fused_attn = slot.fused_attn = fused
    x = torch.randn(2, 9, 32)
    torch.testing.assert_close(slot(x), timm_attn(x), rtol=0, atol=0)
    gate = (timm_attn.gate.weight, timm_attn.gate.bias) if gated else None
    torch.testing.assert_close(slot(x), attention(timm_attn, x, gate=gate), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fused", [False, True])
def test_the_value_slot_mixes_the_given_values_in(fused):
    slot = randomize_(SlotAttention(32, num_heads=2, qkv_bias=True, gated=True))
    slot.fused_attn = fused
    slot.value_first_weight = 0.3
    x, v_first = torch.randn(2, 9, 32), torch.randn(2, 2, 9, 16)
    want = attention(slot, x, v_first=v_first, v_first_weight=0.3, gate=(slot.gate.weight, slot.gate.bias))
    torch.testing.assert_close(slot(x, v_first), want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(slot.values(x), qkv(slot, x)[2], rtol=1e-5, atol=1e-6)
