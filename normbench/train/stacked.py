"""K models' parameters as stacked (K, ...) tensors, each model's own tensors aliased to their slice.

The trainable parameters of all members live in one flat (K, P) tensor (`flat`), their gradients in another
(`flat_grad`): member k's row holds every trainable parameter of its model, in `named_parameters` order. Each stacked
parameter (`params[name]`, (K, ...)) is a leaf that views its columns of `flat`, and its `.grad` views the same
columns of `flat_grad`, so autograd accumulates a fused step's gradients (`functional_call` under `vmap`,
train/fused.py) into the flat buffer in place, and one kernel over the (K, P) rows clips, steps or zeroes every
member at once (train/stacked_adamw.py). Each member's `nn.Parameter` keeps its identity but its storage is its
slice, and its `.grad` a view of its gradient slice: the member's optimizer, hooks and checkpoints see and change
exactly its part, with no copy, ever, between the views. Buffers and frozen parameters are stacked one by one.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
from torch import nn

# a stacked parameter views columns of the flat rows, so its leading stride is P: autograd warns once that such a
# gradient "may impair performance" (its layout contract); the accumulation itself is in place and exact
warnings.filterwarnings("ignore", message="grad and param do not obey the gradient layout contract")


class Stacked:
    """The stacked parameters (`params`), buffers (`buffers`) and gradients (`grads`) of `models` (same
    architecture); the trainable ones as views of the flat (K, P) `flat` and `flat_grad`, `spans[name]` their
    columns."""

    def __init__(self, models: Sequence[nn.Module]) -> None:
        self.k = len(models)
        self.params: dict[str, torch.Tensor] = {}
        self.buffers: dict[str, torch.Tensor] = {}
        self.grads: dict[str, torch.Tensor] = {}
        self.spans: dict[str, tuple[int, int]] = {}
        named = [dict(m.named_parameters()) for m in models]
        trainable = [(name, p) for name, p in models[0].named_parameters() if p.requires_grad]
        dtypes = {p.dtype for _, p in trainable}
        if len(dtypes) > 1:
            raise ValueError(f"trainable parameters of several dtypes ({', '.join(map(str, dtypes))}) cannot share "
                             "one flat buffer")
        size = sum(p.numel() for _, p in trainable)
        dtype = trainable[0][1].dtype if trainable else torch.float32
        device = trainable[0][1].device if trainable else torch.device("cpu")
        self.flat = torch.empty(self.k, size, dtype=dtype, device=device)
        self.flat_grad = torch.zeros_like(self.flat)
        start = 0
        for name, p in models[0].named_parameters():
            if not p.requires_grad:  # frozen: stacked on its own, no gradient
                stacked = torch.stack([n[name].detach() for n in named])
            else:
                stop = start + p.numel()
                self.spans[name] = (start, stop)
                columns = self.flat[:, start:stop]
                columns.copy_(torch.stack([n[name].detach().reshape(-1) for n in named]))
                stacked = columns.view(self.k, *p.shape).detach().requires_grad_(True)  # a leaf viewing the columns
                stacked.grad = self.grads[name] = self.flat_grad[:, start:stop].view(self.k, *p.shape)
                start = stop
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

    def clip_(self, max_norms: Sequence[float] | torch.Tensor) -> torch.Tensor:
        """Clip each member's gradient by its own global norm (`nn.utils.clip_grad_norm_`'s rule, per member: scale
        by min(1, max_norm / (norm + 1e-6))); returns the (K,) norms before clipping. Two kernels over the flat rows
        (the norms, the scaling); `max_norms` a (K,) tensor on the device (the fused step makes it once: a list is
        copied to the device at every call, a sync on a GPU)."""
        limits = max_norms if isinstance(max_norms, torch.Tensor) else torch.tensor(
            list(max_norms), dtype=self.flat.dtype, device=self.flat.device)
        return clip_rows_(self.flat_grad, limits)

    def zero_grad(self) -> None:
        self.flat_grad.zero_()

    def views(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """`flat`'s columns as the stacked parameters (K, ...), by name: what a compiled function, which gets the flat
        rows alone, rebuilds the parameters from."""
        return {name: flat[:, a:b].view(self.k, *self.params[name].shape[1:]) for name, (a, b) in self.spans.items()}


def clip_rows_(grad: torch.Tensor, limits: torch.Tensor) -> torch.Tensor:
    """Scale each row of `grad` (K, P) by min(1, limit / (its norm + 1e-6)), in place; returns the (K,) norms."""
    norms = torch.linalg.vector_norm(grad, dim=1)
    grad.mul_((limits / (norms + 1e-6)).clamp(max=1.0).unsqueeze(1).to(grad.dtype))
    return norms
