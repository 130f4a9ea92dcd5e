"""normbench: which normalization or residual-scaling layer lets a deep Vision Transformer train best?

`import normbench` is cheap (no torch) so that `normbench --help` stays fast. The layer API loads on first use,
and the `normbench_vit` model is registered with timm as soon as both normbench and timm are imported, in
either order (see `_timm_hook`).
"""

from __future__ import annotations

from typing import Any

from normbench.model import timm_hook as _timm_hook

__version__ = "0.1.0"
__all__ = ["get_layer", "list_layers", "register_layer", "resolve_layer", "__version__"]

_timm_hook.install()


def __getattr__(name: str) -> Any:  # PEP 562: import torch only when the layer API is used
    if name in ("get_layer", "list_layers", "register_layer", "resolve_layer"):
        from normbench import layers

        return getattr(layers, name)
    raise AttributeError(f"module 'normbench' has no attribute {name!r}")
