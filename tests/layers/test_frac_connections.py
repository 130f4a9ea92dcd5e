"""Frac-connections (Zhu et al. 2025), dynamic with m = 4 fractions: a block against its hand-written width and
depth connections, the pre-norm model at init, and the fraction rate's checks."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from normbench.layers import LayerError, resolve_layer
from tests.layers._cases import images, tiny_vit
from tests.layers._reference import attention, layer_norm, mlp, randomize_

M = 4


def frac_connection(conn, x, sublayer):
    """Token by token: fractions F (m rows of c), α and β with their dynamic terms, [F_in; F'] = αᵀF; the sublayer
    on cat(F_in) (all tokens at once: attention mixes them); then F' + β_i · fraction i of its output."""
    B, N, C = x.shape
    c = C // M
    branch_in, residual, betas = torch.empty_like(x), torch.empty(B, N, M, c), torch.empty(B, N, M)
    for b in range(B):
        for n in range(N):
            mixed = conn_alpha(conn, x[b, n]).T @ x[b, n].view(M, c)  # (2m, c)
            branch_in[b, n], residual[b, n] = mixed[:M].reshape(C), mixed[M:]
            betas[b, n] = conn_beta(conn, x[b, n])
    y = sublayer(branch_in)
    return (residual + betas[..., None] * y.view(B, N, M, c)).view(B, N, C)


def _normed(conn, token):
    c = token.shape[-1] // M
    return F.layer_norm(token.view(M, c), (c,), conn.layer_norm.weight, conn.layer_norm.bias, eps=1e-6)


def conn_alpha(conn, token):
    return conn.dynamic_alpha_scale * torch.tanh(_normed(conn, token) @ conn.dynamic_alpha_fn) + conn.static_alpha


def conn_beta(conn, token):
    return conn.dynamic_beta_scale * torch.tanh(_normed(conn, token) @ conn.dynamic_beta_fn) + conn.static_beta


def test_a_block_matches_its_width_and_depth_connections():
    model = randomize_(tiny_vit("frac_connections"), scale=0.3).eval()
    block = model.blocks[1]
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        y = frac_connection(block.frac1, x, lambda t: attention(block.attn, layer_norm(block.norm1, t)))
        y = frac_connection(block.frac2, y, lambda t: mlp(block.mlp, layer_norm(block.norm2, t)))
        torch.testing.assert_close(block(x), y, rtol=1e-5, atol=1e-5)


def test_the_init_is_the_papers_hc_init_over_fractions():
    conn = tiny_vit("frac_connections").blocks[0].frac1
    assert conn.frac_rate == M and conn.frac_dim == 8
    assert torch.equal(conn.static_alpha, torch.cat([torch.eye(M), torch.eye(M)], dim=1))  # A_m = A_r = I
    assert torch.equal(conn.static_beta, torch.ones(M))
    assert torch.equal(conn.dynamic_alpha_fn, torch.zeros(8, 2 * M))
    assert torch.equal(conn.dynamic_beta_fn, torch.zeros(8))
    assert conn.dynamic_alpha_scale.item() == conn.dynamic_beta_scale.item() == pytest.approx(0.01)


def test_at_init_it_is_the_pre_norm_model():
    frac, layernorm = tiny_vit("frac_connections"), tiny_vit("layernorm")
    missing = frac.load_state_dict(layernorm.state_dict(), strict=False).missing_keys
    assert all(".frac1." in k or ".frac2." in k for k in missing)
    torch.testing.assert_close(frac(images()), layernorm(images()), rtol=1e-5, atol=1e-6)


def test_another_fraction_rate_builds_and_a_bad_one_is_refused_in_one_line():
    model = tiny_vit("frac_connections", block_kwargs={"frac_rate": 2})
    assert model.blocks[0].frac1.static_alpha.shape == (2, 4)
    for rate, says in [(0, "not a number of fractions"), (2.5, "not a number of fractions"),
                       (3, "does not divide the width 32")]:
        with pytest.raises(LayerError, match=says) as excinfo:
            tiny_vit("frac_connections", block_kwargs={"frac_rate": rate})
        assert "\n" not in str(excinfo.value)
    with pytest.raises(LayerError, match="`expansion_rate` is not a frac-connection argument"):
        resolve_layer("frac_connections").check_block_kwargs({"expansion_rate": 2})
