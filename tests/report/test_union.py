"""`normbench compare` of folders of one recipe holding different rows (report/union.py): every row ranked in one
table, a row whose cells one folder adopted from the other shown once, a row trained in both shown once per folder,
each reading against the baseline its own folder's; folders of one budget under different recipes are refused."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from normbench.cli import main
from normbench.report.folder import read_folder
from normbench.report.stats import versus_baseline

RECIPE = {"train": {"epochs": 1, "batch_size": 256, "warmup_epochs": 0, "telemetry_every": 0},
          "report_seeds": [100, 101]}


def trained(write_suite, tmp_path: Path, name: str, layers: list[str], lrs: tuple[float, ...] = (1e-3,),
            **extra) -> Path:
    path = write_suite(name, matrix={"depth": [1], "layer": layers, "lr": list(lrs), "seed": [0, 1]},
                       **{**RECIPE, **extra})
    out = tmp_path / f"{name}-out"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    return out


def union_rows(text: str) -> list[dict[str, str]]:
    """The "every row, ranked together" table as {header: cell} rows."""
    table = text.split("every row, ranked together")[1].split("\n\n")[1]
    lines = [[cell.strip() for cell in line.split("|")[1:-1]] for line in table.splitlines()]
    return [dict(zip(lines[0], line, strict=True)) for line in lines[2:]]


@pytest.fixture
def reference(write_suite, tmp_path, one_torch_thread) -> Path:
    return trained(write_suite, tmp_path, "reference", ["layernorm", "layerscale"])


def test_an_adopting_folders_new_rows_are_ranked_beside_the_reference_rows(reference, write_suite, tmp_path):
    newer = trained(write_suite, tmp_path, "newer", ["layernorm", "rezero"], adopt_from=[str(reference)])
    target = tmp_path / "union.md"
    assert main(["compare", str(reference), str(newer), "--out", str(target)]) == 0
    text = target.read_text()
    assert text.startswith("# normbench: one regime, several folders: `reference-out` + `newer-out`")
    rows = union_rows(text)
    assert sorted(r["layer"] for r in rows) == ["layernorm", "layerscale", "rezero"]  # layernorm once: adopted
    by_layer = {r["layer"]: r for r in rows}
    assert by_layer["layernorm"]["folder"] == "reference-out (newer-out: the same cells)"
    assert by_layer["rezero"]["folder"] == "newer-out"
    # scores and ranks from each folder's own results.csv, at full precision; bold only on the true maximum
    scores = {}
    for folder, layers in ((reference, ["layernorm", "layerscale"]), (newer, ["rezero"])):
        cells = pd.read_csv(folder / "results.csv")
        report = cells[cells["role"] == "report"].groupby("layer")["score"].mean()
        scores |= {layer: report[layer] for layer in layers}
    for layer, row in by_layer.items():
        assert row["score"].replace("*", "").split(" [")[0] == f"{scores[layer]:.2f}"
        assert ("**" in row["score"]) == (scores[layer] == max(scores.values()))
        assert int(row["rank"]) == 1 + sum(s > scores[layer] for s in scores.values())
    # each reading is its own folder's paired test, Holm over that folder's rows
    versus = versus_baseline(*(lambda a: (a.cells, a.selected, a.keys))(read_folder(newer).analysis), "layernorm")
    rezero = versus[versus["layer"] == "rezero"].iloc[0]
    assert by_layer["rezero"]["vs layernorm (its folder's reading, Holm p)"].startswith(f"{rezero['mean']:+.2f} [")
    assert by_layer["layernorm"]["vs layernorm (its folder's reading, Holm p)"] == "baseline"


def test_a_row_trained_in_both_folders_is_shown_once_per_folder(reference, write_suite, tmp_path):
    # no adopt_from, and its own lr: its layernorm row is other cells than the reference folder's
    separately = trained(write_suite, tmp_path, "separately", ["layernorm", "rezero"], lrs=[3e-3])
    target = tmp_path / "union.md"
    assert main(["compare", str(reference), str(separately), "--out", str(target)]) == 0
    rows = {r["layer"]: r for r in union_rows(target.read_text())}
    assert sorted(rows) == ["layernorm (reference-out)", "layernorm (separately-out)", "layerscale", "rezero"]
    assert rows["layernorm (separately-out)"]["folder"] == "separately-out"
    assert rows["layernorm (separately-out)"]["lr (val-selected)"].startswith("0.003")


def test_one_folder_twice_and_folders_of_other_recipes_are_refused(reference, write_suite, tmp_path, capsys):
    assert main(["compare", str(reference), str(reference)]) == 2
    assert "the same folder twice" in capsys.readouterr().err
    heads = trained(write_suite, tmp_path, "heads", ["layernorm"], model={"embed_dim": 16, "num_heads": 4,
                                                                        "patch_size": 4})
    assert main(["compare", str(reference), str(heads)]) == 2
    err = capsys.readouterr().err
    assert "different recipes" in err and "differ in one thing" in err
    other_baseline = trained(write_suite, tmp_path, "rival", ["layerscale", "rezero"], baseline="layerscale")
    assert main(["compare", str(reference), str(other_baseline)]) == 2
    assert "different baselines (reference-out: layernorm, rival-out: layerscale)" in capsys.readouterr().err


def test_the_folder_with_more_of_a_rows_seeds_shows_it(reference, write_suite, tmp_path):
    # the adopting folder has two more report seeds: its layernorm holds the reference's cells and two of its own
    more = trained(write_suite, tmp_path, "more", ["layernorm", "rezero"], adopt_from=[str(reference)],
                   report_seeds=[100, 101, 102, 103])
    target = tmp_path / "union.md"
    assert main(["compare", str(reference), str(more), "--out", str(target)]) == 0
    rows = {r["layer"]: r for r in union_rows(target.read_text())}
    assert rows["layernorm"]["folder"] == "more-out (reference-out: 2 of these 4 seeds)"
    assert rows["layernorm"]["seeds"] == "4"


def test_a_row_without_a_score_ranks_last_and_reads_as_a_dash(reference, write_suite, tmp_path):
    from normbench.report.union import union_table

    newer = trained(write_suite, tmp_path, "newer", ["layernorm", "rezero"], adopt_from=[str(reference)])
    reads = [read_folder(reference), read_folder(newer)]
    selected = reads[0].analysis.selected
    selected.loc[selected["layer"] == "layerscale", "mean"] = float("nan")  # e.g. every report cell diverged
    table, _ = union_table(reads, 1, "layernorm")
    assert list(table["layer"])[-1] == "layerscale" and table["score"].iloc[-1] == "—"
    assert list(table["rank"]) == sorted(table["rank"], key=int)  # the order is the ranks' order


def test_folders_of_one_name_are_told_apart_by_their_parents(reference, tmp_path):
    # an in-progress copy beside its published folder: both are `reference-out`; each table names the parent too
    import shutil

    copy = tmp_path / "in-progress" / reference.name
    shutil.copytree(reference, copy)
    target = tmp_path / "union.md"
    assert main(["compare", str(reference), str(copy), "--out", str(target)]) == 0
    text = target.read_text()
    ours, theirs = f"{tmp_path.name}/reference-out", "in-progress/reference-out"
    assert text.startswith(f"# normbench: one regime, several folders: `{ours}` + `{theirs}`")
    rows = {r["layer"]: r for r in union_rows(text)}
    assert sorted(rows) == ["layernorm", "layerscale"]  # the same cells: each row once
    assert rows["layernorm"]["folder"] == f"{ours} ({theirs}: the same cells)"
