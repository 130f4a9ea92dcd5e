"""Hyper-connections (`hc`, `hc_dynamic`): at init the model is the pre-norm model it widens (same logits as
`layernorm` with the same attention and MLP weights), the width and depth connections are the reference package's
formulas, and an expansion rate below 1 is refused in one line."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from normbench.layers import LayerError
from normbench.layers.hyper_connections import hyper_connection
from normbench.model.vit import NormbenchViT
from tests.layers._cases import images

TINY = dict(depth=4, embed_dim=32, num_heads=2, patch_size=4, img_size=16, num_classes=5)


def _with_layernorm_weights(layer: str, block_kwargs: dict | None = None,
                            **kwargs) -> tuple[NormbenchViT, NormbenchViT]:
    torch.manual_seed(0)
    plain = NormbenchViT(layer="layernorm", **TINY, **kwargs)
    torch.manual_seed(1)  # another draw: every shared weight must come from the copy below
    family = NormbenchViT(layer=layer, **TINY, block_kwargs=block_kwargs, **kwargs)
    loaded = family.load_state_dict(plain.state_dict(), strict=False)
    assert loaded.unexpected_keys == []
    assert all(".hc1." in k or ".hc2." in k for k in loaded.missing_keys), loaded.missing_keys
    return plain, family


@pytest.mark.parametrize("rate", [1, 2, 4])
@pytest.mark.parametrize("layer", ["hc", "hc_dynamic"])
def test_at_init_hc_computes_the_layernorm_models_logits(layer, rate):
    # the streams stay n copies of the pre-norm residual; their sum n·x_L differs from x_L by a scale the final
    # LayerNorm removes, up to its ε: with ε out of the way (1e-30, float64) the logits agree to rounding
    plain, family = _with_layernorm_weights(layer, norm_kwargs={"eps": 1e-30}, block_kwargs={"expansion_rate": rate})
    plain, family = plain.double(), family.double()
    x = images(batch=3).double()
    torch.testing.assert_close(family(x), plain(x), rtol=1e-10, atol=1e-12)


def test_at_init_hc_with_the_default_eps_agrees_to_float_tolerance():
    plain, family = _with_layernorm_weights("hc")
    x = images(batch=3)
    logits = plain(x)
    # ε = 1e-6 against a stream variance of ~1e-3: the relative difference is about ε/σ² · (1 - 1/n²)
    torch.testing.assert_close(family(x), logits, rtol=0, atol=2e-3 * logits.abs().max().item())


@pytest.mark.parametrize("layer", ["hc", "hc_dynamic"])
def test_init_is_the_papers_eq_14(layer):
    model = NormbenchViT(layer=layer, **TINY, block_kwargs={"expansion_rate": 3})
    for b, block in enumerate(model.blocks):
        for k, hc in ((2 * b, block.hc1), (2 * b + 1, block.hc2)):
            a_m, a_r = hc.static_alpha[:, 0], hc.static_alpha[:, 1:]
            assert torch.equal(a_m, F.one_hot(torch.tensor(k % 3), 3).float())
            assert torch.equal(a_r, torch.eye(3)) and torch.equal(hc.static_beta, torch.ones(3))
            if layer == "hc_dynamic":
                assert not hc.dynamic_alpha_fn.any() and not hc.dynamic_beta_fn.any()
                assert hc.dynamic_alpha_scale.item() == pytest.approx(0.01)
                assert hc.dynamic_beta_scale.item() == pytest.approx(0.01)
            else:
                assert not hasattr(hc, "dynamic_alpha_fn")


# --- the formulas, against the hyper-connections package (lucidrains, PyPI 0.4.11) ---------------------------------


def _package_width_depth(h, y_fn, static_alpha, static_beta, alpha_fn=None, alpha_scale=None, beta_fn=None,
                         beta_scale=None):
    """hyper_connections/hyper_connections.py 0.4.11, HyperConnections.width_connection and depth_connection with
    num_fracs = 1, num_input_views = 1, tanh, channels last, transcribed with the streams unfolded from the batch
    ('(b s) ... d -> b ... s d' is our layout already). Its norm is its own RMSNorm (gamma 0): x/‖x‖·√d."""
    d = h.shape[-1]
    normed = F.normalize(h, dim=-1) * d ** 0.5
    alpha = static_alpha
    beta = static_beta
    if alpha_fn is not None:
        alpha = torch.tanh(normed @ alpha_fn) * alpha_scale + static_alpha
        beta = torch.tanh(normed @ beta_fn) * beta_scale + static_beta
    mix_h = torch.einsum("...st,...sd->...td", alpha.expand(*h.shape[:-2], *alpha.shape[-2:]), h)
    branch_input, residuals = mix_h[..., 0, :], mix_h[..., 1:, :]
    output = torch.einsum("...d,...s->...sd", y_fn(branch_input), beta.expand(*h.shape[:-1]))
    return output + residuals


@pytest.mark.parametrize("dynamic", [False, True])
def test_width_and_depth_connections_are_the_reference_packages(dynamic):
    torch.manual_seed(0)
    n, d = 3, 8
    hc = hyper_connection(d, n, layer_id=1, dynamic=dynamic).double()
    with torch.no_grad():  # away from the init, so that every term counts (the LayerNorm keeps its unit affine)
        for p in hc.parameters(recurse=False):
            p.add_(torch.randn_like(p) * 0.5)
    h = torch.randn(2, 5, n, d, dtype=torch.double)
    h = h - h.mean(dim=-1, keepdim=True)  # zero-mean streams: the paper's LayerNorm equals the package's RMSNorm
    weight = torch.randn(d, d, dtype=torch.double)

    def branch(x):
        return torch.tanh(x @ weight)

    x, mixed, beta = hc.width(h)
    ours = hc.depth(branch(x), mixed, beta)
    dyn = dict(alpha_fn=hc.dynamic_alpha_fn, alpha_scale=hc.dynamic_alpha_scale, beta_fn=hc.dynamic_beta_fn,
               beta_scale=hc.dynamic_beta_scale) if dynamic else {}
    reference = _package_width_depth(h, branch, hc.static_alpha, hc.static_beta, **dyn)
    torch.testing.assert_close(ours, reference, rtol=1e-6, atol=1e-6)


def test_the_reference_package_itself_agrees():
    import hyper_connections as package  # a test dependency (pyproject's `test` extra): never skipped
    torch.manual_seed(0)
    n, d = 4, 16
    ref = package.HyperConnections(n, dim=d, layer_index=3, tanh=True)
    ours = hyper_connection(d, n, layer_id=3, dynamic=True)
    with torch.no_grad():
        for name in ("static_alpha", "dynamic_alpha_fn", "dynamic_alpha_scale", "static_beta", "dynamic_beta_fn",
                     "dynamic_beta_scale"):
            value = torch.randn_like(getattr(ours, name)) * 0.3 + getattr(ours, name)
            getattr(ours, name).copy_(value)
            getattr(ref, name).copy_(value.reshape(getattr(ref, name).shape))
    h = torch.randn(2, 5, n, d)
    h = h - h.mean(dim=-1, keepdim=True)
    branch_in, add_residual = ref(h.permute(0, 2, 1, 3).reshape(2 * n, 5, d))  # its (b s) n d layout
    x, mixed, beta = ours.width(h)
    torch.testing.assert_close(x, branch_in, rtol=1e-4, atol=1e-4)
    y = torch.randn(2, 5, d)
    theirs = add_residual(y).reshape(2, n, 5, d).permute(0, 2, 1, 3)
    torch.testing.assert_close(ours.depth(y, mixed, beta), theirs, rtol=1e-4, atol=1e-4)


# --- bad input ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [0, -2, 1.5, "4", True])
def test_an_expansion_rate_below_1_or_not_an_integer_is_refused_in_one_line(rate):
    with pytest.raises(LayerError, match="expansion_rate") as excinfo:
        NormbenchViT(layer="hc", **TINY, block_kwargs={"expansion_rate": rate})
    assert "\n" not in str(excinfo.value)


def test_an_unknown_block_argument_is_refused_in_one_line():
    with pytest.raises(LayerError, match="`streams` is not a hyper-connection argument") as excinfo:
        NormbenchViT(layer="hc_dynamic", **TINY, block_kwargs={"streams": 2})
    assert "\n" not in str(excinfo.value)


def test_hc_with_layerscale_scales_each_branch_before_the_streams_receive_it():
    torch.manual_seed(0)
    model = NormbenchViT(layer="hc+layerscale", **TINY, init_values=0.0)
    x = images(batch=2)
    with torch.no_grad():
        tokens = model._pos_embed(model.patch_embed(x))
        streams = model.blocks(model.expand(tokens))
    # λ = 0: every branch contributes nothing, every stream is still the embedding
    torch.testing.assert_close(streams, model.expand(tokens))
