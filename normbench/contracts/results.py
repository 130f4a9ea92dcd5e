"""What a trained cell returns (`CellResult`) and what one epoch records (`EpochRecord`): the contract between
train/, which produces them, and the ledger, MLflow, the progress line and the report, which read them.

The ledger stores `CellResult.summary()` (JSON, everything but the per-epoch history) and the history beside it;
`CellResult.from_summary` reads such a record back, with the defaults below for keys an older normbench did not write.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Literal, TypedDict

Status = Literal["ok", "diverged", "pruned"]


class EpochRecord(TypedDict):
    """One epoch of one cell: what `on_epoch` callbacks get, MLflow logs per step and `history` holds."""

    epoch: int              # 0-based
    train_loss: float       # mean over the epoch's trained micro-batches (full accumulation groups only)
    val_top1: float         # percent; NaN for the epoch that diverged
    lr: float               # the schedule's value at the epoch's last optimizer step
    grad_norm: float        # mean pre-clipping global gradient norm over the epoch's optimizer steps
    images_per_sec: float   # training images / training seconds of the epoch
    step: int               # optimizer steps taken by the epoch's end (cumulative): learning speed's clock
    images: int             # training images seen by the epoch's end (cumulative, all ranks)


@dataclass(frozen=True)
class CellResult:
    """One trained cell. Accuracies are percent; the test split is read once, at the final epoch, to report.

    The selection rule (normbench/contracts/selection.py) reads `status` and `val_top1`; the reported score is
    `test_top1`. Both are NaN unless `status` is "ok".
    """

    status: Status                 # ok, diverged (loss non-finite or above max_loss) or pruned (by on_epoch)
    best_val_top1: float           # best epoch's val
    final_val_top1: float          # last finite epoch's val (0 when none)
    val_top1: float                # final epoch's val; NaN unless ok
    test_top1: float               # final epoch's test; NaN unless ok
    best_val_epoch: int            # 0-based; -1 when no epoch had a finite val
    train_size: int                # the data bundle's true split sizes
    val_size: int
    test_size: int
    num_classes: int               # chance is 100 / num_classes; the loss floor depends on it
    train_loss: float              # last epoch's
    epochs_run: int
    images_per_sec: float          # training steps only
    params: int
    seconds: float                 # the whole cell: data, build, train, evaluate
    history: list[EpochRecord] = field(default_factory=list)
    telemetry: list[dict[str, Any]] = field(default_factory=list)  # per-block records (train/telemetry.py)
    device: str = ""               # where it trained (train/device.py device_name), "" in ledgers before 2026-11-26
    torch_version: str = ""        # the torch it trained with: seconds and images_per_sec depend on both
    timm_version: str = ""         # the timm and normbench it trained with (MLflow tags them), "" before 2026-12-06
    normbench_version: str = ""
    torch_threads: str = ""        # intra-op threads, each change in order ("2", "2/1"): a CPU cell's float sums, so
    #                                its numbers, depend on them (train/cpu_share.py); "" in ledgers before 2026-11-26
    fused_group: int = 1           # cells trained together as one fused model (train/fused.py); 1: alone

    def summary(self) -> dict[str, Any]:
        """The ledger's record of the cell: every field but `history`, non-finite floats as None (JSON)."""
        return {f.name: _json_safe(getattr(self, f.name)) for f in fields(self) if f.name != "history"}

    def history_records(self) -> list[dict[str, Any]]:
        return [{k: _json_safe(v) for k, v in h.items()} for h in self.history]

    @classmethod
    def from_summary(cls, summary: dict[str, Any], history: list[dict[str, Any]] | None = None) -> CellResult:
        """Read a ledger record back (None -> NaN for floats; keys an older normbench did not write get defaults)."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name == "history":
                values["history"] = list(history or summary.get("history") or [])
            elif f.name == "telemetry":
                values["telemetry"] = list(summary.get("telemetry") or [])
            else:
                value = summary.get(f.name)
                values[f.name] = _DEFAULTS[f.name] if value is None else value
        return cls(**values)


_NAN = float("nan")
_DEFAULTS: dict[str, Any] = {"status": "ok", "best_val_top1": 0.0, "final_val_top1": 0.0, "val_top1": _NAN,
                             "test_top1": _NAN, "best_val_epoch": -1, "train_size": 0, "val_size": 0, "test_size": 0,
                             "num_classes": 0, "train_loss": _NAN, "epochs_run": 0, "images_per_sec": 0.0, "params": 0,
                             "seconds": 0.0, "device": "", "torch_version": "", "timm_version": "",
                             "normbench_version": "", "torch_threads": "", "fused_group": 1}


def _json_safe(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value
