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
- a fused qkv weight (3C x C) orthogonalised as three C x C matrices, Wq, Wk and Wv, each scaled as one
  (`BlockwiseMuon`): Moonlight and Kimi K2 keep the projections apart and modded-nanogpt splits its fused qkvo before
  Newton-Schulz; one joint Newton-Schulz would let one projection's large gradient take the others' share of the update;
- the other parameters: AdamW exactly as `optimizer: adamw` trains them (betas (0.9, 0.999), ε 1e-8), at the suite's
  lr times their group's `lr_scale` (timm's `fallback_lr_scale` 1), so only the hidden matrices' optimizer changes;
- decoupled weight decay p ← p·(1 - lr·wd) on both, the suite's `weight_decay` on the groups the AdamW rule decays.

`adamuon` (AdaMuon, arXiv 2507.11005) adds a second moment on the orthogonalised update (β₂ 0.95, timm's) and
rescales the result to RMS 0.2 over the whole weight; the split, momentum and AdamW part are `muon`'s, the fused qkv
one matrix (its RMS rescaling is per weight, as timm's AdaMuon, its reference, does it). timm's `nmuon` and `nadamuon`
change the AdamW part to NAdamW, so contracts/cell_checks.py refuses them.
"""

from __future__ import annotations

from typing import Any

import torch
from timm.optim import Muon
from timm.optim.muon import get_lr_scale, resolve_ns_coefficients, zeropower_via_newtonschulz
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
    adamuon = tc.optimizer.lower() == "adamuon"
    groups = param_groups(model, tc.lr, tc.weight_decay, muon=True)
    for group in groups:
        group.update(muon_settings() if group["use_muon"] else adamw_settings(tc.adam_beta2))
        if adamuon:
            group.pop("muon_blocks", None)
    return BlockwiseMuon(groups, lr=tc.lr, weight_decay=tc.weight_decay, momentum=momentum_of(tc), nesterov=True,
                ns_steps=NS_STEPS, ns_coefficients=[NS_COEFFICIENTS], eps=NS_EPS, adjust_lr_fn=ADJUST_LR,
                fallback_lr_scale=1.0, algo="adamuon" if adamuon else "muon")


def muon_settings() -> dict[str, Any]:
    return {"nesterov": True, "eps": NS_EPS}


def adamw_settings(beta2: float | None = None) -> dict[str, Any]:
    # timm steps a group's AdamW part as NAdamW when the group is Nesterov: these groups are not
    betas = ADAMW_BETAS if beta2 is None else (ADAM_BETA1, float(beta2))
    return {"nesterov": False, "betas": betas, "eps": ADAMW_EPS}


class BlockwiseMuon(Muon):
    """timm's `Muon`, except that its Muon step runs every hidden matrix of one shape through one batched
    Newton-Schulz (timm's loops matrix by matrix: at depth 36, width 64, the step took 145-160 ms on one CPU thread,
    against 14-17 ms for AdamW's; 144 matrices of 3 shapes here), and a group with `muon_blocks` b > 1
    (train/optim_groups.py: a fused qkv) has each weight's b row blocks orthogonalised and scaled as a matrix of its
    own. timm steps the AdamW groups, and every group under `adamuon`."""

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        if closure is not None:
            raise ValueError("BlockwiseMuon takes no closure: the training loop computes the gradients before a step")
        if self.defaults.get("algo", "muon") == "adamuon":
            return super().step()
        muon = [g for g in self.param_groups if g.get("use_muon")]
        params = [g["params"] for g in muon]
        try:  # timm steps the AdamW groups; these wait, empty, for the step below
            for group in muon:
                group["params"] = []
            super().step()
        finally:
            for group, kept in zip(muon, params, strict=True):
                group["params"] = kept
        self._step_batched(muon)
        return None

    def _step_batched(self, groups: list[dict[str, Any]]) -> None:
        """timm's Muon update (`_single_tensor_muon`: decay, Nesterov momentum, Newton-Schulz, Moonlight's scale 0.2·
        sqrt(max(m, n)) of each (m, n) matrix, the update) with the Newton-Schulz of every matrix of one shape and
        one setting done as one (L, m, n) batch, as train/stacked_muon.py does across fused cells."""
        batches: dict[tuple[Any, ...], list[tuple[torch.Tensor, torch.Tensor, float]]] = {}
        for group in groups:
            blocks, lr = group.get("muon_blocks", 1), group["lr"]
            coefficients = resolve_ns_coefficients(group["ns_coefficients"], {})
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                state.setdefault("use_muon", True)
                buffer = state.setdefault("momentum_buffer", torch.zeros_like(p))
                p.mul_(1 - lr * group["weight_decay"])
                buffer.lerp_(p.grad, 1.0 - group["momentum"])
                update = p.grad.lerp(buffer, group["momentum"]) if group["nesterov"] else buffer.clone()
                rows, cols = update.shape
                key = (rows // blocks, cols, group["ns_steps"], tuple(map(tuple, coefficients)), group["eps"],
                       group["safety_factor"], group["scale_eps"], group["adjust_lr_fn"])
                batches.setdefault(key, []).append((p, update.reshape(blocks, rows // blocks, cols), lr))
        for (m, n, steps, coefficients, eps, safety, scale_eps, adjust), batch in batches.items():
            ortho = zeropower_via_newtonschulz(torch.cat([u for _, u, _ in batch]), steps, list(coefficients),
                                               eps=eps, safety_factor=safety, scale_eps=scale_eps)
            scale = get_lr_scale(torch.Size((m, n)), adjust) if adjust else 1.0
            for (p, _, lr), o in zip(batch, ortho.split([u.shape[0] for _, u, _ in batch]), strict=True):
                p.add_(o.reshape(p.shape).to(p.dtype), alpha=-lr * scale)
