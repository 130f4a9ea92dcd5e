"""`normbench tune --dry-run`: the searches, their trials finished of the budget and the re-runs; trains nothing,
writes nothing, and refuses what `tune` refuses."""

from __future__ import annotations

from normbench.cli import main

TUNE = {"trials": 2, "space": {"lr": {"low": 1e-3, "high": 1e-2, "log": True}}}


def test_tune_dry_run_lists_the_searches_then_counts_what_the_ledger_finished(write_suite, tmp_path, capsys,
                                                                            one_torch_thread):
    path, out = write_suite(tune=TUNE), tmp_path / "out"
    assert main(["tune", str(path), "--out", str(out), "--dry-run"]) == 0
    listed = capsys.readouterr().out
    assert "depth=1,layer=layernorm   0/2" in listed and "depth=1,layer=layerscale  0/2" in listed
    assert ("2 searches x 2 trials of lr on seed 1, then each search's best configuration on seed(s) [0]: 2 re-runs "
            f"(0 finished); output folder {out}. Nothing was trained") in listed
    assert not out.exists()
    assert main(["tune", str(path), "--out", str(out), "--quiet", "--set", "tune.trials=1"]) == 0
    before = sorted(p.name for p in out.iterdir())
    assert main(["tune", str(path), "--out", str(out), "--dry-run", "--set", "tune.trials=1"]) == 0
    listed = capsys.readouterr().out
    assert "depth=1,layer=layernorm   1/1" in listed and "2 re-runs (2 finished)" in listed
    assert sorted(p.name for p in out.iterdir()) == before


def test_tune_dry_run_of_a_suite_without_tune_names_what_to_add(write_suite, tmp_path, capsys):
    path = write_suite()
    assert main(["tune", str(path), "--out", str(tmp_path / "out"), "--dry-run"]) == 2
    assert "has no `tune:` section; add one with `trials:` and `space:`" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_tune_dry_run_shows_the_groups_fuse_would_form_within_each_searchs_in_flight_bound(write_suite, tmp_path,
                                                                                            capsys):
    """TPE with 2 startup trials: a search trains at most 2 trials at once, so 5 trials fuse as 2 + 2 + 1; a row
    whose search draws a tunable that builds other modules (hyper-connections' expansion rate) trains alone."""
    tune = {"trials": 5, "confirm_top": 2, "sampler": "tpe", "startup_trials": 2,
            "space": {"lr": {"low": 1e-3, "high": 1e-2, "log": True}, "layer.init_values": "source",
                      "layer.expansion_rate": "source"}}
    path = write_suite(matrix={"depth": [1], "layer": ["layerscale", "hc"], "seed": [0]}, report_seeds=[100, 101],
                       tune=tune)
    assert main(["tune", str(path), "--out", str(tmp_path / "out"), "--dry-run", "--device", "cuda",
                 "--fuse", "4"]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    assert line.startswith("fused groups on cuda, groups of 2 to 4 cells"), line
    assert line.endswith("searches: 2 of 2 (+6 alone); confirmations: 1 of 2 (+2 alone); re-runs: 2 of 2"), line
    assert main(["tune", str(path), "--out", str(tmp_path / "out"), "--dry-run", "--device", "cpu"]) == 0
    assert "fused groups" not in capsys.readouterr().out  # auto on a CPU: unfused
