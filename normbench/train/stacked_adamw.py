"""AdamW for a fused group (train/fused.py): every member's step as one vectorised update over the flat (K, P) rows.

Each member trained alone steps torch's AdamW over its ~440 tensors (a kernel or more each, and ~2 ms of host time a
step); K members stepped one by one launch K times as many. Here the members' parameters, gradients and moments are
(K, P) tensors (train/stacked.py), and one step is a dozen kernels over all of them: per-member lr from the
schedule (warmup + cosine, train/schedule.py's `warmup_cosine`, computed on the device from a (K,) step counter, with
each param group's `lr_scale` and `warmup` flag, train/optim_groups.py), weight decay per member and param group,
beta2 and bias corrections per member (a tune search's trials differ in weight decay and beta2 as well as the lr),
and a (K,) mask: a member whose loss went non-finite is not updated (its rows are left as they are) without the host
ever reading the mask. The arithmetic per member is torch's AdamW (`_single_tensor_adamw`:
decay, moments, bias corrections, update) in the param dtype, so each member trains as it does alone to float
rounding (tests/train/test_stacked_adamw.py).

A member's own optimizer keeps nothing while the group trains: `export(k)` writes its state in torch's per-parameter
layout (exp_avg, exp_avg_sq, step) for its checkpoint, which is therefore an unfused cell's, and a resumed member's
state is read back from it when the group is built.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from normbench.train.schedule import warmup_cosine
from normbench.train.stacked import Stacked

Fit = Any  # train/loop.py's Fit (not imported: the loop is imported by fused.py, which imports this module)
UNSUPPORTED = ("amsgrad", "maximize", "differentiable")  # AdamW options the vectorised step does not implement


def refusal(fits: Sequence[Fit]) -> str | None:
    """Why the members' optimizers cannot step as one StackedAdamW (they then step one by one), or None."""
    for fit in fits:
        opt = fit.optimizer
        if type(opt) is not torch.optim.AdamW:
            return f"{type(opt).__name__} is not torch's AdamW"
        for group in opt.param_groups:
            if on := [key for key in UNSUPPORTED if group.get(key)]:
                return f"AdamW with {', '.join(on)}"
    first = [_settings(g) for g in fits[0].optimizer.param_groups]
    if any([_settings(g) for g in fit.optimizer.param_groups] != first for fit in fits[1:]):
        return "the members' AdamW settings differ beyond the lr, weight decay and beta2"
    return None


def _settings(group: dict[str, Any]) -> tuple:
    """What every member's param group must share: the rest (lr, weight decay, beta2) the step takes per member."""
    return (len(group["params"]), group["betas"][0], group["eps"], group.get("lr_scale", 1.0),
            group.get("warmup", True))


def schedule_dtype(device: torch.device) -> torch.dtype:
    """float64 for the lr arithmetic (Python's floats, as the schedule alone computes it), where the device has it."""
    return torch.float32 if device.type == "mps" else torch.float64


