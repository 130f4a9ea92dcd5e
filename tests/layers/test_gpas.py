"""GPAS (Chen et al. 2025): x - SiLU(g)·sg(x) after each residual sum, one g per block shared by both sublayers,
g = 0 at init; forward scaled, gradient preserved; the pre-norm model at init, forward and backward."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from normbench.layers.gpas import GPASScale
from tests.layers._cases import NUM_CLASSES, images, tiny_vit
from tests.layers._reference import attention, layer_norm, mlp, randomize_


def test_a_gpas_block_matches_its_equation():
    model = randomize_(tiny_vit("gpas")).eval()
    block = model.blocks[1]
    with torch.no_grad():
        block.gpas.gate.fill_(0.7)
    x = torch.randn(2, 17, 32)
    shrink = 1 - F.silu(torch.tensor(0.7))
    y = (x + attention(block.attn, layer_norm(block.norm1, x))) * shrink
    y = (y + mlp(block.mlp, layer_norm(block.norm2, y))) * shrink
    torch.testing.assert_close(block(x), y, rtol=1e-5, atol=1e-6)


def test_the_scale_shrinks_the_forward_and_passes_the_gradient_unscaled():
    scale = GPASScale()
    with torch.no_grad():
        scale.gate.fill_(1.5)
    x = torch.randn(3, 8, requires_grad=True)
    w = torch.randn(3, 8)
    y = scale(x)
    torch.testing.assert_close(y, x * (1 - F.silu(torch.tensor(1.5))))
    (y * w).sum().backward()
    torch.testing.assert_close(x.grad, w)  # sg(x): the identity backward


def test_one_gate_per_block_at_zero_shared_by_both_sublayers():
    model = tiny_vit("gpas")
    extra = {n for n, _ in model.named_parameters()} - {n for n, _ in tiny_vit("layernorm").named_parameters()}
    assert extra == {f"blocks.{i}.gpas.gate" for i in range(3)}
    assert all(block.gpas.gate.shape == () and block.gpas.gate.item() == 0.0 for block in model.blocks)


def test_at_init_it_is_the_pre_norm_model_forward_and_backward():
    gpas, layernorm = tiny_vit("gpas"), tiny_vit("layernorm")
    gpas.load_state_dict(layernorm.state_dict(), strict=False)  # the same weights; g = 0
    x, y = images(batch=4), torch.arange(4) % NUM_CLASSES
    torch.testing.assert_close(gpas(x), layernorm(x), rtol=0, atol=0)
    F.cross_entropy(gpas(x), y).backward()
    F.cross_entropy(layernorm(x), y).backward()
    grads = dict(gpas.named_parameters())
    for name, p in layernorm.named_parameters():
        torch.testing.assert_close(grads[name].grad, p.grad, rtol=1e-6, atol=1e-7)
    assert all(block.gpas.gate.grad.abs() > 0 for block in gpas.blocks), "SiLU'(0) = 1/2: g leaves 0"
