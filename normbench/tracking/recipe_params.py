"""A synced run's recipe params, as the live run logs them (sweep/cells.py cell_params): every model, train and data
value of the cell, read from the folder's suite.yaml. The data set's true split sizes come from the ledger's result
instead (cell_params loads the data set for them: a sync must not). A folder without a readable suite.yaml gives
the axes alone.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import yaml

from normbench.contracts.names import OutputFolder


class RecipeParams:
    def __init__(self, folder: OutputFolder) -> None:
        self.folder = folder

    @cached_property
    def suite_name(self) -> str | None:
        """The `name:` of the folder's suite.yaml (read as YAML: no suite loading, no torch)."""
        try:
            raw = yaml.safe_load(self.folder.suite.read_text())
        except (OSError, yaml.YAMLError):
            return None
        return str(raw["name"]) if isinstance(raw, dict) and raw.get("name") else None

    @cached_property
    def _suite(self) -> Any:
        if self.suite_name is None:
            return None
        from normbench.contracts.suite import load_suite

        try:
            return load_suite(self.folder.suite)
        except Exception:  # a suite file this normbench no longer reads: the axes still say what the cell was
            return None

    def flat(self, axes: dict[str, Any], overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        """`section.key -> value` of the cell of `axes` (with a tuned re-run's `overrides`); {} without a suite."""
        if self._suite is None:
            return {}
        from normbench.contracts.suite import with_overrides
        from normbench.data.config import DATASET_ONLY_KEYS

        try:
            cell = self._suite.cell(axes)
            config = with_overrides(cell, overrides) if overrides else cell.config
        except Exception:  # axes the suite no longer has (a renamed layer, a removed key)
            return {}
        foreign = {k for name, keys in DATASET_ONLY_KEYS.items() if name != config.data.name for k in keys}
        return {k: v for k, v in config.flat().items() if not (k.startswith("data.") and k[5:] in foreign)}
