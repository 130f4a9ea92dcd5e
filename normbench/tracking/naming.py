"""The names MLflow shows: a cell's short run name and its telemetry metrics' names.

A run name reads like a table row (`d36 layerscale lr3e-3 s0`), so the Run Name column, pinned left in MLflow's runs
table, already shows the axes. Telemetry metrics go under one `telemetry/` prefix, so the model metrics (val_top1,
train_loss, ...) stay in MLflow's "Model metrics" chart section, and only for the first, middle and last block (as
the leaderboard's telemetry table), named by position: `telemetry/last/grad_norm` is the deepest block at every
depth, so runs of several depths grouped by layer compare like with like. Every block is in the cell's result and
the leaderboard's heatmaps.
"""

from __future__ import annotations

# An axis shown as prefix + value; `layer` shows as its bare value; any other axis as `key=value`.
SHORT = {"depth": "d", "lr": "lr", "seed": "s", "trial": "trial", "epochs": "ep", "batch_size": "bs",
         "weight_decay": "wd", "embed_dim": "dim", "num_heads": "heads", "patch_size": "p"}
BARE = ("layer",)
FIRST, LAST = ("depth", "layer"), ("seed", "trial")  # the rest in between, by name (as in the cell id)
TELEMETRY_PREFIX = "telemetry/"
POSITIONS = ("first", "middle", "last")


def run_name(cell_id: str, attempt: int = 1) -> str:
    """`depth=36,layer=layerscale,lr=0.003,seed=0` -> `d36 layerscale lr3e-3 s0`; a second attempt gets ` #2`.

    The cell id (spec.suite.cell_id, or a tune trial's label with `,trial=N`) is parsed, not the params, so a run's
    name lists exactly what tells it apart. A part without `=` is kept as it is."""
    parts = dict(p.split("=", 1) if "=" in p else (p, "") for p in cell_id.split(",") if p)
    keys = [*(k for k in FIRST if k in parts), *sorted(k for k in parts if k not in FIRST + LAST),
            *(k for k in LAST if k in parts)]
    shown = " ".join(_part(k, parts[k]) for k in keys)
    return shown if attempt == 1 else f"{shown} #{attempt}"


def _part(key: str, value: str) -> str:
    if not value:
        return key
    if key in BARE:
        return value
    if key in SHORT:
        return f"{SHORT[key]}{short_number(value)}"
    return f"{key}={short_number(value)}"


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
    """The blocks whose telemetry goes to MLflow, by position: first, middle and last, as
    report.telemetry_figures.end_table picks them (at depth 2 the middle block is the last)."""
    return dict(zip(POSITIONS, (0, depth // 2, depth - 1), strict=True))


def telemetry_metric(position: str, quantity: str) -> str:
    """`telemetry/last/grad_norm`: MLflow charts it in the section `telemetry/last`."""
    return f"{TELEMETRY_PREFIX}{position}/{quantity}"
