"""Data sets for the benchmark: `build_data(DataConfig(...), batch_size=..., device=...)` gives the loaders."""

from __future__ import annotations

from normbench.data.build import DATASETS, build_data, split_sizes
from normbench.data.bundle import DataBundle, Loader
from normbench.data.config import DataConfig

__all__ = ["DATASETS", "DataBundle", "DataConfig", "Loader", "build_data", "split_sizes"]
