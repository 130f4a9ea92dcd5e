"""K models' parameters as stacked (K, ...) tensors, each model's own tensors aliased to their slice.

The stacked tensors are the autograd leaves of a fused step (`functional_call` under `vmap`, train/fused.py); each
member's `nn.Parameter` keeps its identity but its storage is its slice, so the member's optimizer, hooks and
checkpoints see and change exactly its part. Gradients live in one stacked buffer per parameter that autograd
accumulates into in place, and each member's `.grad` is a view of its slice: no copy, ever, between the two views.
"""

from __future__ import annotations

import torch
from torch import nn


class Stacked:
    """The stacked parameters (`params`), buffers (`buffers`) and gradients of `models` (same architecture)."""

    def __init__(self, models: list[nn.Module]) -> None:
        self.k = len(models)
        self.params: dict[str, torch.Tensor] = {}
        self.buffers: dict[str, torch.Tensor] = {}
        self.grads: dict[str, torch.Tensor] = {}
        named = [dict(m.named_parameters()) for m in models]
        for name, p in models[0].named_parameters():
            stacked = torch.stack([n[name].detach() for n in named])
            if p.requires_grad:
                stacked.requires_grad_(True)
                stacked.grad = self.grads[name] = torch.zeros_like(stacked)
            for k, n in enumerate(named):
                n[name].data = stacked.data[k]  # the member's parameter, same object, now its slice's storage
                if p.requires_grad:
                    n[name].grad = self.grads[name][k]
            self.params[name] = stacked
        named_buffers = [dict(m.named_buffers()) for m in models]
        for name, _ in models[0].named_buffers():
            stacked = torch.stack([n[name] for n in named_buffers])
            for k, m in enumerate(models):
                module_name, _, attr = name.rpartition(".")
                owner = m.get_submodule(module_name) if module_name else m
                setattr(owner, attr, stacked[k])  # re-registered in place: the member's buffer is its slice
            self.buffers[name] = stacked

    def clip_(self, max_norms: list[float]) -> torch.Tensor:
        """Clip each member's gradient by its own global norm (`nn.utils.clip_grad_norm_`'s rule, per member: scale
        by min(1, max_norm / (norm + 1e-6))); returns the (K,) norms before clipping."""
        grads = list(self.grads.values())
        if not grads:
            return torch.zeros(self.k)
        per_tensor = torch.stack([torch.linalg.vector_norm(g.reshape(self.k, -1), dim=1) for g in grads])
        norms = torch.linalg.vector_norm(per_tensor, dim=0)
        limit = torch.tensor(max_norms, dtype=norms.dtype, device=norms.device)
        coef = (limit / (norms + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef.view(-1, *([1] * (g.ndim - 1))).to(g.dtype))
        return norms

    def zero_grad(self) -> None:
        if self.grads:
            torch._foreach_zero_(list(self.grads.values()))
