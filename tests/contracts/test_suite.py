"""Suites are validated in full before anything runs; every mistake exits 2 with one message naming the fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from normbench.cli import main
from normbench.contracts.suite import load_suite, parse_suite
from normbench.errors import SuiteError
from tests.conftest import REPO


def run_cli(capsys, *args: str) -> tuple[int, str]:
    code = main(list(args))
    return code, capsys.readouterr().err


@pytest.mark.parametrize("overrides, expected", [
    ({"matrix": {"layer": ["layernrom"]}}, ["matrix.layer", "layernrom", "did you mean `layernorm`"]),
    ({"model": {"embed_dmi": 32}}, ["model.embed_dmi", "unknown key", "did you mean `embed_dim`"]),
    ({"train": {"epochs": "ten"}}, ["train.epochs", "expected int", "'ten'"]),
    ({"train": {"lr": True}}, ["train.lr", "expected float"]),
    ({"matrix": {"depht": [2]}}, ["matrix.depht", "did you mean `depth`"]),
    ({"matrix": {"lr": []}}, ["matrix.lr", "at least one value"]),
    ({"dataset": {"name": "cifar1000"}}, ["dataset.name", "did you mean `cifar100`"]),
    ({"trian": {"epochs": 1}}, ["unknown key `trian`", "did you mean `train`"]),
    ({"model": {"embed_dim": 30, "num_heads": 4}}, ["not divisible by num_heads"]),
    ({"name": "my suite"}, ["`name`"]),
    ({"tune": {"trials": 0, "space": {"lr": {"low": 1e-4, "high": 1e-2}}}}, ["tune.trials"]),
    ({"tune": {"trials": 2, "space": {"lr": {"low": 1e-2, "high": 1e-4}}}}, ["tune.space.lr"]),
])
def test_malformed_suite_exits_2_naming_file_key_value(write_suite, capsys, overrides, expected):
    path = write_suite(**overrides)
    code, err = run_cli(capsys, "run", str(path), "--dry-run")
    assert code == 2
    assert str(path) in err
    for fragment in expected:
        assert fragment in err
    assert "Traceback" not in err


LR = {"low": 1e-4, "high": 1e-2}


@pytest.mark.parametrize("space, expected", [
    ({"lr": {"low": 0, "high": 1, "log": True}}, "tune.space.lr: log: true needs low > 0 (a log scale has no 0 or "
                                                 "negatives), got low 0; set low to a positive value (e.g. 0.001)"),
    ({"lr": {"low": -1e-3, "high": 1e-2, "log": True}}, "tune.space.lr: log: true needs low > 0"),
    ({"lr": {"low": 1e-2, "high": 1e-4}}, "tune.space.lr: expected {low: a, high: b} with a < b, got low 0.01 and "
                                          "high 0.0001; swap them"),
    ({"lr": {"choices": []}}, "tune.space.lr.choices: expected a list of one or more values to try, got []"),
    ({"lr": {**LR, "log": True, "step": 1e-4}}, "tune.space.lr: step and log: true do not combine"),
    ({"lr": {**LR, "step": 0}}, "tune.space.lr.step: expected a positive number, got 0"),
    ({"depth": {"low": 1, "high": 4, "step": 0.5}}, "tune.space.depth.step: expected a positive integer, got 0.5"),
    ({"depth": {"low": 1, "high": 8, "log": True}}, "tune.space.depth: log: true samples floats, but depth is an "
                                                    "integer; drop log"),
    ({"depth": {"low": 1.5, "high": 4}}, "tune.space.depth.low: expected int, got 1.5"),
    ({"lr": {"low": 0, "high": 1}}, "tune.space.lr: low 0 and high 1 are integers, so only whole numbers would be "
                                    "tried; write them as floats (low: 0.0, high: 1.0)"),
    ({"lr": {"low": "small", "high": 1e-2}}, "tune.space.lr.low: expected a number, got 'small'"),
    ({"lr": {**LR, "log": "yes"}}, "tune.space.lr.log: expected true or false, got 'yes'"),
    ({"lr": {"choices": [1e-3, "fast"]}}, "tune.space.lr.choices: expected float, got 'fast'"),
    ({"layer": {"low": 1, "high": 2}}, "tune.space.layer.low: expected str, got 1"),
    ({"lr": {**LR, "scale": "log"}}, "tune.space.lr: expected {low: a, high: b} (and optionally log: true, or step"),
])
@pytest.mark.parametrize("command", [["run", "--dry-run"], ["tune", "--dry-run"], ["tune"]])
def test_a_tune_space_optuna_would_refuse_is_one_line_when_the_suite_is_read(write_suite, capsys, tmp_path,
                                                                             monkeypatch, space, expected, command):
    """Optuna's own ValueError came mid-tune, as a traceback (exit 1), after runs/<suite>/ held a ledger."""
    path = write_suite(tune={"trials": 1, "space": space})
    monkeypatch.chdir(tmp_path)
    code, err = run_cli(capsys, command[0], str(path), *command[1:])  # the default output folder: runs/tiny
    assert code == 2 and err.startswith(f"normbench: error: {path}: tune.space."), err
    assert expected in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "runs").exists()  # nothing created