class StackedAdamW:
    """The members' AdamW as one update; `fits` in the group's order, `stacked` their flat parameters."""

    def __init__(self, fits: Sequence[Fit], stacked: Stacked) -> None:
        self.fits, self.stacked, self.k = list(fits), stacked, len(fits)
        flat = stacked.flat
        dev, sdt = flat.device, schedule_dtype(flat.device)
        groups = fits[0].optimizer.param_groups
        self.beta1, self.eps = float(groups[0]["betas"][0]), float(groups[0]["eps"])
        beta2s = [float(fit.optimizer.param_groups[0]["betas"][1]) for fit in fits]
        if any(tuple(g["betas"]) != (self.beta1, b2) or g["eps"] != self.eps
               for fit, b2 in zip(fits, beta2s, strict=True) for g in fit.optimizer.param_groups):
            raise ValueError("param groups with different betas or eps")  # no recipe builds them (optim_groups.py)
        # one beta2 for all (a row's lrs and seeds) keeps torch's own arithmetic; members that differ (tune trials)
        # each step with theirs, a (K, 1) column (adamw_step)
        self.beta2 = beta2s[0] if len(set(beta2s)) == 1 else None
        self.member_beta2 = torch.tensor(beta2s, dtype=sdt, device=dev)[:, None]
        names = {id(p): name for name, p in fits[0].model.named_parameters()}
        self.names_by_group = [[names[id(p)] for p in g["params"]] for g in groups]
        col_group = torch.empty(flat.shape[1], dtype=torch.long)
        for g, names_of in enumerate(self.names_by_group):
            for name in names_of:
                a, b = stacked.spans[name]
                col_group[a:b] = g
        self.col_group = col_group.to(dev)
        self.group_decay = torch.tensor([[float(g["weight_decay"]) for g in fit.optimizer.param_groups]
                                         for fit in fits], dtype=sdt, device=dev)  # (K, G): a member's own decay
        self.group_scale = torch.tensor([float(g.get("lr_scale", 1.0)) for g in groups], dtype=sdt, device=dev)
        self.group_warmup = torch.tensor([float(g.get("warmup", True)) for g in groups], dtype=sdt, device=dev)
        tcs = [f.tc for f in fits]  # members may differ in lr, epochs and warmup (the convergence check's 2x)
        self.base_lr = torch.tensor([tc.lr for tc in tcs], dtype=sdt, device=dev)
        self.warmup_lr = torch.tensor([tc.warmup_lr for tc in tcs], dtype=sdt, device=dev)
        self.min_lr = torch.tensor([tc.min_lr for tc in tcs], dtype=sdt, device=dev)
        self.total_steps = torch.tensor([f.steps_per_epoch * f.tc.epochs for f in fits], dtype=sdt, device=dev)
        self.warmup_steps = torch.tensor([round(f.tc.warmup_epochs * f.steps_per_epoch) for f in fits], dtype=sdt,
                                         device=dev)
        self.exp_avg = torch.zeros_like(flat)
        self.exp_avg_sq = torch.zeros_like(flat)
        self.steps = torch.zeros(self.k, dtype=torch.float32, device=dev)  # optimizer steps taken, per member
        self._import()

    # ------------------------------------------------------------------------------------------------- the step

    def tensors(self) -> dict[str, torch.Tensor]:
        """Everything the step reads or writes, by name: the arguments of `adamw_step` (which a compiled step gets
        as inputs, so one compiled function serves every group of one shape)."""
        return {"exp_avg": self.exp_avg, "exp_avg_sq": self.exp_avg_sq, "steps": self.steps,
                "col_group": self.col_group, "group_decay": self.group_decay, "group_scale": self.group_scale,
                "group_warmup": self.group_warmup, "base_lr": self.base_lr, "warmup_lr": self.warmup_lr,
                "min_lr": self.min_lr, "total_steps": self.total_steps, "warmup_steps": self.warmup_steps,
                "beta2": self.member_beta2}

    def hyper(self) -> tuple[float, float | None, float]:
        """(beta1, beta2, eps) as Python numbers; beta2 None when the members' differ (then `tensors()["beta2"]`)."""
        return self.beta1, self.beta2, self.eps

    def step(self, alive: torch.Tensor) -> None:
        """One AdamW step of the members `alive` ((K,) bool, on the device) over the gradients in `flat_grad`."""
        adamw_step(self.stacked.flat, self.stacked.flat_grad, alive, self.tensors(), *self.hyper())

    # ------------------------------------------------------------------------------ a member's own optimizer

    def export(self, k: int) -> None:
        """Member `k`'s state into its own optimizer, in torch's layout (`optimizer.state[p]`: step, exp_avg,
        exp_avg_sq; each param group's lr as the schedule last set it): what its checkpoint writes. Cloned: a view
        would save the whole (K, P) storage. One host read of the step counter."""
        fit, opt = self.fits[k], self.fits[k].optimizer
        step = float(self.steps[k])
        params = dict(fit.model.named_parameters())
        for group, names_of in zip(opt.param_groups, self.names_by_group, strict=True):
            on_device = group.get("fused") or group.get("capturable")
            for name in names_of:
                a, b = self.stacked.spans[name]
                p = params[name]
                opt.state[p] = {"step": torch.tensor(step, dtype=torch.float32,
                                                     device=p.device if on_device else "cpu"),
                                "exp_avg": self.exp_avg[k, a:b].view_as(p).clone(),
                                "exp_avg_sq": self.exp_avg_sq[k, a:b].view_as(p).clone()}
            if fit.step > 0:
                group["lr"] = scheduled_lr(fit, fit.step - 1, group) * group.get("lr_scale", 1.0)

    def release(self, k: int) -> None:
        """Member `k`'s optimizer holds nothing again (after its checkpoint is written): the stacked state is the
        one that trains."""
        self.fits[k].optimizer.state.clear()

    def _import(self) -> None:
        """A resumed member's state (its checkpoint restored it into its own optimizer) into the stacked rows."""
        for k, fit in enumerate(self.fits):
            opt, params = fit.optimizer, dict(fit.model.named_parameters())
            for names_of in self.names_by_group:
                for name in names_of:
                    state = opt.state.get(params[name])
                    if not state:
                        continue
                    a, b = self.stacked.spans[name]
                    self.exp_avg[k, a:b] = state["exp_avg"].reshape(-1)
                    self.exp_avg_sq[k, a:b] = state["exp_avg_sq"].reshape(-1)
                    self.steps[k] = float(state["step"])
            self.release(k)


