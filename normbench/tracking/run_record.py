"""A ledger trial as an MLflow run, defined once so runs logged live (tracker.py) and rebuilt (sync.py) are the same:
`trial_run` describes a trial from the ledger's record and the folder's suite alone, and both paths write what it says
(live: at the claim, then `result_tags`, `result_params` and the metrics as the cell trains; sync: all at once), so a
store synced from the ledger equals the one logged live, params, tags, metrics and name
(tests/tracking/test_live_equals_synced.py).
- key: tags `study` and `trial` (its number) under the folder's parent run: one run per cell attempt, live or synced.
- `ledger_state`: the trial state (COMPLETE, PRUNED, FAIL) the run fully mirrors; written last, once every earlier
  write landed. A run without it (logging cut off, worker killed) is completed by sync.
- `layout`: this module's version; sync replaces runs of an older layout (3: a synced search trial's params were its
  sampled values bare, without its seed and recipe; 2: scores rounded to 2 decimals; 1: epochs at step = epoch).
- name: like a table row (`d36 layerscale lr3e-3 s0`), so the pinned Run Name column shows the axes.
- per-epoch metrics at step = optimizer steps; `scheduled_lr` is the schedule's lr (`lr`, a param, is the cell's peak).
- telemetry of the first, middle and last block (as the leaderboard's table) under `telemetry/<position>/` (own chart
  sections): `telemetry/last/grad_norm` is the deepest block at any depth, so depths compare like for like.
- final: `test_top1` scores, `val_top1_final` selects (contracts/selection.py: final epoch, 0 when diverged), at full
  precision: only a printed table rounds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from normbench.contracts.names import (
    ADOPTED_ATTR,
    BRACKET,
    BUDGET,
    CLAIMS,
    CONFIRM,
    REPORT,
    RUN,
    TUNE,
    TUNED,
    StudyNames,
    study_kind,
    study_suite,
)
from normbench.contracts.recipe import CellConfig
from normbench.contracts.selection import BUDGETS, DIVERGED, REPORTS, ROLE, SCORE, SELECT, SELECTS, cell_scores
from normbench.tracking.mlflow_store import Point

if TYPE_CHECKING:  # optuna and the suite are imported where a trial is read: `normbench ui` reads none of them
    from optuna.trial import FrozenTrial

    from normbench.contracts.suite import Suite

LAYOUT = "4"
LAYOUT_TAG, STATE_TAG = "layout", "ledger_state"
TUNE_LABEL = "label"  # a search trial's user attr naming it (sweep/tune.py LABEL; its cell_id is a budget slot)
EPOCH_METRICS = {"val_top1": "val_top1", "train_loss": "train_loss", "lr": "scheduled_lr", "grad_norm": "grad_norm",
                 "images_per_sec": "images_per_sec"}
FINAL_NAMES = {SCORE: "test_top1", SELECT: "val_top1_final"}  # spec.selection's score/select, named for what they are
# a study's kind (its name's prefix: tags.kind) and the role its cells play in the leaderboard (tags.role)
KINDS = {RUN: (SELECTS, SELECTS), BRACKET: (BRACKET, SELECTS), REPORT: (REPORT, REPORTS), BUDGET: (BUDGET, BUDGETS),
         CLAIMS: (CLAIMS, REPORTS), TUNE: (TUNE, TUNE), CONFIRM: (CONFIRM, TUNE), TUNED: (TUNED, REPORTS)}
RESULT_TAGS = ("device", "torch_version", "timm_version", "normbench_version", "torch_threads")  # where and with what
SIZES = ("train_size", "val_size", "test_size")  # the data set's true split sizes, params `data.<size>`

# Run names: an axis shown as prefix + value; `layer` shows as its bare value; any other axis as `key=value`.
SHORT = {"depth": "d", "lr": "lr", "seed": "s", "trial": "trial", "epochs": "ep", "batch_size": "bs",
         "weight_decay": "wd", "embed_dim": "dim", "num_heads": "heads", "patch_size": "p"}
FIRST, LAST = ("depth", "layer"), ("seed", "trial")  # the rest in between, by name (as in the cell id)
TELEMETRY_PREFIX = "telemetry/"
POSITIONS = ("first", "middle", "last")


@dataclass
class TrialRun:
    """A trial as an MLflow run: everything a run of it holds but its status (`run_status`) and ids."""

    cell_id: str
    name: str
    tags: dict[str, str]
    params: dict[str, str]
    points: list[Point] = field(default_factory=list)
    start: int = 0  # ms since the epoch
    end: int = 0


def trial_run(study: str, trial: FrozenTrial, suite: Suite | None) -> TrialRun:
    """The run of `trial` of `study`, from the ledger's record and the folder's `suite` (None: a suite file this
    normbench cannot read; the axes alone then): the one description of a trial as a run. Live logging starts its
    run with this trial's name, tags and params as the claim reads it (sweep/cells.py `cell_run`; no metrics yet);
    sync writes the finished trial's whole run (tracking/sync.py)."""
    from normbench.store.migrations import trial_cell_id

    kind, role = kind_and_role(study)
    attrs = trial.user_attrs
    axes, config = trial_cell(study, trial, suite)
    cell_id = attrs.get(TUNE_LABEL) or trial_cell_id(trial) or f"trial {trial.number}"
    attempt = 1 + len(trial.system_attrs.get("retry_history", []))
    result = attrs.get("result") if trial.state.name != "FAIL" else None
    tags = run_tags(cell_id, axes, study, trial.number, attempt)
    if attrs.get("worker_host"):
        tags["host"] = str(attrs["worker_host"])
    if isinstance(source := attrs.get(ADOPTED_ATTR), dict):  # trained in another folder (sweep/adopt.py)
        tags[ADOPTED_ATTR] = f"{source.get('folder')} {source.get('study')} trial {source.get('trial')}"
    params = run_params(axes, config, role=role if kind not in (TUNE, CONFIRM, TUNED) else None)  # tuning: no role
    start = _ms(trial.datetime_start) or _ms(trial.datetime_complete) or int(time.time() * 1000)
    end = max(start, _ms(trial.datetime_complete) or start)
    run = TrialRun(cell_id, run_name(cell_id, attempt), tags, params, start=start, end=end)
    if trial.state.name in ("RUNNING", "WAITING"):  # a claimed cell: its run as it starts
        return run
    history = attrs.get("history") or []
    run.points = [p for i, record in enumerate(history)
                  for p in epoch_points(record, start + (end - start) * (i + 1) // len(history))]
    if not history:  # a FAIL trial: its epochs' val top-1, as it reported them (step = optimizer steps)
        run.points = [("val_top1", float(v), end, int(step)) for step, v in sorted(trial.intermediate_values.items())
                      if v is not None and math.isfinite(v)]
    if result:
        run.points += telemetry_points(result.get("telemetry") or [], end) + final_points(result, end)
        run.params.update(result_params(result))
    run.tags.update(result_tags(result) if result else {"status": "failed"})  # an attempt that did not finish
    if attrs.get("error"):
        run.tags["error"] = str(attrs["error"])[:5000]
    return run


def trial_cell(study: str, trial: FrozenTrial, suite: Suite | None) -> tuple[dict[str, Any], CellConfig | None]:
    """The cell a trial trains: its axes and recipe, as the sweep's jobs build them (sweep/run.py, sweep/tune.py): a
    search trial is its study's point on the search seed with the values Optuna sampled; a tuned re-run, its axes
    with the search's best values; any other, its axes."""
    from normbench.store.migrations import trial_axes

    if study_kind(study) == TUNE:
        point = point_axes(study)
        if suite is None:  # no suite to say the search seed or the recipe: the sampled values as axes
            return {**point, **trial.params}, None
        from normbench.contracts.tuning import search_seed

        axes = {**point, "seed": search_seed(suite)}
        return axes, _recipe(suite, axes, trial.params)
    axes = trial_axes(trial)
    return axes, _recipe(suite, axes, trial.user_attrs.get("overrides"))


def _recipe(suite: Suite | None, axes: dict[str, Any], overrides: dict[str, Any] | None) -> CellConfig | None:
    if suite is None:
        return None
    from normbench.contracts.tuning import apply_sampled, recipe_axes

    try:
        cell = suite.cell(recipe_axes(axes))
        return apply_sampled(cell, overrides) if overrides else cell.config  # a layer's tunables too
    except Exception:  # axes the suite no longer has (a renamed layer, a removed key): the axes still say the cell
        return None


def point_axes(study: str) -> dict[str, Any]:
    """`tune:<suite>:depth=12,layer=x` -> {depth: 12, layer: x} (numbers as numbers)."""
    point = StudyNames(study_suite(study) or "").tune_point(study) or ""
    pairs = (p.split("=", 1) for p in point.split(",") if "=" in p)
    return {k: _number(v) for k, v in pairs}


def _number(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _ms(when: Any) -> int:
    return int(when.timestamp() * 1000) if when is not None else 0


def result_tags(summary: Mapping[str, Any]) -> dict[str, str]:
    """What a cell's result (CellResult.summary()) tags its run with: its status (ok, diverged, pruned), where and
    with which versions it trained, and how many cells trained fused with it (when more than one)."""
    fused = int(summary.get("fused_group") or 1)
    return {"status": str(summary.get("status", "ok")),
            **{k: str(summary[k]) for k in RESULT_TAGS if summary.get(k)},
            **({"fused_group": str(fused)} if fused > 1 else {})}


def result_params(summary: Mapping[str, Any]) -> dict[str, str]:
    """The data set's true split sizes from a cell's result, as params `data.train_size`, ..."""
    return {f"data.{k}": str(summary[k]) for k in SIZES if summary.get(k)}


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
    """A run's params (trial_run's): the cell's axes bare (`layer`, the only params without a section: `axes_of`),
    its recipe (`config`) as `section.key` less another data set's knobs and the keys an axis already shows
    (`model.layer`), the data set's true split sizes (`data.train_size`; result_params once a result has them), and
    its `role` (none for tune's cells); values cut to MLflow's 6000 characters."""
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
