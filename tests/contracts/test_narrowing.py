"""A `--set` that narrows a suite's layers or depths drops the claims (and the baseline) it leaves out, a line each on
stderr, instead of refusing the suite; what the file or a `--set` itself gets wrong is still refused."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from normbench.cli import build_parser, main
from normbench.contracts.suite import load_suite
from normbench.contracts.suite_file import overridden_text
from tests.conftest import REPO

SMOKE = REPO / "suites" / "smoke.yaml"  # claims: layerscale beats layernorm at depth 8; baseline: layernorm
CLAIM = "claims[0] (layer: layerscale, beats: layernorm, depth: 8)"


def _cli(capsys, *args) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("command", [["tune", "--dry-run", "--set", "tune.trials=1"], ["run", "--dry-run"]])
def test_narrowing_the_layers_drops_the_claims_they_leave_out_and_says_so(capsys, tmp_path, command):
    out = tmp_path / "out"
    code, listed, err = _cli(capsys, command[0], SMOKE, "--out", out, *command[1:],
                             "--set", "matrix.layer=[layernorm,rezero]")
    assert code == 0, err
    said = f"normbench: --set leaves layerscale out of the suite: dropped {CLAIM}, which no longer applies"
    assert err.strip() == said  # one line, on stderr: the listing on stdout stays the suite's
    assert "layer=layerscale" not in listed and "layer=rezero" in listed
    assert not out.exists()


def test_the_suite_as_overridden_holds_only_what_applies(tmp_path):
    """The output folder's suite.yaml (the overridden text) loads on its own: `leaderboard OUT` reads it."""
    sets = ["matrix.layer=[rmsnorm,rezero]", "matrix.depth=[2]"]
    suite = load_suite(SMOKE, sets)
    assert suite.claims == [] and suite.baseline is None  # layernorm, the file's baseline, is left out too
    assert suite.notes == [
        "--set leaves the baseline layernorm out of the matrix, so no layer is compared with a baseline (no paired "
        "comparisons); --set baseline=LAYER names another",
        f"--set leaves layerscale, layernorm, depth 8 out of the suite: dropped {CLAIM}, which no longer applies"]
    saved = tmp_path / "suite.yaml"
    saved.write_text(overridden_text(SMOKE, sets))
    again = load_suite(saved)
    assert dataclasses.replace(again, path=SMOKE) == suite and again.notes == [] and "claims: []" in saved.read_text()
    kept = load_suite(SMOKE, ["matrix.layer=[layernorm,layerscale,rezero]"])  # the claim still applies: kept
    assert [c["layer"] for c in kept.claims] == ["layerscale"] and kept.baseline == "layernorm" and kept.notes == []


@pytest.mark.parametrize("claims, sets, error", [
    # the file's own mistake: refused, narrowed or not
    ([{"layer": "rezero", "beats": "layernorm", "depth": 1}], ["matrix.lr=[3e-3]"],
     "claims[0].layer: 'rezero' is not a layer of this suite"),
    ([{"layer": "rezero", "beats": "layernorm", "depth": 1}], ["matrix.layer=[layernorm]"],
     "claims[0].layer: 'rezero' is not a layer of this suite"),
    # a claim or baseline the command line names itself
    ([], ["matrix.layer=[layernorm]", "claims=[{layer: layerscale, beats: layernorm, depth: 1}]"],
     "claims[0].layer: 'layerscale' is not a layer of this suite"),
    ([], ["matrix.layer=[layerscale]", "baseline=layernorm"], "baseline: 'layernorm' is not a layer of this suite"),
])
def test_what_the_file_or_a_set_gets_wrong_is_still_refused(write_suite, capsys, tmp_path, claims, sets, error):
    path, out = write_suite(claims=claims), tmp_path / "out"
    code, _, err = _cli(capsys, "run", path, "--out", out, *[a for s in sets for a in ("--set", s)])
    assert code == 2 and error in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_a_suite_file_whose_claim_names_no_layer_of_it_is_refused_without_any_set(write_suite):
    path = write_suite(claims=[{"layer": "rezero", "beats": "layernorm", "depth": 1}])
    with pytest.raises(Exception, match=r"claims\[0\]\.layer: 'rezero' is not a layer of this suite"):
        load_suite(path)
    assert yaml.safe_load(path.read_text())["claims"]  # nothing dropped from the file either


def test_tune_help_names_the_trials_key_and_the_dry_run():
    tune = build_parser()._subparsers._group_actions[0].choices["tune"]
    text = " ".join(tune.format_help().split())
    assert "--set tune.trials=1" in text and "--dry-run" in text and "trains nothing" in text


def test_narrowing_drops_the_interactions_it_leaves_out_too():
    """The Muon suite's interactions name rmsnorm, derf, dyt and derf_alpha03: a quick try on two layers or another
    depth keeps the suite loadable, and says what went."""
    muon = REPO / "suites" / "depth-sweep-digits-muon.yaml"
    suite = load_suite(muon, ["matrix.layer=[layernorm,derf,rmsnorm]"])
    assert [(i.layer, i.gap_to) for i in suite.interactions] == [("derf", "rmsnorm")]
    assert any("dropped interactions[1] (layer: dyt, gap_to: rmsnorm, depth: 36)" in note for note in suite.notes)
    assert load_suite(muon, ["matrix.depth=[2]"]).interactions == []