def scheduled_lr(fit: Fit, step: int, group: dict[str, Any]) -> float:
    """The schedule's lr (before `lr_scale`) of `group` at optimizer step `step`: train_epoch's rule, on the host."""
    tc = fit.tc
    return warmup_cosine(step, total_steps=fit.steps_per_epoch * tc.epochs,
                         warmup_steps=round(tc.warmup_epochs * fit.steps_per_epoch) * group.get("warmup", True),
                         lr=tc.lr, warmup_lr=tc.warmup_lr, min_lr=tc.min_lr)


def device_lrs(t: dict[str, torch.Tensor]) -> torch.Tensor:
    """(K, G): each member's lr for each param group at its step `t["steps"]` (warmup_cosine, vectorised: linear
    warmup from warmup_lr, then cosine to min_lr), times the group's lr_scale; in the schedule's dtype."""
    base, warm_lr, floor = t["base_lr"][:, None], t["warmup_lr"][:, None], t["min_lr"][:, None]
    step = t["steps"].to(base.dtype)[:, None]
    warmup = t["warmup_steps"][:, None] * t["group_warmup"][None, :]  # a group tagged warmup=False has none
    total = t["total_steps"][:, None]
    rising = warm_lr + (base - warm_lr) * step / warmup.clamp(min=1.0)
    progress = ((step - warmup) / (total - warmup).clamp(min=1.0)).clamp(max=1.0)
    cosine = floor + 0.5 * (base - floor) * (1.0 + torch.cos(math.pi * progress))
    return torch.where(step < warmup, rising, cosine) * t["group_scale"][None, :]


def adamw_step(flat: torch.Tensor, grad: torch.Tensor, alive: torch.Tensor, t: dict[str, torch.Tensor],
               beta1: float, beta2: float | None, eps: float) -> None:
    """torch's AdamW (decoupled decay, bias-corrected moments) on every member's row at once; rows where `alive` is
    False keep their parameters, moments and step count. `beta2` None: each member's own, `t["beta2"]` (K, 1).
    No host sync: written for torch.compile and CUDA graphs."""
    lr = device_lrs(t)                                   # at the step count before this step, as the loop sets it
    t["steps"].add_(alive.to(t["steps"].dtype))
    n = t["steps"].to(lr.dtype)[:, None]
    bias1 = 1.0 - beta1 ** n
    b2 = t["beta2"] if beta2 is None else beta2
    bias2_sqrt = torch.sqrt(1.0 - b2 ** n)
    step_size = (lr / bias1).to(flat.dtype).index_select(1, t["col_group"])           # (K, P)
    decay = (1.0 - lr * t["group_decay"]).to(flat.dtype).index_select(1, t["col_group"])
    m = t["exp_avg"].lerp(grad, 1.0 - beta1)
    if beta2 is None:  # torch's value * grad * grad, with a (K, 1) value in the param dtype as torch casts its scalar
        v = torch.addcmul(t["exp_avg_sq"] * b2.to(flat.dtype), (1.0 - b2).to(flat.dtype) * grad, grad)
    else:
        v = torch.addcmul(t["exp_avg_sq"] * beta2, grad, grad, value=1.0 - beta2)  # torch's order, so its rounding
    denom = v.sqrt() / bias2_sqrt.to(flat.dtype) + eps
    updated = flat * decay - step_size * (m / denom)
    keep = alive[:, None]
    t["exp_avg"].copy_(torch.where(keep, m, t["exp_avg"]))
    t["exp_avg_sq"].copy_(torch.where(keep, v, t["exp_avg_sq"]))
    flat.copy_(torch.where(keep, updated, flat))
