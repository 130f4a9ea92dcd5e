"""contracts/cell_checks.py's Muon checks: timm's Muon names other than normbench's recipes, and `muon_momentum`
without Muon or out of range, are refused when the suite loads (exit 2, one line, nothing created); the recipes and
their keys load."""

from __future__ import annotations

import pytest

from normbench.contracts.suite import load_suite
from tests.contracts.test_suite import run_cli

TRAIN = {"epochs": 1, "batch_size": 256, "warmup_epochs": 0}  # TINY's


@pytest.mark.parametrize("overrides, expected", [
    ({"train": {**TRAIN, "optimizer": "nmuon"}}, ["train.optimizer: 'nmuon' is not one of normbench's Muon recipes",
                                                  "the classifier onto Muon", "NAdamW", "use muon or adamuon"]),
    ({"train": {**TRAIN, "optimizer": "nadamuon"}}, ["'nadamuon'", "NAdamW"]),
    ({"train": {**TRAIN, "optimizer": "lookahead_muon"}}, ["'lookahead_muon' is not one of normbench's Muon"]),
    ({"train": {**TRAIN, "muon_momentum": 0.9}}, ["train.muon_momentum: 0.9 is set, but train.optimizer 'adamw' "
                                                  "has no Muon part", "use optimizer: muon"]),
    ({"train": {**TRAIN, "optimizer": "muon", "muon_momentum": 1.0}},
     ["train.muon_momentum: must lie in [0, 1) (the reference's 0.95), got 1.0"]),
    ({"train": {**TRAIN, "optimizer": "muon", "muon_momentum": -0.5}}, ["train.muon_momentum: must lie in [0, 1)"]),
    ({"train": {**TRAIN, "optimizer": "muon", "muon_momentum": "high"}}, ["train.muon_momentum", "'high'"]),
    ({"train": {**TRAIN, "optimizer": "muon"},
      "matrix": {"depth": [1], "layer": ["layernorm"], "muon_momentum": [0.9, 1.5]}},
     ["matrix.muon_momentum: must lie in [0, 1)", "(cell depth=1,layer=layernorm,muon_momentum=1.5)"]),
    ({"train": TRAIN, "matrix": {"depth": [1], "layer": ["layernorm"], "optimizer": ["adamw", "nmuon"]}},
     ["matrix.optimizer: 'nmuon'", "(cell depth=1,layer=layernorm,optimizer=nmuon)"]),
])
def test_a_muon_the_recipe_does_not_build_is_refused_before_any_output_exists(write_suite, capsys, tmp_path,
                                                                              overrides, expected):
    path, out = write_suite(**overrides), tmp_path / "out"
    code, err = run_cli(capsys, "run", str(path), "--out", str(out), "--device", "cpu")
    assert code == 2 and str(path) in err and "Traceback" not in err
    for fragment in expected:
        assert fragment in err, err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.parametrize("train", [{"optimizer": "muon"}, {"optimizer": "Muon"}, {"optimizer": "adamuon"},
                                   {"optimizer": "muon", "muon_momentum": 0.9},
                                   {"optimizer": "muon", "muon_momentum": 0}])
def test_the_muon_recipes_and_their_momentum_load(write_suite, train):
    assert load_suite(write_suite(train={**TRAIN, **train})).cells()


def test_adam_beta2_reaches_the_optimizer_and_is_refused_outside_an_adam_family_or_zero_one():
    from pathlib import Path

    import pytest

    from normbench.contracts.suite import parse_suite
    from normbench.errors import SuiteError
    from normbench.train.loop import build_fit

    def suite(train: dict):
        return parse_suite({"name": "b", "dataset": {"name": "digits"}, "model": {"embed_dim": 16, "num_heads": 2},
                            "train": {"epochs": 1, "warmup_epochs": 0, **train},
                            "matrix": {"depth": [1], "layer": ["layernorm"]}},
                           Path("b.yaml"))

    for optimizer in ("adamw", "muon"):
        cell = suite({"optimizer": optimizer, "adam_beta2": 0.95}).cells()[0]
        fit = build_fit(cell.config, "cpu", None, None)
        adam_groups = [g for g in fit.optimizer.param_groups if not g.get("use_muon")]
        assert adam_groups and all(g["betas"] == (0.9, 0.95) for g in adam_groups), optimizer
    default = build_fit(suite({}).cells()[0].config, "cpu", None, None)
    assert all(g["betas"] == (0.9, 0.999) for g in default.optimizer.param_groups)
    with pytest.raises(SuiteError, match="keeps no Adam second moment"):
        suite({"optimizer": "sgd", "adam_beta2": 0.95})
    with pytest.raises(SuiteError, match=r"must lie in \(0, 1\)"):
        suite({"adam_beta2": 1.0})
