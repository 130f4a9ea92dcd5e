"""Data sets for the benchmark: `build_data(DataConfig(...), batch_size=..., device=...)` gives the loaders.

The names below load on first use (PEP 562): reading a suite's `dataset:` section (data/config.py) imports no torch,
so `normbench ui` and `sync`, which read recipes but train nothing, start in a second instead of ten on a busy machine.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from normbench.data.build import DATASETS, build_data, split_sizes
    from normbench.data.bundle import DataBundle, Loader
    from normbench.data.config import DataConfig

_WHERE = {"DATASETS": "build", "build_data": "build", "split_sizes": "build", "DataBundle": "bundle",
          "Loader": "bundle", "DataConfig": "config"}
__all__ = ["DATASETS", "DataBundle", "DataConfig", "Loader", "build_data", "split_sizes"]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
