"""The README's MLflow screenshots show the published modern folder as it is: `bash scripts/ui-screenshots.sh docs`
takes them from a copy of results/depth-sweep-digits-modern and writes beside them what the runs table drew, row by
row (docs/mlflow-table.json, read from the page). Every number there must be the folder's: per row of the deepest
depth, its lr chosen on the selection seeds (contracts/selection.py), the report seeds there and their mean test and
val top-1, as results.csv holds them; and the chart view's runs list must name every group whole. A folder that gains
rows (or a view that drifts) fails here until the script is run again."""

from __future__ import annotations

import json
import math

import pandas as pd

from normbench.contracts.selection import DIVERGED, REPORTS, ROLE, SCORE, SELECT, SELECTS, chosen_lrs
from tests.conftest import REPO

SHOWN = REPO / "docs" / "mlflow-table.json"
NAME, LR = "attributes.`Run Name`", "params.`lr`"
TEST, VAL, FAILED = "metrics.`test_top1`", "metrics.`val_top1_final`", "metrics.`diverged`"


def number(cell: str) -> float:
    """`98.33 (average)` -> 98.33: the number as the table printed it."""
    return float(cell.split()[0])


def shown() -> dict:
    return json.loads(SHOWN.read_text())


def rows_shown() -> dict[str, dict[str, float]]:
    """The table's rows by layer: lr, runs, test, val, diverged, as printed."""
    rows = {}
    for row in shown()["rows"]:
        _, group, runs = row[NAME].split("\n")  # colour, `Group: depth: 36, layer: ngpt`, its runs
        parts = dict(part.split(": ") for part in group.removeprefix("Group: ").split(", "))
        rows[parts["layer"]] = {"depth": int(parts["depth"]), "lr": float(row[LR]), "runs": int(runs),
                                "test": number(row[TEST]), "val": number(row[VAL]), "diverged": number(row[FAILED])}
    return rows


def rows_of_the_folder() -> dict[str, dict[str, float]]:
    """What each row of the folder's deepest depth scores (results.csv): the report cells at its selected lr."""
    cells = pd.read_csv(REPO / shown()["folder"] / "results.csv")
    cells = cells[cells["depth"] == cells["depth"].max()]  # the view `normbench ui` opens
    chosen = chosen_lrs(cells[cells[ROLE] == SELECTS], ["depth", "layer"])
    rows = {}
    for row in chosen.itertuples(index=False):
        at = cells[(cells["layer"] == row.layer) & (cells["lr"] == row.lr) & (cells[ROLE] == REPORTS)]
        if len(at):
            rows[row.layer] = {"depth": int(row.depth), "lr": float(row.lr), "runs": len(at),
                               "test": float(at[SCORE].mean()), "val": float(at[SELECT].mean()),
                               "diverged": float((at["status"] == DIVERGED).mean())}
    return rows


def as_printed(shown: float, value: float) -> bool:
    """Whether `shown` is `value` at the table's precision (tracking/ui_app.py ROUND_SCRIPT: 2 decimals from 1 up,
    else 3 significant digits): within half its last digit (JavaScript rounds a half up, Python's round to even)."""
    half = 0.005 if abs(value) >= 1 else abs(value) * 0.005
    return abs(shown - value) <= half + 1e-9


def test_the_table_screenshot_shows_the_published_folder_s_rows_and_numbers():
    assert shown()["folder"] == "results/depth-sweep-digits-modern"
    table, folder = rows_shown(), rows_of_the_folder()
    assert sorted(table) == sorted(folder), "rows shown vs the folder's: run `bash scripts/ui-screenshots.sh docs`"
    for layer, expected in folder.items():
        got = table[layer]
        assert got["depth"] == expected["depth"] and got["runs"] == expected["runs"], layer
        assert math.isclose(got["lr"], expected["lr"], rel_tol=1e-9), layer
        for key in ("test", "val", "diverged"):
            assert as_printed(got[key], expected[key]), (layer, key, got, expected)
    order = [row[TEST] for row in shown()["rows"]]
    assert [number(t) for t in order] == sorted((number(t) for t in order), reverse=True)  # best score first
    assert shown()["matching_runs"] == sum(row["runs"] for row in folder.values())


def test_the_chart_screenshot_names_every_group_whole():
    runs_list = shown()["chart_runs_list"]
    assert runs_list["widened"]
    names = [n["name"] for n in runs_list["names"]]
    assert sorted(names) == sorted(f"Group: depth: {r['depth']}, layer: {layer}" for layer, r in rows_shown().items())
    assert not [n["name"] for n in runs_list["names"] if n["cut"]]


def test_the_readme_links_both_screenshots():
    readme = (REPO / "README.md").read_text()
    for png in ("docs/mlflow-table.png", "docs/mlflow-charts.png"):
        assert f"({png})" in readme and (REPO / png).is_file()
