"""train/optimizer.py: the one place a cell's optimizer is built, for training and for `bench SUITE` alike."""

from __future__ import annotations

import pytest
import torch

from normbench.contracts.recipe import TrainConfig
from normbench.train.muon import BlockwiseMuon
from normbench.train.optimizer import build_optimizer
from tests.layers._cases import tiny_vit


@pytest.mark.parametrize(("name", "kind"), [("muon", BlockwiseMuon), ("adamuon", BlockwiseMuon),
                                             ("adamw", torch.optim.AdamW)])
def test_the_recipes_optimizer_is_built_with_its_groups(name, kind):
    optimizer = build_optimizer(tiny_vit("layernorm"), TrainConfig(optimizer=name, lr=2e-3, weight_decay=0.05),
                                torch.device("cpu"))
    assert isinstance(optimizer, kind)
    decays = {g["weight_decay"] for g in optimizer.param_groups}
    assert decays == {0.0, 0.05}  # norms and biases undecayed, as train/optim_groups.py groups them


def test_adam_beta2_reaches_adamw_and_muons_adamw_part():
    for name in ("adamw", "muon"):
        optimizer = build_optimizer(tiny_vit("layernorm"), TrainConfig(optimizer=name, adam_beta2=0.95),
                                    torch.device("cpu"))
        betas = {g["betas"] for g in optimizer.param_groups if not g.get("use_muon")}
        assert betas == {(0.9, 0.95)}, name
