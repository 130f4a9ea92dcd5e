"""What selection reads from a finished cell, one rule for the lr choice, bracketing and `normbench tune`."""

from __future__ import annotations

import math
from typing import Any


def select_value(result: dict[str, Any]) -> float:
    """Val top-1 at the final epoch (best val for ledgers written before the test split existed); 0 for a diverged
    cell. Never the test score, and not the best epoch's val: the score reported is the final epoch's, so the
    choice is made on the same epoch."""
    if result.get("status") == "diverged":
        return 0.0
    value = result.get("val_top1", result.get("best_val_top1"))
    return 0.0 if value is None or not math.isfinite(value) else float(value)
