"""A ledger trial as an MLflow run, defined once so runs logged live (tracker.py) and rebuilt (sync.py) are the same.
- key: tags `study` and `trial` (its number) under the folder's parent run: one run per cell attempt, live or synced.
- `ledger_state`: the trial state (COMPLETE, PRUNED, FAIL) the run fully mirrors; written last, once every earlier
  write landed. A run without it (logging cut off, worker killed) is completed by sync.
- `layout`: this module's version; sync replaces runs of an older layout (2: scores rounded to 2 decimals; 1: epochs
  at step = epoch).
- name: like a table row (`d36 layerscale lr3e-3 s0`), so the pinned Run Name column shows the axes.
- per-epoch metrics at step = optimizer steps; `scheduled_lr` is the schedule's lr (`lr`, a param, is the cell's peak).
- telemetry of the first, middle and last block (as the leaderboard's table) under `telemetry/<position>/` (own chart
  sections): `telemetry/last/grad_norm` is the deepest block at any depth, so depths compare like for like.
- final: `test_top1` scores, `val_top1_final` selects (contracts/selection.py: final epoch, 0 when diverged), at full
  precision: only a printed table rounds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from normbench.contracts.names import BRACKET, BUDGET, REPORT, RUN, TUNE, TUNED, study_kind, study_suite
from normbench.contracts.recipe import CellConfig
from normbench.contracts.selection import BUDGETS, DIVERGED, REPORTS, ROLE, SCORE, SELECT, SELECTS, cell_scores
from normbench.tracking.mlflow_store import Point

LAYOUT = "3"
LAYOUT_TAG, STATE_TAG = "layout", "ledger_state"
TUNE_LABEL = "label"  # a search trial's user attr naming it (sweep/tune.py LABEL; its cell_id is a budget slot)
EPOCH_METRICS = {"val_top1": "val_top1", "train_loss": "train_loss", "lr": "scheduled_lr", "grad_norm": "grad_norm",
                 "images_per_sec": "images_per_sec"}
FINAL_NAMES = {SCORE: "test_top1", SELECT: "val_top1_final"}  # spec.selection's score/select, named for what they are
# a study's kind (its name's prefix: tags.kind) and the role its cells play in the leaderboard (tags.role)
KINDS = {RUN: (SELECTS, SELECTS), BRACKET: (BRACKET, SELECTS), REPORT: (REPORT, REPORTS), BUDGET: (BUDGET, BUDGETS),
         TUNE: (TUNE, TUNE), TUNED: (TUNED, REPORTS)}

# Run names: an axis shown as prefix + value; `layer` shows as its bare value; any other axis as `key=value`.
SHORT = {"depth": "d", "lr": "lr", "seed": "s", "trial": "trial", "epochs": "ep", "batch_size": "bs",
         "weight_decay": "wd", "embed_dim": "dim", "num_heads": "heads", "patch_size": "p"}
FIRST, LAST = ("depth", "layer"), ("seed", "trial")  # the rest in between, by name (as in the cell id)
TELEMETRY_PREFIX = "telemetry/"
POSITIONS = ("first", "middle", "last")


def kind_and_role(study: str) -> tuple[str, str]:
    """("select", "select") for `run:<suite>`, ("bracket", "select") for a bracketing round, ... ; ("", "") else."""
    return KINDS.get(study_kind(study), ("", ""))


def run_tags(cell_id: str, axes: Mapping[str, Any], study: str, trial: int, attempt: int = 1) -> dict[str, str]:
    """A new run's tags: key, cell, axes (tags too, for search filters), kind, role, its layer's `mlflow.runColor`."""
    from normbench.report.style import layer_colour

    kind, role = kind_and_role(study)
    colour = {"mlflow.runColor": layer_colour(str(axes["layer"]))} if "layer" in axes else {}
    return {"study": study, "trial": str(trial), "cell_id": cell_id, "attempt": str(attempt), "kind": kind,
            "role": role, LAYOUT_TAG: LAYOUT, "status": "running", "suite": study_suite(study) or "",
            **{k: str(v) for k, v in axes.items()}, **colour}


def run_params(axes: Mapping[str, Any], config: CellConfig | None = None, sizes: Mapping[str, int] | None = None,
               role: str | None = None) -> dict[str, str]:
    """A run's params, for live runs (sweep/cells.py) and synced ones (sync.py) alike: the cell's axes bare (`layer`,
    the only params without a section: `axes_of`), its recipe (`config`) as `section.key` less another data set's
    knobs and the keys an axis already shows (`model.layer`), the data set's true split sizes (`data.train_size`),
    and its `role` (none for tune's cells); values cut to MLflow's 6000 characters."""
    from normbench.data.config import DATASET_ONLY_KEYS

    recipe: dict[str, Any] = {}
    if config is not None:
        foreign = {k for name, keys in DATASET_ONLY_KEYS.items() if name != config.data.name for k in keys}
        recipe = {k: v for k, v in config.flat().items() if not (k.startswith("data.") and k[5:] in foreign)}
    params = {**axes, **recipe, **{f"data.{k}": v for k, v in (sizes or {}).items()},
              **({ROLE: role} if role else {})}
    shown = {f"{section}.{k}" for k in axes for section in ("model", "train", "data")}
    return {k: str(v)[:6000] for k, v in params.items() if k not in shown}


def axes_of(params: Mapping[str, Any]) -> dict[str, Any]:
    """The axes among a run's params: those `run_params` writes without a section, but its role."""
    return {k: v for k, v in params.items() if "." not in k and k != ROLE}


def epoch_points(record: Mapping[str, Any], timestamp: int) -> list[Point]:
    """One epoch's metrics at step = optimizer steps (epochs in old histories); a None (diverged) value is NaN."""
    step = int(record.get("step") or int(record["epoch"]) + 1)
    return [(name, math.nan if record[key] is None else float(record[key]), timestamp, step)
            for key, name in EPOCH_METRICS.items() if key in record]


def telemetry_points(records: Iterable[Mapping[str, Any]], timestamp: int) -> list[Point]:
    """Telemetry of the first, middle and last block (logged_blocks) at their optimizer steps."""
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


def run_name(cell_id: str, attempt: int = 1) -> str:
    """`depth=36,layer=layerscale,lr=0.003,seed=0` -> `d36 layerscale lr3e-3 s0`; a second attempt gets ` #2`.
    Parses the cell id (or a tune trial's label), not the params, so the name lists exactly what tells runs apart."""
    parts = dict(p.split("=", 1) if "=" in p else (p, "") for p in cell_id.split(",") if p)
    keys = [*(k for k in FIRST if k in parts), *sorted(k for k in parts if k not in FIRST + LAST),
            *(k for k in LAST if k in parts)]
    shown = " ".join(_part(k, parts[k]) for k in keys)
    return shown if attempt == 1 else f"{shown} #{attempt}"


def _part(key: str, value: str) -> str:
    if not value:
        return key
    if key == "layer":
        return value
    return f"{SHORT[key]}{short_number(value)}" if key in SHORT else f"{key}={short_number(value)}"


def short_number(value: str) -> str:
    """`0.003` -> `3e-3`, `0.0003162` -> `3.16e-4`, `0.05` -> `5e-2`; integers, 0.1 and up and text stay as they are."""
    try:
        number = float(value)
    except ValueError:
        return value
    if number == 0 or abs(number) >= 0.1 or number.is_integer():
        return value
    mantissa, exponent = f"{number:.2e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def logged_blocks(depth: int) -> dict[str, int]:
    """Blocks whose telemetry goes to MLflow, by position, as report.telemetry_figures.end_table picks them."""
    return dict(zip(POSITIONS, (0, depth // 2, depth - 1), strict=True))


def telemetry_metric(position: str, quantity: str) -> str:
    """`telemetry/last/grad_norm`: MLflow charts it in the section `telemetry/last`."""
    return f"{TELEMETRY_PREFIX}{position}/{quantity}"
