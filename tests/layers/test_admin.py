"""Admin: post-LN with the skip scaled by ω, ω profiled on training images as Transformer-Clinic's code does."""

from __future__ import annotations

import math

import pytest
import timm
import torch

from normbench import cli
from normbench.layers import AdminBlock, LayerError, admin_init
from tests.layers._cases import TINY, images, tiny_vit


def _omegas(model: torch.nn.Module) -> torch.Tensor:
    return torch.stack([torch.stack([b.omega1, b.omega2]) for b in model.blocks]).detach()


def _admin(batch: torch.Tensor, seed: int = 0, **overrides) -> torch.nn.Module:
    torch.manual_seed(seed)
    return timm.create_model("normbench_vit", layer="admin", init_images=batch, **{**TINY, **overrides})


def test_omega_is_computed_from_data():
    a, b = images(batch=8, seed=1), 3 * images(batch=8, seed=2)
    same = _omegas(_admin(a)), _omegas(_admin(a.clone()))
    assert torch.equal(*same), "the same batch (and init) gives the same ω"
    assert not torch.allclose(same[0], _omegas(_admin(b))), "another batch gives another ω"
    assert not torch.equal(same[0], torch.ones_like(same[0])), "profiled, not left at 1"


@torch.no_grad()
def test_omega_follows_the_official_profiling_recurrence():
    batch = images(batch=8, seed=3)
    model = _admin(batch, depth=4).eval()
    omegas = _omegas(model)
    # Transformer-Clinic: ratio = 1; per sublayer ω = ratio, ratio = sqrt(var(x·ω) + var(F(x))), x = LN(x·ω + F(x))
    x, ratio = model._pos_embed(model.patch_embed(batch)), 1.0
    for i, block in enumerate(model.blocks):
        for j, (gate, branch, norm) in enumerate(((block.ls1, block.attn, block.norm1),
                                                  (block.ls2, block.mlp, block.norm2))):
            assert torch.allclose(omegas[i, j], torch.full((32,), ratio)), (i, j)
            out = gate(branch(x))
            new_ratio = math.sqrt((x * ratio).var(unbiased=False).item() + out.var(unbiased=False).item())
            x, ratio = norm(x * ratio + out), new_ratio
    # ω₁ = 1; after it each sublayer's input is LN'd (Var 1), so ω² grows by each branch's variance
    flat = omegas[:, :, 0].flatten()
    assert flat[0] == 1 and (flat[2:] > flat[1:-1]).all()


@torch.no_grad()
def test_block_is_post_ln_with_the_skip_scaled_by_omega():
    block = _admin(images(batch=8)).blocks[1].eval()
    x = torch.randn(2, 17, 32)
    mid = block.norm1(x * block.omega1 + block.attn(x))
    torch.testing.assert_close(block(x), block.norm2(mid * block.omega2 + block.mlp(mid)))
    assert isinstance(block, AdminBlock) and block.omega1.requires_grad and block.omega1.shape == (32,)


def test_profiling_runs_in_eval_mode_draws_no_random_numbers_and_restores_the_mode():
    model = _admin(images(batch=8), proj_drop_rate=0.3, attn_drop_rate=0.3).train()  # train-mode dropout would draw
    state = torch.random.get_rng_state()
    admin_init(model, images(batch=8))
    assert torch.equal(state, torch.random.get_rng_state()) and model.training
    first = _omegas(model)
    admin_init(model, images(batch=8))
    assert torch.equal(first, _omegas(model))


def test_admin_without_training_images_fails_in_one_line_naming_the_fix():
    with pytest.raises(LayerError, match="init_images=") as excinfo:
        timm.create_model("normbench_vit", layer="admin", **TINY)
    assert "\n" not in str(excinfo.value) and excinfo.value.exit_code == 2
    assert tiny_vit("admin") is not None  # with images it builds


def test_admin_without_data_exits_2_from_the_cli(capsys, tmp_path):
    code = cli.main(["bench", "--layers", "admin", "--depth", "1", "--dim", "16", "--batch-size", "2",
                     "--compile", "off", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "init_images=" in err and err.count("\n") == 1
