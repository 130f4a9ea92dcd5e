"""The two auxiliary losses of LearnableScaler's training recipe, as opt-in recipe keys (off by default).

Followed from nghiemtuan/LearnableScaler timm/models/vision_transformer.py (the fork's `Attention.compute_extra_loss`
and `Block.compute_feature_decay_loss`) and train.py (`loss = loss_fn(output, target) + feature_decay_loss`):

- `attn_extra_loss` (source: `--attn-extra-loss 0.03 --attn-extra-loss-layers 6`): in each of the first
  `attn_extra_loss_layers` blocks, take every attention row's max probability; over the rows whose max is below 0.5,
  the term is `1 - mean(those maxima)` (0 if there are none); scaled by the coefficient and summed over the blocks.
  It pushes the early blocks towards peaked attention.
- `train_feature_decay` (source: `--train-feature-decay 0.1`): on each block's output (the residual stream), the
  entries whose |x| exceeds 200 contribute `mean(|x| - 200) + max(|x| - 200)` (0 if none); scaled and summed over
  every block.

Both apply in training mode only, as in the source. Differences, both deliberate: the source computes the attention
term only when feature decay is also on (its block takes that path only then); here each key works alone (the source
recipe sets both). And the source selects entries with boolean indexing, which syncs with the host; here the same
values come from masked sums, so the training loop stays free of host syncs.

Observed with forward hooks; the block's forward is unchanged. The attention probabilities are recomputed from the
attention module's input (timm's fused kernel does not return them), at the cost of one extra qkv projection and
softmax in those blocks.
"""

from __future__ import annotations

import torch
from torch import nn

ATTN_MAX_THRESHOLD = 0.5  # `values_max < 0.5` in the source's compute_extra_loss
FEATURE_THRESHOLD = 200.0  # `absolute > 200` in the source's compute_feature_decay_loss


def attn_extra_loss(attn: torch.Tensor) -> torch.Tensor:
    """`1 - mean(row maxima below 0.5)`, 0 if no row's max is below 0.5.

    Args:
        attn: attention probabilities (..., N_queries, N_keys), rows summing to 1.
    Returns:
        a scalar tensor.
    """
    row_max = attn.amax(dim=-1)
    bad = row_max < ATTN_MAX_THRESHOLD
    count = bad.sum()
    mean_bad = (row_max * bad).sum() / count.clamp_min(1)
    return torch.where(count > 0, 1.0 - mean_bad, torch.zeros_like(mean_bad))


def feature_decay_loss(x: torch.Tensor) -> torch.Tensor:
    """`mean(|x| - 200) + max(|x| - 200)` over the entries with |x| > 200; 0 if there are none.

    Args:
        x: any activations, e.g. a block's output (B, N, C).
    Returns:
        a scalar tensor.
    """
    excess = x.abs() - FEATURE_THRESHOLD
    danger = excess > 0
    count = danger.sum()
    mean = (excess * danger).sum() / count.clamp_min(1)
    return torch.where(count > 0, mean + excess.amax(), torch.zeros_like(mean))


def attention_probs(attn: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """timm Attention's probabilities for input `x` (B, N, C) -> (B, heads, N, N), recomputed from its weights."""
    B, N, C = x.shape
    qkv = attn.qkv(x).reshape(B, N, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4)
    q, k, _ = qkv.unbind(0)
    q, k = attn.q_norm(q), attn.k_norm(k)
    return ((q * attn.scale) @ k.transpose(-2, -1)).softmax(dim=-1)


class AuxLosses:
    """Hooks on a NormbenchViT's blocks that accumulate the auxiliary losses of each training forward pass.

    Usage: `aux = AuxLosses(model, ...)`; after each `model(x)` in training, `loss = loss + aux.pop()`.
    """

    def __init__(self, model: nn.Module, *, attn_extra_loss: float = 0.0, attn_extra_loss_layers: int = 6,
                 train_feature_decay: float = 0.0) -> None:
        self._terms: list[torch.Tensor] = []
        self._handles = []
        blocks = model.blocks  # type: ignore[attr-defined]
        if attn_extra_loss > 0:
            for block in list(blocks)[:attn_extra_loss_layers]:
                self._handles.append(block.attn.register_forward_hook(self._attn_hook(attn_extra_loss)))
        if train_feature_decay > 0:
            for block in blocks:
                self._handles.append(block.register_forward_hook(self._feature_hook(train_feature_decay)))

    def _attn_hook(self, coef: float):  # type: ignore[no-untyped-def]
        def hook(module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
            if module.training:
                self._terms.append(coef * attn_extra_loss(attention_probs(module, inputs[0])))
        return hook

    def _feature_hook(self, coef: float):  # type: ignore[no-untyped-def]
        def hook(module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
            if module.training:
                self._terms.append(coef * feature_decay_loss(output))
        return hook

    def pop(self) -> torch.Tensor | float:
        """The sum of the terms gathered since the last call (0.0 if none), and forget them."""
        terms, self._terms = self._terms, []
        return torch.stack(terms).sum() if terms else 0.0

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


def from_config(model: nn.Module, tc) -> AuxLosses | None:  # type: ignore[no-untyped-def]
    """The auxiliary losses a TrainConfig asks for, or None when both are off (the default)."""
    if tc.attn_extra_loss <= 0 and tc.train_feature_decay <= 0:
        return None
    return AuxLosses(model, attn_extra_loss=tc.attn_extra_loss, attn_extra_loss_layers=tc.attn_extra_loss_layers,
                     train_feature_decay=tc.train_feature_decay)
