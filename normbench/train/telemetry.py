"""Per-block stability telemetry: what each block's stream, branches, gradients and updates look like in training.

Observes; never changes the block's equation. Forward hooks are attached only for the optimizer steps being
observed (every `train.telemetry_every` steps) and removed after, so other steps run the model untouched. Every
quantity stays a device tensor until `collect`, which the training loop calls at its existing end-of-epoch sync:
no host sync is added.

Quantities, per block and observed step (the forward ones averaged over the step's micro-batches):

    stream_rms    RMS of the residual stream entering the block
    stream_max    max |x| of that stream (the max over micro-batches)
    attn_rms      RMS of the attention branch's output after its gate (before drop-path)
    attn_ratio    attn_rms / stream_rms: 0 for a block that starts as the identity (ReZero, Fixup)
    mlp_rms       RMS of the MLP branch's output after its gate
    mlp_ratio     mlp_rms / stream_rms
    attn_entropy  entropy of the attention rows in nats, mean over heads and queries (ln N for uniform attention)
    attn_logit_max  the largest attention logit q·k/√d_h, after QK-norm where present: max over batch, heads,
                  queries and keys (and micro-batches); what QK-norm exists to bound (ViT-22B's logit growth)
    grad_norm     L2 norm of the gradient of all the block's parameters, before clipping
    update_ratio  ||W_after - W_before|| / ||W_before|| over the block's weight matrices (ndim >= 2), one step
    mix_ds_error  how far the block's residual mixing matrices are from doubly stochastic: max |row sum - 1|,
                  |column sum - 1| over both sublayers' matrices, every token (and micro-batch); mHC's H_res, the
                  output of each module marked `residual_mixing` (NaN for a block without one)

Block families (normbench/layers/registry.py `Family`). A block of n streams carries (B, N, n, C): `stream_rms` and
`stream_max` are taken over all n streams, so n equal copies of x read as RMS(x) (a hyper-connection model at step 0
reads as the pre-norm model it equals); the branch RMS is that of the sublayer's output y before the depth connection
hands it to the streams (β_i y, H_post,i y), so `attn_ratio` is what a stream with β = 1 receives relative to the
stream. nGPT's gate slots hold its eigen learning rates: its branch output is the step α ⊙ (Norm(F(h)) - h) the
block takes on the sphere, and the ratio that step over the (unit) hidden state's RMS.

Under torch.compile the observed steps run the eager module (the caller passes it); hooks are never part of a
compiled graph (dynamo's `skip_nnmodule_hook_guards`), so attaching and removing them does not recompile.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from normbench.layers.mhc import doubly_stochastic_error

QUANTITIES = ("stream_rms", "stream_max", "attn_rms", "attn_ratio", "mlp_rms", "mlp_ratio", "attn_entropy",
              "attn_logit_max", "grad_norm", "update_ratio", "mix_ds_error")
_FORWARD = ("stream_rms", "stream_max", "attn_rms", "mlp_rms", "attn_entropy", "attn_logit_max",
            "mix_ds_error")  # from the hooks
_MAXIMA = ("stream_max", "attn_logit_max", "mix_ds_error")  # reduced by max over micro-batches, not averaged
MAX_SAMPLES = 12  # observed steps kept in a cell's result (evenly spaced, first and last kept): bounds its size


def rms(x: torch.Tensor) -> torch.Tensor:
    """Root mean square of all entries, in float32, as a 0-d device tensor."""
    return torch.linalg.vector_norm(x.detach(), dtype=torch.float32) / math.sqrt(max(1, x.numel()))


def attention_logits(attn: nn.Module, qkv: torch.Tensor) -> torch.Tensor:
    """The attention logits q·kᵀ/√d_h of timm's `Attention`, rebuilt from its qkv Linear's output.

    timm runs fused SDPA, which never materializes them; this recomputes them as timm's non-fused path does (q_norm,
    k_norm, scale), without mask, on the observed steps only.

    Args:
        attn: the timm Attention module (num_heads, head_dim, scale, q_norm, k_norm).
        qkv: its qkv projection's output, (B, N, 3 * num_heads * head_dim).
    Returns:
        (B, H, N, N) float32.
    """
    B, N, _ = qkv.shape
    q, k, _ = qkv.detach().float().reshape(B, N, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
    return (attn.q_norm(q) * attn.scale) @ attn.k_norm(k).transpose(-2, -1)


def attention_entropy(attn: nn.Module, qkv: torch.Tensor) -> torch.Tensor:
    """Mean entropy (nats) of the attention rows (softmax of `attention_logits`, no dropout), as a 0-d float32
    tensor: mean over batch, heads and queries of -sum_k p log p."""
    return _entropy(attention_logits(attn, qkv))


def _entropy(logits: torch.Tensor) -> torch.Tensor:
    logp = logits.log_softmax(dim=-1)
    return -(logp.exp() * logp).sum(dim=-1).mean()


class BlockTelemetry:
    """Records the per-block quantities of `model.blocks` on the steps it is told to observe.

    Usage, per observed optimizer step (see normbench/train/loop.py):

        with telemetry.observe():        # forward + backward of each micro-batch; hooks live only inside
            loss = loss_fn(eager_model(x), y); loss.backward()
        telemetry.before_update()        # gradient norms (before clipping), weights before the step
        optimizer.step()
        telemetry.after_update(step)     # update ratios; the step's (blocks, quantities) tensor is queued
        ...
        telemetry.collect()              # at a sync the loop already makes: one transfer for the queued steps
        telemetry.records()              # at the end: [{"step", "block", quantity: value, ...}], bounded

    Args:
        model: a module with `blocks` (a sequence of blocks with `attn`, `ls1`, `ls2`; NormbenchViT).
        max_samples: observed steps kept by `records` (default MAX_SAMPLES).
    """

    def __init__(self, model: nn.Module, max_samples: int = MAX_SAMPLES) -> None:
        self.blocks = list(model.blocks)  # type: ignore[attr-defined]
        self.max_samples = max_samples
        self._handles: list[RemovableHandle] = []
        self._sums: list[dict[str, torch.Tensor]] = []
        self._calls: list[dict[str, int]] = []
        self._branch = [0] * len(self.blocks)  # which gate call of the block comes next: 0 attention, 1 MLP
        self._grad_norms: list[torch.Tensor] = []
        self._before: list[list[torch.Tensor]] = []
        self._queued: list[tuple[int, torch.Tensor]] = []  # (step, (blocks, quantities)) still on the device
        self._samples: list[tuple[int, list[list[float]]]] = []  # on the host

    @property
    def attached(self) -> bool:
        return bool(self._handles)

    @contextmanager
    def observe(self) -> Iterator[None]:
        """Hooks on every block for the forward passes inside; removed on exit, even on error."""
        if not self._sums:  # the first micro-batch of the observed step
            self._sums = [{} for _ in self.blocks]
            self._calls = [{} for _ in self.blocks]
        for i, block in enumerate(self.blocks):
            self._handles.append(block.register_forward_pre_hook(self._stream_hook(i)))
            # a gate shared by both branches (one module as ls1 and ls2) is hooked once and called twice
            for gate in dict.fromkeys((block.ls1, block.ls2)):
                self._handles.append(gate.register_forward_hook(self._gate_hook(i)))
            attn = block.attn
            if hasattr(attn, "qkv") and hasattr(attn, "num_heads"):
                self._handles.append(attn.qkv.register_forward_hook(self._qkv_hook(i, attn)))
            for mixing in (m for m in block.modules() if getattr(m, "residual_mixing", False)):
                self._handles.append(mixing.register_forward_hook(self._mixing_hook(i)))
        try:
            yield
        finally:
            for handle in self._handles:
                handle.remove()
            self._handles.clear()

    def _add(self, i: int, name: str, value: torch.Tensor, reduce: str = "sum") -> None:
        sums, calls = self._sums[i], self._calls[i]
        if name not in sums:
            sums[name] = value
        else:
            sums[name] = torch.maximum(sums[name], value) if reduce == "max" else sums[name] + value
        calls[name] = calls.get(name, 0) + 1

    def _stream_hook(self, i: int):
        def hook(module: nn.Module, args: tuple[Any, ...]) -> None:
            x = args[0]
            self._branch[i] = 0
            self._add(i, "stream_rms", rms(x))
            self._add(i, "stream_max", x.detach().abs().amax().float(), reduce="max")
        return hook

    def _gate_hook(self, i: int):
        def hook(module: nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> None:
            branch = self._branch[i]
            self._branch[i] = branch + 1
            if branch < 2:
                self._add(i, ("attn_rms", "mlp_rms")[branch], rms(output))
        return hook

    def _qkv_hook(self, i: int, attn: nn.Module):
        def hook(module: nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> None:
            # in float32 even under bf16 autocast: the max logit is read to a few digits
            with torch.no_grad(), torch.autocast(output.device.type, enabled=False):
                logits = attention_logits(attn, output)  # one (B, H, N, N) tensor for both quantities
                self._add(i, "attn_entropy", _entropy(logits))
                self._add(i, "attn_logit_max", logits.amax(), reduce="max")
        return hook

    def _mixing_hook(self, i: int):
        def hook(module: nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> None:
            self._add(i, "mix_ds_error", doubly_stochastic_error(output), reduce="max")
        return hook

    @torch.no_grad()
    def before_update(self) -> None:
        """After the step's backward, before clipping and the optimizer: gradient norms and a copy of the weights."""
        self._grad_norms, self._before = [], []
        for block in self.blocks:
            grads = [p.grad for p in block.parameters() if p.grad is not None]
            self._grad_norms.append(_norm(grads) if grads else _nan(block))
            self._before.append([p.detach().clone() for p in _weights(block)])

    def forward_values(self) -> list[dict[str, torch.Tensor]]:
        """Per block, the forward quantities of the micro-batches observed so far (NaN where a block has none).
        A fused group (train/fused_telemetry.py) returns them through vmap's outputs, one set per member."""
        out = []
        for i, block in enumerate(self.blocks):
            sums, calls = self._sums[i] if self._sums else {}, self._calls[i] if self._calls else {}
            nan = _nan(block)
            forward = {q: sums[q] / calls[q] if q not in _MAXIMA else sums[q] for q in _FORWARD if q in sums}
            out.append({q: forward.get(q, nan) for q in _FORWARD})
        return out

    @torch.no_grad()
    def after_update(self, step: int) -> None:
        """After the optimizer step: update ratios, then queue the step's (blocks, quantities) tensor."""
        rows = []
        for i, (block, forward) in enumerate(zip(self.blocks, self.forward_values(), strict=True)):
            nan = _nan(block)
            values = dict(forward)
            values["attn_ratio"] = values["attn_rms"] / values["stream_rms"]
            values["mlp_ratio"] = values["mlp_rms"] / values["stream_rms"]
            values["grad_norm"] = self._grad_norms[i]
            before = self._before[i]
            if before:
                after = [p.detach() for p in _weights(block)]
                values["update_ratio"] = _norm(torch._foreach_sub(after, before)) / _norm(before)
            else:
                values["update_ratio"] = nan
            rows.append(torch.stack([values[q].float() for q in QUANTITIES]))
        self._queued.append((step, torch.stack(rows)))
        self._sums, self._calls, self._grad_norms, self._before = [], [], [], []

    def collect(self) -> None:
        """Move the queued steps to the host: one transfer. Call where the loop already syncs."""
        if not self._queued:
            return
        values = torch.stack([t for _, t in self._queued]).cpu().tolist()
        self._samples += [(step, v) for (step, _), v in zip(self._queued, values, strict=True)]
        self._queued.clear()

    def samples(self) -> list[tuple[int, list[list[float]]]]:
        """The observed steps collected so far, (step, per-block values): what a checkpoint keeps."""
        self.collect()
        return list(self._samples)

    def load_samples(self, samples: list[tuple[int, list[list[float]]]]) -> None:
        """Continue from a checkpoint's `samples()`."""
        self._samples = [(int(step), values) for step, values in samples]

    def records(self) -> list[dict[str, Any]]:
        """At most `max_samples` observed steps, evenly spaced: one record per (step, block), every quantity a key
        (4 significant digits; non-finite values as None, which JSON and the ledger keep)."""
        self.collect()
        return to_records(thin(self._samples, self.max_samples))


