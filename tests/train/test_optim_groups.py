"""Parameter groups: timm's weight-decay grouping by default, and the layer tags (lr multiplier, forced decay)
reaching the optimizer and the training loop."""

from __future__ import annotations

import pytest
import torch
from timm.optim import create_optimizer_v2

import normbench.train.loop
from normbench.contracts.recipe import CellConfig, ModelConfig, TrainConfig
from normbench.layers.fixup import fixup_scalars
from normbench.train.optim_groups import param_groups
from tests.layers._cases import tiny_vit


def _group_of(optimizer: torch.optim.Optimizer) -> dict[int, dict]:
    return {id(p): g for g in optimizer.param_groups for p in g["params"]}


@pytest.mark.parametrize("layer", ["layernorm", "layerscale", "learnable_scaler", "rezero", "fixup"])
def test_untagged_layers_group_exactly_as_timm_does(layer):
    model = tiny_vit(layer)
    ours = create_optimizer_v2(param_groups(model, 1e-3, 0.05), "adamw", lr=1e-3, weight_decay=0.05)
    timms = create_optimizer_v2(model, "adamw", lr=1e-3, weight_decay=0.05)
    ours_wd = {pid: g["weight_decay"] for pid, g in _group_of(ours).items()}
    timm_wd = {pid: g["weight_decay"] for pid, g in _group_of(timms).items()}
    assert ours_wd == timm_wd
    assert all(g["lr"] == 1e-3 and g["lr_scale"] == 1.0 for g in ours.param_groups)


def test_fixup_official_scalars_reach_the_optimizer_at_a_tenth_of_the_lr_with_weight_decay():
    model = tiny_vit("fixup_official")
    optimizer = create_optimizer_v2(param_groups(model, 2e-3, 0.05), "lamb", lr=2e-3, weight_decay=0.05)
    groups = _group_of(optimizer)
    scalars = {id(p) for p in fixup_scalars(model)}
    assert scalars and len(groups) == len(list(model.parameters()))
    for p in model.parameters():
        group = groups[id(p)]
        assert group["weight_decay"] == 0.05, "the author's scripts decay every parameter"
        assert group["lr"] == pytest.approx(2e-4 if id(p) in scalars else 2e-3)


def test_fixup_default_keeps_the_benchmark_recipe():
    # `fixup`: the official init under the benchmark's shared optimizer rules (one lr; no decay on norms and gates)
    model = tiny_vit("fixup")
    groups = _group_of(create_optimizer_v2(param_groups(model, 2e-3, 0.05), "adamw", lr=2e-3, weight_decay=0.05))
    assert {g["lr"] for g in groups.values()} == {2e-3}
    assert all(groups[id(p)]["weight_decay"] == 0.0 for p in fixup_scalars(model))
    assert groups[id(model.blocks[0].attn.qkv.weight)]["weight_decay"] == 0.05


def test_the_training_loop_keeps_the_lr_multiplier(monkeypatch):
    # the loop sets every group's lr from the schedule at each step: the multiplier must survive it
    made = []
    build = normbench.train.loop.build_optimizer

    def spy(*args, **kwargs):
        made.append(build(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(normbench.train.loop, "build_optimizer", spy)
    cell = CellConfig(model=ModelConfig(layer="fixup_official", depth=1, embed_dim=16, num_heads=2, patch_size=4),
                      train=TrainConfig(epochs=1, batch_size=256, lr=1e-3, warmup_epochs=0, min_lr=1e-3))
    result = normbench.train.loop.train_cell(cell, device="cpu")
    assert result.status == "ok"
    lrs = sorted({round(g["lr"], 12) for g in made[0].param_groups})
    assert lrs == [pytest.approx(1e-4), pytest.approx(1e-3)]
