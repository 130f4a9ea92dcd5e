"""What a ledger trial looks like as an MLflow run, written once: its key, name, tags, params and metrics. The live
logger (tracker.py) and `sync` (sync.py) both build runs from here, so a run logged live and one rebuilt from the
ledger are the same run.

- key: the tags `study` and `trial` (the trial's number) under the folder's parent run: one run per attempt of a
  cell, found again by a later sync however it was made.
- `ledger_state`: the trial state the run mirrors completely (COMPLETE, PRUNED, FAIL); written last, only when
  every earlier write of the run landed. A run without it (logging cut off, a worker killed) is completed by sync.
- `layout`: this module's version. A run of an older layout (epochs at step = epoch) is replaced by sync.
- per-epoch metrics at step = optimizer steps (the history's `step`): val_top1, train_loss, scheduled_lr (the
  schedule's lr; `lr` is the cell's peak, an axis and a param), grad_norm, images_per_sec.
- final metrics, as the leaderboard defines them (contracts/selection.py): `test_top1` is its score (test top-1 at the
  final epoch, 0 when diverged), `val_top1_final` what selects (val top-1 at the final epoch, 0 when diverged).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from normbench.contracts.names import BRACKET, BUDGET, REPORT, RUN, TUNE, TUNED, study_kind, study_suite
from normbench.contracts.selection import BUDGETS, DIVERGED, REPORTS, SCORE, SELECT, SELECTS, cell_scores
from normbench.tracking.naming import logged_blocks, telemetry_metric

LAYOUT = "2"
LAYOUT_TAG, STATE_TAG = "layout", "ledger_state"
TUNE_LABEL = "label"  # a search trial's user attr naming it (sweep/tune.py LABEL; its cell_id is a budget slot)
EPOCH_METRICS = {"val_top1": "val_top1", "train_loss": "train_loss", "lr": "scheduled_lr", "grad_norm": "grad_norm",
                 "images_per_sec": "images_per_sec"}
FINAL_NAMES = {SCORE: "test_top1", SELECT: "val_top1_final"}  # spec.selection's score/select, named for what they are
# a study's kind (its name's prefix: tags.kind) and the role its cells play in the leaderboard (tags.role)
KINDS = {RUN: (SELECTS, SELECTS), BRACKET: (BRACKET, SELECTS), REPORT: (REPORT, REPORTS), BUDGET: (BUDGET, BUDGETS),
         TUNE: (TUNE, TUNE), TUNED: (TUNED, REPORTS)}

Point = tuple[str, float, int, int]  # (key, value, timestamp ms, step): an MLflow metric point, before mlflow loads


def kind_and_role(study: str) -> tuple[str, str]:
    """("select", "select") for `run:<suite>`, ("bracket", "select") for a bracketing round, ... ; ("", "") else."""
    return KINDS.get(study_kind(study), ("", ""))


def axes_of(params: Mapping[str, Any]) -> dict[str, Any]:
    """The axes among a cell's params: keys without a section prefix (sweep/cells.py cell_params), role aside."""
    return {k: v for k, v in params.items() if "." not in k and k != "role"}


def run_tags(cell_id: str, axes: Mapping[str, Any], study: str, trial: int, attempt: int = 1) -> dict[str, str]:
    """The tags a run is created with: its key, cell, axes (tags too, so a search can filter on them), kind, role,
    and its layer's colour. (Its name is run_name(cell_id, attempt).)"""
    kind, role = kind_and_role(study)
    return {"study": study, "trial": str(trial), "cell_id": cell_id, "attempt": str(attempt), "kind": kind,
            "role": role, LAYOUT_TAG: LAYOUT, "status": "running", "suite": study_suite(study) or "",
            **{k: str(v) for k, v in axes.items()}, **run_colour(axes)}


def run_colour(axes: Mapping[str, Any]) -> dict[str, str]:
    """`mlflow.runColor`: the layer's colour in the leaderboard's figures (report/style.py), when it has a layer."""
    from normbench.report.style import layer_colour

    return {"mlflow.runColor": layer_colour(str(axes["layer"]))} if "layer" in axes else {}


def one_param_per_axis(params: Mapping[str, Any]) -> dict[str, str]:
    """An axis (`layer`, `lr`) replaces its recipe key (`model.layer`, `train.lr`), so each shows once in the UI;
    values as MLflow keeps them (text, at most 6000 characters)."""
    axes = [k for k in params if "." not in k]
    dropped = {f"{section}.{k}" for k in axes for section in ("model", "train", "data")}
    return {k: str(v)[:6000] for k, v in params.items() if k not in dropped}


def epoch_points(record: Mapping[str, Any], timestamp: int) -> list[Point]:
    """One epoch's metrics at step = optimizer steps so far (a history written before `step` was recorded: its
    epoch count). A value the ledger keeps as None (the epoch that diverged) is NaN: a point every epoch."""
    step = int(record.get("step") or int(record["epoch"]) + 1)
    return [(name, math.nan if record[key] is None else float(record[key]), timestamp, step)
            for key, name in EPOCH_METRICS.items() if key in record]


def telemetry_points(records: Iterable[Mapping[str, Any]], timestamp: int) -> list[Point]:
    """Telemetry of the first, middle and last block (tracking/naming.py) at their optimizer steps."""
    records = list(records)
    picks = logged_blocks(max((int(r["block"]) for r in records), default=0) + 1)
    return [(telemetry_metric(position, k), float(v), timestamp, int(r["step"]))
            for r in records for position, block in picks.items() if int(r["block"]) == block
            for k, v in r.items() if k not in ("step", "block") and v is not None]


def final_points(summary: Mapping[str, Any], timestamp: int) -> list[Point]:
    """The cell's summary at step 0: sortable columns in the UI's table. NaN or missing values are left out."""
    values = {"best_val_top1": summary.get("best_val_top1"), "diverged": float(summary.get("status") == DIVERGED),
              "epochs_run": summary.get("epochs_run"), "images_per_sec_mean": summary.get("images_per_sec"),
              "params": summary.get("params"), "cell_seconds": summary.get("seconds"),
              **{FINAL_NAMES[k]: v for k, v in cell_scores(summary).items()}}
    return [(k, float(v), timestamp, 0) for k, v in values.items() if v is not None and math.isfinite(float(v))]


def status_of(summary: Mapping[str, Any] | None) -> str:
    """The run's `status` tag: the cell's (ok, diverged, pruned), or `failed` for an attempt that did not finish."""
    return str(summary.get("status", "ok")) if summary else "failed"
