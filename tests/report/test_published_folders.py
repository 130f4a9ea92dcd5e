"""Every published results folder regenerates on a clean clone: `normbench leaderboard results/<folder>` rebuilds
its leaderboard.md byte for byte (apart from the machine-and-written-at line), its results.csv, history.csv and
every figure, from the committed ledger, suite and data ceiling alone (and, where its suite names a `reference`, that
folder's published results.csv, which the ranking-transfer section reads); and `normbench compare` rebuilds each
side-by-side file byte for byte from its two folders."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml

from normbench.cli import main

RESULTS = Path(__file__).resolve().parents[2] / "results"
# the published folders (results/README.md; the older 10-epoch folders have no ledger)
PUBLISHED = ["depth-sweep-digits-early", "depth-sweep-digits-converged", "depth-sweep-digits-modern",
             "depth-sweep-digits-wide"]
INPUTS = ("ledger.journal", "suite.yaml", "ceiling.csv")  # what `leaderboard` reads; everything else it writes
TEXT_OUTPUTS = ("leaderboard.md", "results.csv", "history.csv")
# `normbench compare` files: one grid at two budgets (README's command), and the modern rows at widths 64 and 192
COMPARISONS = {"depth-sweep-digits-regimes.md": ("depth-sweep-digits-early", "depth-sweep-digits-converged"),
               "depth-sweep-digits-width-64-vs-192.md": ("depth-sweep-digits-modern", "depth-sweep-digits-wide")}


def without_machine_line(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.startswith("- machine: "))


def regenerate(published: Path, workdir: Path, monkeypatch) -> Path:
    """Copy the folder's inputs to `workdir/results/<name>` and run the README's command there."""
    copy = workdir / "results" / published.name
    copy.mkdir(parents=True)
    for name in INPUTS:
        shutil.copy2(published / name, copy / name)
    for cost in published.glob("cost-*.csv"):  # `normbench bench SUITE` measured beside the ledger: an input too
        shutil.copy2(cost, copy / cost.name)
    reference = yaml.safe_load((published / "suite.yaml").read_text()).get("reference")
    if reference and not (workdir / reference / "results.csv").exists():  # what the ranking-transfer section reads
        (workdir / reference).mkdir(parents=True, exist_ok=True)
        shutil.copy2(RESULTS.parent / reference / "results.csv", workdir / reference / "results.csv")
    monkeypatch.chdir(workdir)  # the leaderboard names its suite by the path a reader types
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    assert main(["leaderboard", os.path.join("results", published.name)]) == 0
    return copy


@pytest.mark.parametrize("name", PUBLISHED)
def test_a_published_folder_regenerates_from_its_committed_inputs(name, tmp_path, monkeypatch):
    published = RESULTS / name
    missing = [f for f in (*INPUTS, *TEXT_OUTPUTS) if not (published / f).is_file()]
    assert not missing, f"{published} lacks {missing}: publish the whole folder (docs/results.md)"
    copy = regenerate(published, tmp_path, monkeypatch)
    assert without_machine_line((copy / "leaderboard.md").read_text()) == \
        without_machine_line((published / "leaderboard.md").read_text())
    for csv in ("results.csv", "history.csv"):
        assert (copy / csv).read_bytes() == (published / csv).read_bytes(), csv
    figures = sorted(p.name for p in published.glob("*.png"))
    assert figures and sorted(p.name for p in copy.glob("*.png")) == figures
    assert (copy / "mlflow.db").exists()  # and MLflow's view of the ledger, synced (tracking/sync.py)


@pytest.mark.parametrize("comparison", COMPARISONS)
def test_each_comparison_regenerates_from_its_two_published_folders(comparison, tmp_path, monkeypatch):
    compared = COMPARISONS[comparison]
    for name in compared:
        regenerate(RESULTS / name, tmp_path, monkeypatch)
    out = os.path.join("results", comparison)
    assert main(["compare", *(os.path.join("results", name) for name in compared), "--out", out]) == 0
    assert (tmp_path / out).read_text() == (RESULTS / comparison).read_text()


def final_accuracy_rows(leaderboard: str) -> list[dict[str, str]]:
    """Every row of every "## depth N: final accuracy" table of a leaderboard.md, keyed by its header."""
    rows = []
    for section in leaderboard.split("\n## ")[1:]:
        title, _, body = section.partition("\n\n")
        if ": final accuracy" not in title:
            continue
        lines = [line for line in body.splitlines() if line.startswith("|")]
        header = [cell.strip() for cell in lines[0].strip("|").split("|")]
        rows += [dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")), strict=True))
                 for line in lines[2:]]
    return rows


# the folders read under bracketing v3 (the modern one since its v3 resume on 4 selection seeds replaced its v2 form)
BRACKETED_V3 = PUBLISHED


@pytest.mark.parametrize("name", BRACKETED_V3)
def test_every_published_rows_lr_is_bracketed_both_ways_unless_an_lr_bound_stopped_it(name):
    """Issue 48's standard for a published verdict: the selected lr has a tried lr with a lower selection mean on
    each side, or the edge column names the lr bound that stopped bracketing; never a cap, an unfinished round or
    bracketing switched off."""
    rows = final_accuracy_rows((RESULTS / name / "leaderboard.md").read_text())
    assert rows
    overreaching = {row["layer"]: row["edge"] for row in rows
                    if row["edge"] and ("unfinished" in row["edge"] or "cap reached" in row["edge"]
                                        or "bracketing off" in row["edge"] or "lr bound" not in row["edge"])}
    assert not overreaching, f"{name}: rows whose lr bracketing stopped short: {overreaching}"
