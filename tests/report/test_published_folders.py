"""Every published results folder regenerates on a clean clone: `normbench leaderboard results/<folder>` rebuilds
its leaderboard.md, results.csv and history.csv byte for byte and every figure, from the committed ledger, suite,
data ceiling and measured cost alone (and, where its suite names a `reference`, that folder's published results.csv,
which the ranking-transfer section reads), in any time zone on any machine: the leaderboard names no writer's machine
or clock, only the ledger's newest record; and `normbench compare` rebuilds each side-by-side file byte for byte from
its two folders."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
import yaml

from normbench.cli import main

RESULTS = Path(__file__).resolve().parents[2] / "results"
# the published folders (results/README.md; the older 10-epoch folders have no ledger), and the smoke folder a
# fresh clone's `bash scripts/run-smoke.sh` compares with (README's `normbench leaderboard results/smoke`)
PUBLISHED = ["depth-sweep-digits-early", "depth-sweep-digits-converged", "depth-sweep-digits-modern",
             "depth-sweep-digits-wide", "depth-sweep-digits-frontier", "device-effect-digits", "smoke"]
ELSEWHERE = "Asia/Kolkata"  # UTC+05:30: a reader's clock the ledger's UTC times must not leak into
INPUTS = ("ledger.journal", "suite.yaml", "ceiling.csv")  # what `leaderboard` reads; everything else it writes
TEXT_OUTPUTS = ("leaderboard.md", "results.csv", "history.csv")
OPTIONAL_INPUTS = ("attention-logits.csv",)  # scripts/attention_logits.py's re-runs (the AdamW side of a comparison)
# `normbench compare` files: one grid at two budgets (README's command), the modern rows at widths 64 and 192, and
# the frontier's rows ranked with the modern folder's
COMPARISONS = {"depth-sweep-digits-regimes.md": ("depth-sweep-digits-early", "depth-sweep-digits-converged"),
               "depth-sweep-digits-width-64-vs-192.md": ("depth-sweep-digits-modern", "depth-sweep-digits-wide"),
               # one recipe, different rows: the frontier's new rows ranked beside the modern folder's (report/union.py)
               "depth-sweep-digits-modern-and-frontier.md": ("depth-sweep-digits-modern",
                                                             "depth-sweep-digits-frontier")}


@pytest.fixture
def another_time_zone(monkeypatch):
    """The process's local time zone set to ELSEWHERE (Optuna hands a journal's times back in local time)."""
    monkeypatch.setenv("TZ", ELSEWHERE)
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def regenerate(published: Path, workdir: Path, monkeypatch) -> Path:
    """Copy the folder's inputs to `workdir/results/<name>` and run the README's command there."""
    copy = workdir / "results" / published.name
    copy.mkdir(parents=True)
    for name in INPUTS:
        shutil.copy2(published / name, copy / name)
    for cost in published.glob("cost-*.csv"):  # `normbench bench SUITE` measured beside the ledger: an input too
        shutil.copy2(cost, copy / cost.name)
    for extra in OPTIONAL_INPUTS:  # re-runs a script wrote beside the ledger, which `compare` reads where present
        if (published / extra).is_file():
            shutil.copy2(published / extra, copy / extra)
    references = yaml.safe_load((published / "suite.yaml").read_text()).get("reference") or []
    # what the ranking transfer (the first) and a tuned row's grid lr (the first that has the row) read
    for reference in [references] if isinstance(references, str) else references:
        if not (workdir / reference / "results.csv").exists():
            (workdir / reference).mkdir(parents=True, exist_ok=True)
            shutil.copy2(RESULTS.parent / reference / "results.csv", workdir / reference / "results.csv")
    monkeypatch.chdir(workdir)  # the leaderboard names its suite by the path a reader types
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    assert main(["leaderboard", os.path.join("results", published.name)]) == 0
    return copy


@pytest.mark.parametrize("name", PUBLISHED)
def test_a_published_folder_regenerates_from_its_committed_inputs(name, tmp_path, monkeypatch, capsys,
                                                                   another_time_zone):
    published = RESULTS / name
    missing = [f for f in (*INPUTS, *TEXT_OUTPUTS) if not (published / f).is_file()]
    assert not missing, f"{published} lacks {missing}: publish the whole folder (docs/results.md)"
    copy = regenerate(published, tmp_path, monkeypatch)
    for text in TEXT_OUTPUTS:  # every line, the ledger line with its date included
        assert (copy / text).read_bytes() == (published / text).read_bytes(), text
    # and `leaderboard` says where it wrote: the folder, then the files
    assert f"wrote into {os.path.join('results', name)}/: leaderboard.md, " in capsys.readouterr().out
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


# the folders read under bracketing v3 (the modern one since its v3 resume on 4 selection seeds replaced its v2 form);
# not the smoke folder (one lr, a check of a fresh clone) nor the device effect's (the modern folder's cells trained
# again on another device, paired by scripts/device_effect.py): neither states a verdict
BRACKETED_V3 = [name for name in PUBLISHED if name not in ("smoke", "device-effect-digits")]


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
