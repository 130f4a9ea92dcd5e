"""Gated attention (Qiu et al. 2025, Qwen, arXiv 2505.06708; in Qwen3-Next): a sigmoid gate on the attention output,
after scaled dot-product attention and before the output projection (the paper's G1, its best position).

The official code (qiuzh20/gated_attention, modeling_qwen3.py `Qwen3Attention.forward`,
`elementwise_attn_output_gate`): q_proj grows by H·d_h rows, split off as `gate_score`, and

    out = o_proj(SDPA(q, k, v) ⊙ σ(gate_score)),   gate_score = X W_θ (+ b when qkv has a bias)

elementwise (one gate per channel of each head: head-specific and query-dependent), X the attention's input (after
its pre-norm). timm's Attention builds exactly this with `gated=True`: `gate = Linear(C, H·d_h, bias=qkv_bias)`
applied to the same input, σ(gate) multiplying the heads' output before `proj`. W_θ starts as q's rows do (the
official `_init_weights`: normal, the init std of every Linear; here timm's trunc-normal 0.02) and its bias at 0, so
at init each gate is σ(≈0) ≈ 0.5. The headwise variant (one gate per head) is not registered.

A modifier: it adds `{"gated": True}` to every block's attention (`attn_kwargs`), so it combines with any norm, gate,
placement or family whose attention is timm's (or normbench/layers/attention.py's); alone it brings layernorm.
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

from timm.models.vision_transformer import Attention

from normbench.layers.registry import register_layer


@register_layer("gated_attn", kind="modifier", partner="layernorm", attn_kwargs={"gated": True},
                formula="proj(SDPA(q, k, v) ⊙ σ(x W_θ + b)), elementwise per head channel, x the attention's input; "
                        "W_θ as q's init, b = 0 (σ ≈ 0.5 at init)",
                source="Qiu et al. 2025, Gated Attention for Large Language Models: Non-linearity, Sparsity, and "
                       "Attention-Sink-Free (arXiv 2505.06708), G1 elementwise; qiuzh20/gated_attention "
                       "modeling_qwen3.py Qwen3Attention (elementwise_attn_output_gate); timm Attention(gated=True)")
class GatedAttention(Attention):
    """timm's Attention with its elementwise output gate on: the attention `gated_attn` gives every block."""

    def __init__(self, dim: int, num_heads: int = 8, **kwargs) -> None:
        super().__init__(dim, num_heads=num_heads, **{**kwargs, "gated": True})
