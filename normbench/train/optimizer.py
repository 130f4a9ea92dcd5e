"""A cell's optimizer, built one way for training (train/loop.py) and for timing (`normbench bench SUITE`), so a cost
table charges each recipe the optimizer step it trains with (a Muon suite's Newton-Schulz included)."""

from __future__ import annotations

import torch
from timm.optim import create_optimizer_v2
from torch import nn

from normbench.contracts.recipe import MUON_OPTIMIZERS, TrainConfig
from normbench.train import fastpath
from normbench.train.muon import ADAM_BETA1, create_muon
from normbench.train.optim_groups import param_groups


def build_optimizer(model: nn.Module, tc: TrainConfig, dev: torch.device) -> torch.optim.Optimizer:
    """`train.optimizer` over the model's parameter groups (train/optim_groups.py): Muon on the hidden matrices and
    AdamW on the rest (train/muon.py), else timm's optimizer of that name, fused AdamW where torch has it."""
    if tc.optimizer.lower() in MUON_OPTIMIZERS:
        return create_muon(model, tc)
    betas = {"betas": (ADAM_BETA1, tc.adam_beta2)} if tc.adam_beta2 is not None else {}
    return create_optimizer_v2(param_groups(model, tc.lr, tc.weight_decay), tc.optimizer, lr=tc.lr,
                               weight_decay=tc.weight_decay, **betas, **fastpath.optimizer_kwargs(tc.optimizer, dev))
