"""mHC: every residual mixing matrix the model computes is doubly stochastic (rows and columns summing to 1 within
1e-3, no negative entry), at init, away from it and after training steps; the maps have the paper's ranges; the block
is the pre-norm residual at step 0."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from normbench.layers.mhc import SINKHORN_ITERS, ManifoldHyperConnection, SinkhornKnopp, sinkhorn_knopp
from normbench.model.vit import NormbenchViT
from normbench.train.telemetry import BlockTelemetry
from tests.layers._cases import images

TINY = dict(depth=3, embed_dim=32, num_heads=2, patch_size=4, img_size=16, num_classes=5)


def _mixing_matrices(model: NormbenchViT, x: torch.Tensor) -> list[torch.Tensor]:
    seen: list[torch.Tensor] = []
    handles = [m.register_forward_hook(lambda mod, args, out: seen.append(out.detach()))
               for m in model.modules() if isinstance(m, SinkhornKnopp)]
    try:
        model(x)
    finally:
        for handle in handles:
            handle.remove()
    assert len(seen) == 2 * len(model.blocks)  # one per sublayer
    return seen


def _assert_doubly_stochastic(matrices: list[torch.Tensor]) -> None:
    for m in matrices:
        assert m.shape[-2:] == (4, 4)  # the paper's n = 4
        assert (m >= 0).all()
        assert (m.sum(dim=-1) - 1).abs().max() <= 1e-3, "a row does not sum to 1"
        assert (m.sum(dim=-2) - 1).abs().max() <= 1e-3, "a column does not sum to 1"


def test_every_mixing_matrix_is_doubly_stochastic_at_init():
    torch.manual_seed(0)
    model = NormbenchViT(layer="mhc", **TINY)
    matrices = _mixing_matrices(model, images(batch=4))
    _assert_doubly_stochastic(matrices)
    for m in matrices:  # and near the identity (0.999 and 3.4e-4): the identity path of a pre-norm residual
        torch.testing.assert_close(m, torch.eye(4).expand_as(m), rtol=0, atol=1.1e-3)


def test_every_mixing_matrix_is_doubly_stochastic_away_from_init_and_after_training():
    torch.manual_seed(0)
    model = NormbenchViT(layer="mhc", **TINY)
    # token-dependent logits of spread ~0.75: far from the identity. (Wider ones, e.g. a spread of 1.5, leave some
    # columns more than 1e-3 off after the paper's 20 iterations, as mHC-lite reports; telemetry's mix_ds_error
    # records how far each block's are in training.)
    with torch.no_grad():
        for hc in (m for m in model.modules() if isinstance(m, ManifoldHyperConnection)):
            hc.phi.normal_(0, 0.05)
            hc.alpha.fill_(1.0)
            hc.b_res.normal_(0, 0.5)
    x, y = images(batch=8), torch.arange(8) % 5
    _assert_doubly_stochastic(_mixing_matrices(model, x))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(3):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    matrices = _mixing_matrices(model, x)
    _assert_doubly_stochastic(matrices)
    assert max((m - torch.eye(4)).abs().max().item() for m in matrices) > 0.1, "the test must mix streams"


def test_sinkhorn_runs_the_papers_20_iterations_and_reaches_the_birkhoff_polytope():
    assert SINKHORN_ITERS == 20
    logits = torch.randn(100, 4, 4)
    m = sinkhorn_knopp(logits)
    assert torch.allclose(m.sum(-1), torch.ones(100, 4), atol=1e-6)  # rows: exact after the last row step
    assert (m.sum(-2) - 1).abs().max() < 1e-3
    one = sinkhorn_knopp(logits, iters=1)  # fewer iterations: further from the polytope
    assert (one.sum(-2) - 1).abs().max() > (m.sum(-2) - 1).abs().max()


def test_the_maps_have_the_papers_ranges():
    torch.manual_seed(0)
    hc = ManifoldHyperConnection(8, 4)
    with torch.no_grad():
        hc.phi.normal_(0, 0.3)
        hc.alpha.fill_(1.0)
    h_pre, h_post, h_res = hc.maps(torch.randn(2, 5, 4, 8))
    assert ((h_pre > 0) & (h_pre < 1)).all() and ((h_post > 0) & (h_post < 2)).all()  # σ and 2σ
    assert h_post.max() > 1, "2σ, not σ"
    assert h_res.shape == (2, 5, 4, 4)


def test_at_init_mhc_computes_the_layernorm_models_logits():
    torch.manual_seed(0)
    plain = NormbenchViT(layer="layernorm", **TINY, norm_kwargs={"eps": 1e-30}).double()
    model = NormbenchViT(layer="mhc", **TINY, norm_kwargs={"eps": 1e-30}).double()
    loaded = model.load_state_dict(plain.state_dict(), strict=False)
    assert loaded.unexpected_keys == []
    x = images(batch=3).double()
    torch.testing.assert_close(model(x), plain(x), rtol=1e-4, atol=1e-7)  # the maps are float32, as the paper's


def test_telemetry_reports_how_far_the_mixing_is_from_doubly_stochastic():
    torch.manual_seed(0)
    model = NormbenchViT(layer="mhc", **TINY)
    telemetry = BlockTelemetry(model)
    with telemetry.observe():
        F.cross_entropy(model(images(batch=4)), torch.arange(4) % 5).backward()
    telemetry.before_update()
    telemetry.after_update(0)
    records = telemetry.records()
    assert len(records) == len(model.blocks)
    assert all(r["mix_ds_error"] is not None and 0 <= r["mix_ds_error"] < 1e-3 for r in records)
    plain = NormbenchViT(layer="layernorm", **TINY)
    telemetry = BlockTelemetry(plain)
    with telemetry.observe():
        plain(images(batch=2)).sum().backward()
    telemetry.before_update()
    telemetry.after_update(0)
    assert all(r["mix_ds_error"] is None for r in telemetry.records())  # no mixing matrix: NaN, stored as None


@pytest.mark.parametrize("rate", [0, -1])
def test_mhc_refuses_fewer_than_one_stream(rate):
    from normbench.layers import LayerError

    with pytest.raises(LayerError, match="expansion_rate"):
        NormbenchViT(layer="mhc", **TINY, block_kwargs={"expansion_rate": rate})
