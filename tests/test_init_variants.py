"""scripts/init_variants.py: the probe-only Peri-LN and NormFormer variants each change what they say and nothing else,
and the probe reads the mechanism docs/layers.md names from them (γ = 1 on the output norm, through the registry's
`peri_ln_out_gamma`; the baseline's init)."""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path

import pytest
import torch

from normbench.diagnostics.probe import grid, probe, summarize
from normbench.layers import registry
from normbench.layers.peri_ln import PeriLNBlock
from tests.layers._cases import images, tiny_vit

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@pytest.fixture(autouse=True)
def variants(monkeypatch):
    """Registered into a copy of the registry, so the every-layer tests never see them."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.syspath_prepend(str(SCRIPTS))
    monkeypatch.delitem(sys.modules, "init_variants", raising=False)
    return importlib.import_module("init_variants")


def test_embed_norm_normalises_what_block_0_receives_and_nothing_else():
    model = tiny_vit("peri_ln_embed_norm", depth=3)
    assert isinstance(model.blocks[0].embed_norm, torch.nn.LayerNorm)
    assert all(block.embed_norm is None for block in model.blocks[1:])
    x = images(batch=2)
    tokens = model._pos_embed(model.patch_embed(x))
    block = model.blocks[0].eval()
    with torch.no_grad():
        assert torch.allclose(block(tokens), PeriLNBlock.forward(block, block.embed_norm(tokens)))
        assert not torch.allclose(block(tokens), PeriLNBlock.forward(block, tokens))


def test_megatron_init_scales_the_output_projections():
    model = tiny_vit("peri_ln_megatron_init", depth=2, embed_dim=256, num_heads=4)
    block = model.blocks[1]
    assert block.attn.qkv.weight.std().item() == pytest.approx(0.02, rel=0.05)
    for linear in (block.attn.proj, block.mlp.fc2):
        assert linear.weight.std().item() == pytest.approx(0.02 / math.sqrt(4), rel=0.05)


def test_fairseq_init_has_xavier_attention_and_default_linear_mlp():
    dim = 64
    block = tiny_vit("normformer_fairseq_init", depth=1, embed_dim=dim, num_heads=4).blocks[0]
    qkv_bound = math.sqrt(6 / (2 * dim)) / math.sqrt(2)  # xavier_uniform, gain 1/√2, per C x C slice
    for i in range(3):
        w = block.attn.qkv.weight[i * dim:(i + 1) * dim].abs().max().item()
        assert 0.95 * qkv_bound < w <= qkv_bound
    assert 0.95 * math.sqrt(3 / dim) < block.attn.proj.weight.abs().max().item() <= math.sqrt(3 / dim)
    assert 0.95 / math.sqrt(dim) < block.mlp.fc1.weight.abs().max().item() <= 1 / math.sqrt(dim)
    assert block.mlp.fc2.weight.abs().max().item() <= 1 / math.sqrt(4 * dim)


def test_the_probe_reads_the_mechanism():
    """γ = 1/√(2·depth) on the output norm takes most of the stream growth away; fairseq's init makes pre-LN grow."""
    table = summarize(probe(grid(["layernorm", "layernorm_fairseq_init", "peri_ln", "peri_ln_out_gamma"], [8], [32]),
                            batch_size=8)).set_index("layer")
    growth = table["stream_growth"]
    assert growth["peri_ln_out_gamma"] < growth["peri_ln"] / 2
    assert growth["layernorm_fairseq_init"] > 2 * growth["layernorm"]
