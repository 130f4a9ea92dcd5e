"""`train.optimizer: muon` (and `adamuon`): Muon on the blocks' hidden matrices, AdamW on every other parameter, as
the references split them (KellerJordan/Muon `MuonWithAuxAdam`, Moonlight), in one optimizer.

The implementation is timm's `Muon` (timm/optim/muon.py), one optimizer whose parameter groups say which algorithm
trains them (`use_muon`, set by train/optim_groups.py), so the loop's schedule, checkpoints, DDP and the fused path
handle it as they handle AdamW. (torch.optim.Muon refuses every parameter that is not 2-D, so it would need an AdamW
beside it: two optimizers to schedule, checkpoint and fuse.) Its settings are the reference's, not timm's defaults:

- Muon: Nesterov momentum 0.95 (`train.muon_momentum`), Newton-Schulz with Keller Jordan's coefficients
  (3.4445, -4.7750, 2.0315), 5 steps in bfloat16 (timm's default is another, per-step "quintic" set), ε 1e-7;
- the update scaled by 0.2·sqrt(max(A, B)) for an A x B matrix (Moonlight's `match_rms_adamw`, arXiv 2502.16982):
  its RMS is then about 0.2, AdamW's, so Muon takes the suite's lr as AdamW does and one lr grid serves both;
- the other parameters: AdamW exactly as `optimizer: adamw` trains them (betas (0.9, 0.999), ε 1e-8), at the suite's
  lr times their group's `lr_scale` (timm's `fallback_lr_scale` 1), so only the hidden matrices' optimizer changes;
- decoupled weight decay p ← p·(1 - lr·wd) on both, the suite's `weight_decay` on the groups the AdamW rule decays.

`adamuon` (AdaMuon, arXiv 2507.11005) adds a second moment on the orthogonalised update (β₂ 0.95, timm's) and
rescales the result to RMS 0.2; the split, momentum and AdamW part are `muon`'s. timm's `nmuon` and `nadamuon`
change the AdamW part to NAdamW, so contracts/cell_checks.py refuses them.
"""

from __future__ import annotations

from typing import Any

from timm.optim import Muon
from torch import nn

from normbench.contracts.recipe import ADAM_BETA2_DEFAULT, TrainConfig
from normbench.train.optim_groups import param_groups

MOMENTUM = 0.95                               # the reference's β, Nesterov
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)   # zeropower_via_newtonschulz5's (a, b, c)
NS_STEPS = 5
NS_EPS = 1e-7                                 # X / max(‖X‖_F, ε) before the iterations
ADJUST_LR = "match_rms_adamw"                 # update × 0.2·sqrt(max(A, B))
ADAM_BETA1 = 0.9
ADAMW_BETAS = (ADAM_BETA1, ADAM_BETA2_DEFAULT)  # torch.optim.AdamW's, as `optimizer: adamw` (`train.adam_beta2`)
ADAMW_EPS = 1e-8


def momentum_of(tc: TrainConfig) -> float:
    return MOMENTUM if tc.muon_momentum is None else float(tc.muon_momentum)


def create_muon(model: nn.Module, tc: TrainConfig) -> Muon:
    """The cell's optimizer for `train.optimizer` muon or adamuon: each group on Muon or on AdamW
    (train/optim_groups.py `hidden_matrices`), with the settings above."""
    groups = param_groups(model, tc.lr, tc.weight_decay, muon=True)
    for group in groups:
        group.update(muon_settings() if group["use_muon"] else adamw_settings(tc.adam_beta2))
    return Muon(groups, lr=tc.lr, weight_decay=tc.weight_decay, momentum=momentum_of(tc), nesterov=True,
                ns_steps=NS_STEPS, ns_coefficients=[NS_COEFFICIENTS], eps=NS_EPS, adjust_lr_fn=ADJUST_LR,
                fallback_lr_scale=1.0, algo="adamuon" if tc.optimizer.lower() == "adamuon" else "muon")


def muon_settings() -> dict[str, Any]:
    return {"nesterov": True, "eps": NS_EPS}


def adamw_settings(beta2: float | None = None) -> dict[str, Any]:
    # timm steps a group's AdamW part as NAdamW when the group is Nesterov: these groups are not
    betas = ADAMW_BETAS if beta2 is None else (ADAM_BETA1, float(beta2))
    return {"nesterov": False, "betas": betas, "eps": ADAMW_EPS}
