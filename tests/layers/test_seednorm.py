"""SeeDNorm (Cai et al. 2025): its equation against a hand-written reference, its init (γ = 1, β = 0, α = 1, 16 heads),
RMSNorm at init, and weight decay on α and β."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from normbench.layers.seednorm import SeeDNorm
from normbench.train.optim_groups import param_groups
from tests.layers._cases import images, tiny_vit

D = 64


def seednorm_reference(x: torch.Tensor, gamma, alpha, beta, heads: int = 16, eps: float = 1e-6) -> torch.Tensor:
    """[tanh(x_h·β_hᵀ / D) α + γ] ⊙ x / RMS(x), token by token, head by head."""
    dim = x.shape[-1]
    d = dim // heads
    out = torch.empty_like(x)
    for index in torch.cartesian_prod(*[torch.arange(s) for s in x.shape[:-1]]):
        token = x[tuple(index.tolist())]
        rms = math.sqrt(float((token ** 2).mean()) + eps)
        scale = torch.empty(dim)
        for h in range(heads):
            s = math.tanh(float((token[h * d:(h + 1) * d] * beta[h * d:(h + 1) * d]).sum()) / dim)
            scale[h * d:(h + 1) * d] = s
        out[tuple(index.tolist())] = (scale * alpha + gamma) * token / rms
    return out


def test_seednorm_matches_its_equation_with_trained_looking_parameters():
    torch.manual_seed(0)
    norm = SeeDNorm(D)
    with torch.no_grad():
        norm.gamma.copy_(1 + 0.3 * torch.randn(D))
        norm.alpha.copy_(torch.randn(D))
        norm.beta.copy_(3 * torch.randn(D))  # large enough that tanh bends: the / D and the heads both show
    x = 2 * torch.randn(2, 3, D)
    with torch.no_grad():
        torch.testing.assert_close(norm(x), seednorm_reference(x, norm.gamma, norm.alpha, norm.beta), rtol=1e-5,
                                   atol=1e-5)


def test_seednorm_starts_with_the_papers_values_and_16_heads():
    norm = SeeDNorm(D)
    assert norm.num_heads == 16 and norm.head_dim == 4 and norm.eps == 1e-6
    assert torch.equal(norm.gamma, torch.ones(D))
    assert torch.equal(norm.alpha, torch.ones(D))
    assert torch.equal(norm.beta, torch.zeros(D))


def test_seednorm_at_init_is_rmsnorm_and_beta_still_gets_a_gradient():
    norm = SeeDNorm(D)
    x = torch.randn(4, 7, D)
    torch.testing.assert_close(norm(x), F.rms_norm(x, (D,), eps=1e-6), rtol=0, atol=1e-6)
    norm(x).pow(2).sum().backward()
    assert norm.beta.grad.abs().sum() > 0, "β = 0 but α = 1: the self-rescaling term must open up"


def test_seednorm_alpha_and_beta_get_weight_decay_and_gamma_does_not():
    model = tiny_vit("seednorm")  # width 32: 16 heads of 2 channels
    decayed = {id(p) for g in param_groups(model, 1e-3, 0.05) if g["weight_decay"] > 0 for p in g["params"]}
    norm = model.blocks[0].norm1
    assert id(norm.alpha) in decayed and id(norm.beta) in decayed
    assert id(norm.gamma) not in decayed


def test_seednorm_trains_in_the_model_and_its_output_depends_on_the_input_scale():
    model = tiny_vit("seednorm")
    norm = model.blocks[1].norm2
    with torch.no_grad():
        norm.beta.normal_(0, 5.0)
    x = torch.randn(2, 5, 32)
    # RMSNorm forgets the scale of x; SeeDNorm's gain remembers it once β ≠ 0
    assert not torch.allclose(norm(x), norm(3 * x))
    assert torch.isfinite(model(images())).all()


def test_a_width_the_heads_do_not_divide_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="do not split into 16 heads"):
        SeeDNorm(40)
    assert SeeDNorm(40, num_heads=8).head_dim == 5
