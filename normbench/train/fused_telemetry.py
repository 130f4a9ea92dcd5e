"""Per-block telemetry of a fused group (train/fused.py): each member's records as its cell alone records them.

A cell alone observes a step through forward hooks (train/telemetry.py `BlockTelemetry`) whose tensors it keeps;
under `vmap` a kept tensor would escape its transform. So on an observed step the vmapped function builds its own
recorder, runs the member's forward under its hooks and returns the forward quantities (stream and branch RMS, the
stream's max, attention entropy and largest logit, mHC's mixing error) as outputs, which vmap hands back as (K, ...)
tensors: every quantity of telemetry.py, member by member. The gradient norms (before clipping) and update ratios come
from the stacked gradients and weights, per member and block. The (K, blocks, quantities) tensor of each observed
step stays on the device until `flush`, which the group calls where it syncs anyway (an epoch's end, a checkpoint)
and which hands each member's rows to its own `BlockTelemetry`: its checkpoint and result hold them as alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from normbench.train.stacked import Stacked
from normbench.train.telemetry import QUANTITIES, BlockTelemetry

Member = Any  # train/fused.py's Member


def observed_loss(base: nn.Module, member_loss: Callable[..., torch.Tensor]) -> Callable[..., Any]:
    """`member_loss(params, buffers, x, y)` under a recorder's hooks: returns (loss, per-block forward quantities)
    for vmap to stack per member."""
    def observed(params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor], x: torch.Tensor,
                 y: torch.Tensor) -> tuple[torch.Tensor, list[dict[str, torch.Tensor]]]:
        recorder = BlockTelemetry(base)  # made inside the transform: what its hooks keep never leaves it
        with recorder.observe():
            loss = member_loss(params, buffers, x, y)
        return loss, recorder.forward_values()
    return observed


class FusedTelemetry:
    """The group's observed steps, per member; `blocks` the number of blocks of the members' model."""

    def __init__(self, stacked: Stacked, blocks: int) -> None:
        self.stacked, self.k = stacked, stacked.k
        self.blocks = [[name for name in stacked.params if name.startswith(f"blocks.{i}.")] for i in range(blocks)]
        self._grad_norms: torch.Tensor | None = None
        self._before: list[list[torch.Tensor]] = []
        self._queued: list[tuple[int, torch.Tensor]] = []

    @torch.no_grad()
    def before_update(self) -> None:
        """After the backward, before clipping and the step: each member's gradient norm per block, weights kept."""
        grads = self.stacked.grads
        dev = self.stacked.flat.device
        self._grad_norms = torch.stack([_norms([grads[n] for n in names if n in grads], self.k, dev)
                                        for names in self.blocks], dim=1)
        self._before = [[self.stacked.params[n].detach().clone() for n in names if self._weight(n)]
                        for names in self.blocks]

    @torch.no_grad()
    def after_update(self, step: int, forward: Sequence[dict[str, torch.Tensor]]) -> None:
        """After the step and the after-step hooks: the update ratios; queue the step's (K, blocks, Q) tensor.
        `forward`: vmap's per-block forward quantities, each (K,)."""
        assert self._grad_norms is not None, "before_update first"
        rows = []
        for i, (names, before) in enumerate(zip(self.blocks, self._before, strict=True)):
            values = {q: v.float() for q, v in forward[i].items()}
            values["attn_ratio"] = values["attn_rms"] / values["stream_rms"]
            values["mlp_ratio"] = values["mlp_rms"] / values["stream_rms"]
            values["grad_norm"] = self._grad_norms[:, i]
            if before:
                after = [self.stacked.params[n].detach() for n in names if self._weight(n)]
                dev = self.stacked.flat.device
                values["update_ratio"] = (_norms([a - b for a, b in zip(after, before, strict=True)], self.k, dev)
                                          / _norms(before, self.k, dev))
            else:
                values["update_ratio"] = torch.full((self.k,), float("nan"), device=self.stacked.flat.device)
            rows.append(torch.stack([values[q].float().expand(self.k) for q in QUANTITIES], dim=1))  # (K, Q)
        self._queued.append((step, torch.stack(rows, dim=1)))  # (K, blocks, Q)
        self._grad_norms, self._before = None, []

    def flush(self, members: Sequence[Member]) -> None:
        """The queued steps to the host (one transfer), each member's rows into its own BlockTelemetry."""
        if not self._queued:
            return
        values = torch.stack([t for _, t in self._queued]).cpu().tolist()  # (steps, K, blocks, Q)
        for k, m in enumerate(members):
            telemetry = m.fit.telemetry
            telemetry.load_samples(telemetry.samples() + [(step, v[k]) for (step, _), v in
                                                          zip(self._queued, values, strict=True)])
        self._queued.clear()

    def _weight(self, name: str) -> bool:
        return self.stacked.params[name].ndim >= 3  # a member's matrix (ndim >= 2), telemetry.py's weights


def _norms(tensors: list[torch.Tensor], k: int, dev: torch.device) -> torch.Tensor:
    """Per member, the L2 norm of the concatenation of `tensors` ((K, ...) each), in float32: (K,)."""
    if not tensors:
        return torch.full((k,), float("nan"), device=dev)
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(t.reshape(k, -1).float(), dim=1)
                                                 for t in tensors]), dim=0)
