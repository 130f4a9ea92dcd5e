"""Derf: γ·erf(αx + s) + β with the source's init (zlab-princeton/Derf ViT/dynamic_erf.py)."""

from __future__ import annotations

import pytest
import torch

from normbench.layers import Derf
from tests.layers._cases import tiny_vit


def test_derf_starts_at_alpha_half_and_shift_zero_with_gamma_1_and_beta_0():
    derf = Derf(32)
    assert derf.alpha.shape == (1,) and derf.alpha.item() == 0.5
    assert derf.shift.shape == (1,) and derf.shift.item() == 0.0
    assert torch.equal(derf.weight, torch.ones(32)) and torch.equal(derf.bias, torch.zeros(32))
    assert all(p.requires_grad for p in (derf.alpha, derf.shift, derf.weight, derf.bias)), "all four are learned"


def test_derf_formula_and_gradients_reach_alpha_and_shift():
    derf = Derf(8)
    with torch.no_grad():
        derf.alpha.fill_(0.7)
        derf.shift.fill_(-0.2)
        derf.weight.copy_(torch.linspace(-1, 2, 8))
        derf.bias.copy_(torch.linspace(0, 1, 8))
    x = torch.randn(3, 5, 8)
    out = derf(x)
    torch.testing.assert_close(out, derf.weight * torch.erf(0.7 * x - 0.2) + derf.bias)
    out.sum().backward()
    assert derf.alpha.grad.abs() > 0 and derf.shift.grad.abs() > 0


def test_derf_fills_every_norm_slot_and_takes_norm_kwargs():
    model = tiny_vit("derf", norm_kwargs={"alpha_init": 0.75})
    norms = [m for m in model.modules() if isinstance(m, Derf)]
    assert len(norms) == 2 * 3 + 1  # two per block and the final norm
    assert all(n.alpha.item() == 0.75 and n.shift.item() == 0.0 for n in norms)


def test_derf_alpha03_is_derf_with_alpha_0_3_in_every_norm_slot_and_nothing_else():
    torch.manual_seed(0)
    model = tiny_vit("derf_alpha03")
    torch.manual_seed(0)
    plain = tiny_vit("derf")
    norms = [m for m in model.modules() if isinstance(m, Derf)]
    assert len(norms) == 2 * 3 + 1
    assert all(n.alpha.item() == pytest.approx(0.3) and n.shift.item() == 0.0 for n in norms)
    theirs = dict(plain.named_parameters())
    for name, p in model.named_parameters():
        if not name.endswith(".alpha"):
            assert torch.equal(p, theirs[name]), name
