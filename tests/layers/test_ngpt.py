"""nGPT: after one optimizer step of the training loop every weight vector is a unit vector along its embedding
dimension and every hidden state leaving a block has unit norm; its recipe (no weight decay, no warmup) comes with
the entry; what it replaces cannot be combined with it."""

from __future__ import annotations

import pytest
import torch

from normbench.contracts.recipe import CellConfig, ModelConfig, TrainConfig
from normbench.data.config import DataConfig
from normbench.layers import LayerError, resolve_layer
from normbench.model.vit import NormbenchViT
from normbench.train.loop import build_fit, train_epoch
from normbench.train.optim_groups import param_groups
from tests.layers._cases import images

TINY = dict(depth=3, embed_dim=32, num_heads=2, patch_size=4, img_size=16, num_classes=5)
CELL = CellConfig(
    model=ModelConfig(layer="ngpt", depth=3, embed_dim=32, num_heads=2, patch_size=4),
    train=TrainConfig(epochs=2, batch_size=16, lr=3e-3, weight_decay=0.05, warmup_epochs=1, compile="off",
                      amp="none", telemetry_every=0),
    data=DataConfig(name="synthetic", num_classes=5, synthetic_size=16, train_size=16, val_size=16, test_size=16),
)


def _unit_along(weight: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.linalg.vector_norm(weight.detach().float(), dim=dim)


def _weight_vectors(model: NormbenchViT) -> dict[str, torch.Tensor]:
    """The norm of every weight vector along its embedding dimension (the paper's normalize_matrices)."""
    norms = {"patch_embed": _unit_along(model.patch_embed.proj.weight.flatten(1), 0),
             "pos_embed": _unit_along(model.pos_embed, -1), "cls_token": _unit_along(model.cls_token, -1),
             "head": _unit_along(model.head.weight, 1)}
    for i, block in enumerate(model.blocks):
        norms |= {f"blocks.{i}.attn.qkv": _unit_along(block.attn.qkv.weight, 1),
                  f"blocks.{i}.attn.proj": _unit_along(block.attn.proj.weight, 0),
                  f"blocks.{i}.mlp.fc1": _unit_along(block.mlp.fc1.weight, 1),
                  f"blocks.{i}.mlp.fc2": _unit_along(block.mlp.fc2.weight, 0)}
    return norms


def test_after_one_optimizer_step_every_weight_vector_and_hidden_state_has_unit_norm(one_torch_thread):
    torch.manual_seed(0)
    fit = build_fit(CELL, "cpu", None, None)
    before = {n: p.detach().clone() for n, p in fit.model.named_parameters()}
    trained = train_epoch(fit, 0)
    assert trained.optimizer_steps == 1 and fit.step == 1
    assert any(not torch.equal(before[n], p) for n, p in fit.model.named_parameters()), "the step changed nothing"
    for name, norms in _weight_vectors(fit.model).items():
        torch.testing.assert_close(norms, torch.ones_like(norms), rtol=0, atol=1e-5, msg=name)

    leaving: list[torch.Tensor] = []
    handles = [b.register_forward_hook(lambda m, a, out: leaving.append(out.detach())) for b in fit.model.blocks]
    fit.model.eval()
    with torch.no_grad():
        fit.model(images(batch=4))
    for handle in handles:
        handle.remove()
    assert len(leaving) == len(fit.model.blocks)
    for h in leaving:
        norms = torch.linalg.vector_norm(h, dim=-1)
        torch.testing.assert_close(norms, torch.ones_like(norms), rtol=0, atol=1e-5)


def test_the_recipe_comes_with_the_entry_no_weight_decay_and_no_warmup(one_torch_thread):
    torch.manual_seed(0)
    fit = build_fit(CELL, "cpu", None, None)
    groups = fit.optimizer.param_groups
    assert all(g["weight_decay"] == 0 for g in groups), "nGPT trains without weight decay"
    assert all(g.get("warmup", True) is False for g in groups)
    train_epoch(fit, 0)
    # step 0 of 2 with a one-epoch warmup: a warmed-up group would sit at warmup_lr; nGPT's starts at the peak
    assert all(g["lr"] == pytest.approx(CELL.train.lr) for g in groups)
    plain = NormbenchViT(layer="layernorm", **TINY)
    assert {g.get("warmup", True) for g in param_groups(plain, 1e-3, 0.05)} == {True}  # others keep theirs
    assert any(g["weight_decay"] > 0 for g in param_groups(plain, 1e-3, 0.05))


def test_init_puts_every_weight_vector_on_the_sphere_and_scales_at_the_papers_values():
    torch.manual_seed(0)
    model = NormbenchViT(layer="ngpt", **TINY)
    for name, norms in _weight_vectors(model).items():
        torch.testing.assert_close(norms, torch.ones_like(norms), rtol=0, atol=1e-5, msg=name)
    block = model.blocks[0]
    dim = TINY["embed_dim"]
    torch.testing.assert_close(block.ls1.value(), torch.full((dim,), 0.05))  # α_init 0.05
    assert block.ls1.weight[0].item() == pytest.approx(dim ** -0.5)  # stored at α_scale = 1/√C
    torch.testing.assert_close(block.attn.q_norm.value(), torch.ones(dim // 2))  # s_qk init 1
    torch.testing.assert_close(model.head.logit_scale.value(), torch.ones(5))  # s_z init 1
    assert model.head.bias is None and block.attn.qkv.bias is None and block.mlp.fc1.bias is None
    assert isinstance(model.norm, torch.nn.Identity), "no final norm: the last block's output is on the sphere"


@pytest.mark.parametrize("layer, replaced", [("ngpt+layernorm", "norm"), ("ngpt+rmsnorm", "norm"),
                                             ("ngpt+layerscale", "gate"), ("ngpt+rezero", "gate"),
                                             ("ngpt+qk_norm", "modifier")])
def test_ngpt_refuses_what_it_replaces_in_one_line(layer, replaced):
    with pytest.raises(LayerError, match=f"`ngpt` takes no {replaced}") as excinfo:
        resolve_layer(layer)
    assert "\n" not in str(excinfo.value)


@pytest.mark.parametrize("alpha_init", [0, -0.1, 2.0, "big"])
def test_a_bad_alpha_init_is_refused_in_one_line(alpha_init):
    with pytest.raises(LayerError, match="alpha_init") as excinfo:
        NormbenchViT(layer="ngpt", **TINY, block_kwargs={"alpha_init": alpha_init})
    assert "\n" not in str(excinfo.value)
