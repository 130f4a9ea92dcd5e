"""Muon in a fused group (train/fused.py): every member's hidden matrices stepped by one batched Newton-Schulz.

Muon's step on a matrix is a chain of small matmuls (5 Newton-Schulz iterations of three), and K members stepped one
by one launch K times as many: on a GPU, what fusing saves. Here each member's momentum buffer of a hidden matrix is
its slice of one (K, m, n) tensor, as its parameter is of the stacked one (train/stacked.py), and one step sends the
Nesterov updates of every member and every matrix of a shape through timm's `zeropower_via_newtonschulz` at once, a
(K·L, m, n) batch, each member at its own lr and weight decay (a fused qkv as its three (C, C) blocks, as
train/muon.py steps it).
The arithmetic per member is the single cell's (timm's `_single_tensor_muon`: decay, momentum, Nesterov,
Newton-Schulz, scale, update), so each member trains as it does alone (tests/train/test_stacked_muon.py); the
members' AdamW part steps through their own optimizers as before, with the hidden matrices' gradients held back.
`adamuon` is not fused (train/fusion_rules.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from timm.optim.muon import get_lr_scale, resolve_ns_coefficients, zeropower_via_newtonschulz

from normbench.train.stacked import Stacked

Fit = Any  # train/loop.py's Fit (not imported: the loop is imported by fused.py, which imports this module)


class StackedMuon:
    """The Muon part of K members' optimizers (timm `Muon`, train/muon.py), stepped as one."""

    def __init__(self, fits: Sequence[Fit], stacked: Stacked) -> None:
        self.fits, self.stacked, self.k = list(fits), stacked, len(fits)
        first = dict(fits[0].model.named_parameters())
        ids = {id(p): name for name, p in first.items()}
        self.names = [ids[id(p)] for g in fits[0].optimizer.param_groups if g.get("use_muon") for p in g["params"]]
        # each member's parameter and its group (whose lr the schedule sets before every step), per matrix
        self.params: list[dict[str, torch.nn.Parameter]] = [dict(f.model.named_parameters()) for f in fits]
        self.groups: list[dict[str, dict[str, Any]]] = []
        for fit, params in zip(fits, self.params, strict=True):
            group_of = {id(p): g for g in fit.optimizer.param_groups for p in g["params"]}
            self.groups.append({name: group_of[id(params[name])] for name in self.names})
        # the row blocks each matrix is orthogonalised in (train/muon.py `BlockwiseMuon`: 3 for a fused qkv)
        self.blocks = {name: group.get("muon_blocks", 1) for name, group in self.groups[0].items()}
        self.momentum: dict[str, torch.Tensor] = {}
        for name in self.names:  # a member resumed from a checkpoint brings its buffer; a fresh one starts at 0
            buffers = [f.optimizer.state[p[name]].get("momentum_buffer") for f, p in zip(fits, self.params,
                                                                                         strict=True)]
            stacked_buffer = torch.stack([torch.zeros_like(p[name]) if b is None else b
                                          for b, p in zip(buffers, self.params, strict=True)])
            for k, fit in enumerate(fits):
                state = fit.optimizer.state[self.params[k][name]]
                state["momentum_buffer"], state["use_muon"] = stacked_buffer[k], True
            self.momentum[name] = stacked_buffer

    def step(self, stepping: Sequence[int]) -> None:
        """One Muon step of the hidden matrices of the members `stepping` (the others are left as they are)."""
        if not stepping:
            return
        every = len(stepping) == self.k
        idx = torch.tensor(list(stepping), device=next(iter(self.momentum.values())).device)
        hp = self.groups[stepping[0]][self.names[0]]  # the members share every setting but lr and decay (fusion_rules)
        coefficients = resolve_ns_coefficients(hp["ns_coefficients"], {})
        updates: dict[tuple[int, ...], list[tuple[str, torch.Tensor, torch.Tensor]]] = {}
        for name in self.names:
            param, grad, momentum = self.stacked.params[name], self.stacked.grads[name], self.momentum[name]
            p, g, m = (param.data, grad, momentum) if every else (param.data[idx], grad[idx], momentum[idx])
            decays = [1 - self.groups[k][name]["lr"] * self.groups[k][name]["weight_decay"] for k in stepping]
            p.mul_(torch.tensor(decays, dtype=p.dtype, device=p.device).view(-1, 1, 1))
            m.lerp_(g, 1.0 - hp["momentum"])
            update = g.lerp(m, hp["momentum"]) if hp["nesterov"] else m.clone()
            rows, cols = update.shape[1:]
            update = update.reshape(-1, rows // self.blocks[name], cols)  # (K·b, m/b, n): member-major, block-minor
            updates.setdefault(tuple(update.shape[1:]), []).append((name, update, p))
            if not every:
                momentum[idx] = m
        for shape, batch in updates.items():
            ortho = zeropower_via_newtonschulz(torch.cat([u for _, u, _ in batch]), hp["ns_steps"], coefficients,
                                               eps=hp["eps"], safety_factor=hp["safety_factor"],
                                               scale_eps=hp["scale_eps"])
            scale = get_lr_scale(torch.Size(shape), hp["adjust_lr_fn"]) if hp["adjust_lr_fn"] else 1.0
            for (name, _, p), o in zip(batch, ortho.split([u.shape[0] for _, u, _ in batch]), strict=True):
                alpha = torch.tensor([-self.groups[k][name]["lr"] * scale for k in stepping], dtype=p.dtype,
                                     device=p.device).view(-1, 1, 1)
                p.add_(o.reshape(p.shape) * alpha)
                if not every:
                    self.stacked.params[name].data[idx] = p

    @contextmanager
    def held_back(self, k: int) -> Iterator[None]:
        """Member `k`'s optimizer steps its AdamW part alone: its hidden matrices' gradients are hidden meanwhile
        (timm's Muon skips a parameter without one), then restored as their slices of the stacked gradients."""
        params = self.params[k]
        for name in self.names:
            params[name].grad = None
        try:
            yield
        finally:
            for name in self.names:
                params[name].grad = self.stacked.grads[name][k]
