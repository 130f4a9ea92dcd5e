"""QK-norm (ViT-22B; Wortsman et al. 2023): a norm over each head's q and k (head_dim features) before q·kᵀ.

A modifier: it fills no slot, it combines with any entry (`layernorm+qk_norm`, `layerscale+qk_norm`). The block
builds it into timm's Attention through timm's own arguments (`qk_norm=True, norm_layer=...`, blocks.py), so the
fused and the explicit attention paths both see it. Which norm q and k get (LayerPlan.qk_norm_layer):

    layernorm+qk_norm, layerscale+qk_norm, rezero+qk_norm, tfixup+qk_norm   LayerNorm (eps 1e-6)
    rmsnorm+qk_norm                                                          RMSNorm
    dyt+qk_norm, derf+qk_norm                                                DyT, Derf (the entry's own squashing)
    learnable_scaler(_ones)+qk_norm, fixup+qk_norm, none+qk_norm             LayerNorm: those slots do not normalize

i.e. the entry's own norm class when it normalizes (as timm's ViT passes its norm_layer to Attention), LayerNorm
otherwise; with the suite's `norm_kwargs` when it is the entry's own.
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

from normbench.layers.norms import LayerNorm
from normbench.layers.registry import register_layer


@register_layer("qk_norm", kind="modifier", qk_norm=True,
                formula="softmax(norm(q) norm(k)ᵀ / √d_h) v; norm over each head's d_h features of q and k: the "
                        "entry's norm if it normalizes, else LayerNorm",
                source="Dehghani et al. 2023, Scaling Vision Transformers to 22 Billion Parameters, Sec. 2; "
                       "Wortsman et al. 2023, Small-scale proxies for large-scale Transformer training instabilities; "
                       "timm/layers/attention.py Attention(qk_norm=True, norm_layer=...), per head (OLMo 2 normalizes "
                       "the whole q and k projections instead)")
class QKNorm(LayerNorm):
    """LayerNorm over one head's d_h features: what q and k get where the combination's norm does not normalize."""