def test_tune_spaces_optuna_takes_load(write_suite):
    space = {"lr": {**LR, "log": True}, "drop_path_rate": {"low": 0.0, "high": 0.3, "step": 0.1},
             "depth": {"low": 1, "high": 3}, "weight_decay": {"choices": [0.0, 0.05]},
             "layer": {"choices": ["layernorm", "rezero"]}}
    assert load_suite(write_suite(tune={"trials": 2, "space": space})).tune.space == space


def test_invalid_yaml_and_missing_file_exit_2_without_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nmatrix: [depth: 1\n")
    for path in (bad, tmp_path / "nope.yaml"):
        proc = subprocess.run([sys.executable, "-m", "normbench", "run", str(path)], capture_output=True, text=True,
                              cwd=REPO)
        assert proc.returncode == 2, proc.stderr
        assert str(path) in proc.stderr and "Traceback" not in proc.stderr


def test_matrix_expands_in_order_with_single_values_and_extra_axes(write_suite):
    path = write_suite(matrix={"depth": [2, 4], "layer": "rezero", "drop_path_rate": [0.0, 0.1], "seed": [0]})
    suite = load_suite(path)
    cells = suite.cells()
    assert [c.cell_id for c in cells] == [  # expanded in file order; each id names its axes sorted
        "depth=2,drop_path_rate=0,layer=rezero,seed=0", "depth=2,drop_path_rate=0.1,layer=rezero,seed=0",
        "depth=4,drop_path_rate=0,layer=rezero,seed=0", "depth=4,drop_path_rate=0.1,layer=rezero,seed=0"]
    assert cells[1].config.model.drop_path_rate == 0.1 and cells[3].config.model.depth == 4
    assert cells[0].config.model.embed_dim == 16  # the base recipe reaches every cell


def test_shipped_suites_are_valid():
    for path in sorted((REPO / "suites").glob("*.yaml")):
        suite = load_suite(path)
        assert suite.cells(), path


def test_dry_run_lists_cells(write_suite, capsys, tmp_path):
    code = main(["run", str(write_suite()), "--dry-run", "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert code == 0 and "depth=1,layer=layerscale,lr=0.001,seed=0" in out and "to run" in out


@pytest.mark.parametrize("overrides, expected", [
    ({"bracket": "yes"}, ["bracket", "true or false"]),
    ({"bracket": True}, ["bracket", "matrix.lr", "at least two"]),  # TINY has one lr: no ratio to step by
    ({"bracket_max_steps": 0}, ["bracket_max_steps", "positive int"]),
    ({"lr_bounds": [1e-2, 1e-5]}, ["lr_bounds", "0 < low < high"]),
    ({"lr_bounds": 1e-5}, ["lr_bounds", "[low, high]"]),
    ({"lr_bounds": [1e-5, 1e-4]}, ["lr_bounds", "leaves out matrix.lr [0.001]"]),
    ({"baseline": "layernrom"}, ["baseline", "did you mean `layernorm`"]),
    ({"claims": {"layer": "layerscale"}}, ["claims", "a list"]),
    ({"claims": [{"layer": "layerscale", "beats": "layernorm"}]}, ["claims[0]", "depth"]),
    ({"claims": [{"layer": "layerscale", "beats": "rezero", "depth": 1}]}, ["claims[0].beats", "'rezero'"]),
    ({"claims": [{"layer": "layerscale", "steadier_than": "rezero", "depth": 1}]},
     ["claims[0].steadier_than", "'rezero'"]),
    ({"claims": [{"layer": "layerscale", "beats": "layernorm", "steadier_than": "layernorm", "depth": 1}]},
     ["claims[0]", "steadier_than: B"]),
    ({"claims": [{"layer": "layerscale", "depth": 1}]}, ["claims[0]", "beats: B", "steadier_than: B"]),
    ({"claims": [{"layer": "layerscale", "beats": None, "depth": 1}]}, ["claims[0].beats", "None"]),
    ({"claims": [{"layer": "layerscale", "beats": "layernorm", "depth": 36}]}, ["claims[0].depth", "depths: 1"]),
    ({"claims": [{"layer": "layerscale", "beats": "layernorm", "depth": 1, "bye": 2}]}, ["did you mean `by`"]),
    ({"claims": [{"layer": "layerscale", "beats": "layernorm", "depth": 1, "by": "3"}]}, ["claims[0].by"]),
    ({"claims": [{"layer": "layerscale", "beats": "layernorm", "depth": 1, "claimed": "+3"}]},
     ["claims[0].claimed", "number of points"]),
    ({"report_seeds": [0, 100]}, ["report_seeds", "[0] also select the lr", "fresh"]),  # TINY selects on seed 0
    ({"report_seeds": 100}, ["report_seeds", "list of integer seeds"]),
    ({"report_seeds": [100, 100]}, ["report_seeds", "repeated"]),
    ({"targets": [50, 150]}, ["targets", "(0, 100]"]),
    ({"targets": []}, ["targets", "percentages"]),
])
def test_malformed_protocol_keys_exit_2_naming_the_key(write_suite, capsys, overrides, expected):
    code, err = run_cli(capsys, "run", str(write_suite(**overrides)), "--dry-run")
    assert code == 2
    for fragment in expected:
        assert fragment in err


def test_bracket_flag_needs_an_lr_grid(write_suite, capsys):
    code, err = run_cli(capsys, "run", str(write_suite()), "--bracket", "--dry-run")
    assert code == 2 and "bracket" in err and "matrix.lr" in err


def test_protocol_keys_parse_with_defaults(write_suite):
    claim = {"layer": "layerscale", "beats": "layernorm", "depth": 1}
    suite = load_suite(write_suite(claims=[claim, {**claim, "by": 3.4}]))
    assert suite.baseline == "layernorm" and not suite.bracket and suite.bracket_max_steps is None
    assert suite.lr_bounds == (1e-5, 1e-1)  # bracketing v3 stops at these unless a cap is set
    assert [c["by"] for c in suite.claims] == [0.0, 3.4]
    assert suite.report_seeds == [] and suite.targets == [50.0, 70.0, 90.0]
    chosen = load_suite(write_suite(report_seeds=[101, 100], targets=[90, 30]))
    assert chosen.report_seeds == [101, 100] and chosen.targets == [30.0, 90.0] and chosen.selection_seeds() == [0]
    no_layernorm = write_suite(matrix={"depth": [1], "layer": ["rezero", "layerscale"], "lr": [1e-3, 3e-3]})
    assert load_suite(no_layernorm).baseline is None  # no comparison section unless a baseline is named


def test_shipped_suites_state_the_seed_claims():
    suite = load_suite(REPO / "suites" / "depth-sweep-digits.yaml")
    assert {(c["layer"], c["beats"], c["depth"], c["by"]) for c in suite.claims} == {
        ("layerscale", "layernorm", 24, 0.0), ("layerscale", "layernorm", 36, 0.0),
        ("learnable_scaler", "layernorm", 36, 3.4)}


@pytest.mark.parametrize("key", ["telemetry_every", "attn_extra_loss", "attn_extra_loss_layers",
                                 "train_feature_decay"])
def test_a_negative_telemetry_or_aux_loss_setting_is_refused_naming_the_key(tmp_path, key):
    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\ndataset: {{name: digits}}\ntrain: {{{key}: -1}}\n"
                    "matrix: {depth: [1], layer: [layernorm], lr: [1.0e-3], seed: [0]}\n")
    with pytest.raises(SuiteError, match=f"train.{key}: must be 0"):
        load_suite(path)


def test_a_claim_is_tested_against_its_claimed_margin_unless_by_says_otherwise():
    base = {"name": "c", "dataset": {"name": "digits"},
            "matrix": {"depth": [1], "layer": ["layernorm", "layerscale"], "lr": [1e-3]}}
    claim = {"layer": "layerscale", "beats": "layernorm", "depth": 1, "claimed": 3.4}
    assert parse_suite({**base, "claims": [claim]}, Path("c.yaml")).claims[0]["by"] == 3.4
    assert parse_suite({**base, "claims": [{**claim, "by": 0}]}, Path("c.yaml")).claims[0]["by"] == 0.0


def test_how_a_cell_is_kept_is_not_its_recipe(write_suite):
    """checkpoint_minutes and keep_weights change no result: a suite that sets them keeps its recipe hash (its
    ledger resumes), and neither the logged params nor the report's recipe line list them."""
    plain = load_suite(write_suite())
    kept = load_suite(write_suite(train={**plain.train, "checkpoint_minutes": 0.5, "keep_weights": "final"}))
    assert kept.recipe_hash() == plain.recipe_hash()
    config = kept.cells()[0].config
    assert config.train.checkpoint_minutes == 0.5 and config.train.keep_weights == "final"
    assert not {"train.checkpoint_minutes", "train.keep_weights"} & set(config.flat())
    changed = load_suite(write_suite(train={**plain.train, "weight_decay": 0.5}))
    assert changed.recipe_hash() != plain.recipe_hash()