def thin(samples: list[Any], keep: int) -> list[Any]:
    """`keep` evenly spaced items of `samples`, the first and the last among them (all of them if fewer)."""
    if len(samples) <= keep:
        return list(samples)
    if keep <= 1:
        return samples[-keep:] if keep else []
    last = len(samples) - 1
    return [samples[round(j * last / (keep - 1))] for j in range(keep)]


def to_records(samples: list[tuple[int, list[list[float]]]]) -> list[dict[str, Any]]:
    return [{"step": step, "block": b, **{q: _compact(v) for q, v in zip(QUANTITIES, row, strict=True)}}
            for step, blocks in samples for b, row in enumerate(blocks)]


def _compact(value: float) -> float | None:
    return float(f"{value:.4g}") if math.isfinite(value) else None


def _nan(block: nn.Module) -> torch.Tensor:
    """A NaN on the block's device (created there: a host tensor copied over would sync)."""
    return torch.full((), math.nan, device=next(block.parameters()).device)


def _weights(block: nn.Module) -> list[torch.Tensor]:
    return [p for p in block.parameters() if p.ndim >= 2]


def _norm(tensors: list[torch.Tensor]) -> torch.Tensor:
    """L2 norm of the concatenation, in float32, without a host sync."""
    return torch.linalg.vector_norm(torch.stack([n.float() for n in torch._foreach_norm(tensors)]))
