"""`normbench tune`: the search trains on a seed no re-run uses, and the re-runs are reported by test top-1."""

from __future__ import annotations

import math

import pandas as pd
from optuna.trial import FrozenTrial, TrialState

from normbench.cli import main
from normbench.contracts.selection import chosen_lrs
from normbench.contracts.suite import load_suite
from normbench.store.ledger import Ledger
from normbench.sweep.tune import LABEL, best_trial, search_seed, seeds
from tests.sweep.test_runner import mlflow_runs


def test_search_and_reruns_use_disjoint_seeds(write_suite, tmp_path):
    path = write_suite(name="tn", matrix={"depth": [1], "layer": ["layernorm"], "seed": [0, 1]},
                       tune={"trials": 2, "space": {"lr": {"low": 1e-3, "high": 1e-2, "log": True}}})
    suite = load_suite(path)
    assert seeds(suite) == [0, 1] and search_seed(suite) == 2
    out = tmp_path / "out"
    assert main(["tune", str(path), "--out", str(out), "--quiet"]) == 0
    tuned = Ledger(None, out).study("tuned:tn").get_trials(deepcopy=False)
    assert {t.user_attrs["axes"]["seed"] for t in tuned} == {0, 1}
    runs = mlflow_runs(out, "tn")
    search = [r for r in runs if "trial=" in r.data.tags["cell_id"]]
    assert len(search) == 2 and {r.data.params["seed"] for r in search} == {"2"}  # never a re-run seed
    assert sorted(r.data.params["seed"] for r in runs if r not in search) == ["0", "1"]
    board = (out / "leaderboard.md").read_text()
    assert "re-run on seeds the search did not train on" in board and "| layernorm " in board
    row = next(line for line in board.split("## tuned", 1)[1].splitlines() if line.startswith("| layernorm "))
    assert "test top-1" in board and "[" in row  # two seeds: a CI
    assert pd.notna(tuned[0].user_attrs["result"]["test_top1"])


def test_changed_recipe_refuses_to_resume_a_tune_and_leaves_its_folder_alone(write_suite, tmp_path, capsys):
    tune = {"trials": 1, "space": {"lr": {"low": 1e-3, "high": 1e-2, "log": True}}}
    matrix = {"depth": [1], "layer": ["layernorm"], "seed": [0]}
    out = tmp_path / "out"
    assert main(["tune", str(write_suite(name="tr", matrix=matrix, tune=tune)), "--out", str(out), "--quiet"]) == 0
    saved, journal = (out / "suite.yaml").read_text(), (out / "ledger.journal").read_bytes()
    changed = write_suite(name="tr", matrix=matrix, tune=tune, train={"epochs": 2})
    assert main(["tune", str(changed), "--out", str(out), "--quiet"]) == 2
    assert "changed since the cells in this ledger" in capsys.readouterr().err
    assert (out / "suite.yaml").read_text() == saved  # `normbench leaderboard OUT` still reads the recipe trained
    assert (out / "ledger.journal").read_bytes() == journal


def test_tune_alone_writes_results_tables_and_figures_and_its_lines_show_the_sampled_lr(write_suite, tmp_path,
                                                                                          capsys):
    path = write_suite(name="ta", matrix={"depth": [1], "layer": ["layernorm"], "seed": [0, 1]},
                       tune={"trials": 2, "space": {"lr": {"low": 1e-3, "high": 1e-2, "log": True}}})
    out = tmp_path / "out"
    assert main(["tune", str(path), "--out", str(out)]) == 0
    lines = capsys.readouterr().err.splitlines()
    searched = Ledger(None, out).study("tune:ta:depth=1,layer=layernorm").get_trials(deepcopy=False)
    for t in searched:  # `[1/4] depth=1,layer=layernorm,lr=0.00354,trial=0  ok  val 27.8%  ...`
        label = f"depth=1,layer=layernorm,lr={t.params['lr']:.3g},trial={t.number}"
        assert any(f"{label}  ok  val " in line for line in lines), lines
        assert t.user_attrs[LABEL] == label  # what the parent of `--workers` prints for it

    cells = pd.read_csv(out / "results.csv")  # was not written: `tune` alone has no run cells
    search, reruns = cells[cells["role"] == "select"], cells[cells["role"] == "report"]
    assert sorted(search["lr"]) == sorted(t.params["lr"] for t in searched) and set(search["seed"]) == {2}
    best = max(searched, key=lambda t: (t.value, -t.params["lr"]))
    assert sorted(reruns["seed"]) == [0, 1] and set(reruns["lr"]) == {best.params["lr"]}
    assert (out / "history.csv").is_file() and (out / "accuracy_vs_lr.png").stat().st_size > 0
    board = (out / "leaderboard.md").read_text()
    assert "No finished cells yet" not in board
    row = next(line for line in board.splitlines() if line.startswith("| 1") and "| layernorm " in line)
    assert "| 2 report " in row  # the selection picked tune's lr, so the two re-runs on fresh seeds score it
    header = next(line for line in board.splitlines() if line.startswith("| rank "))
    assert "| edge " not in header and "| lr window " not in header and "lr sensitivity" not in header  # grid's


def test_tune_exits_1_and_names_the_cells_failed_for_good_like_run(monkeypatch, capsys):
    from normbench.sweep import suite_run
    from normbench.sweep.worker import WorkSummary

    lost = WorkSummary(cells_run=3, failed_for_good={"depth=1,layer=poison_norm,lr=0.001,seed=0": 3})
    monkeypatch.setattr(suite_run, "run_suite", lambda *args, **kwargs: lost)
    for command in ("run", "tune"):
        assert main([command, "suites/smoke.yaml", "--quiet"]) == 1, command
        assert "failed for good" in capsys.readouterr().err
    monkeypatch.setattr(suite_run, "run_suite", lambda *args, **kwargs: WorkSummary(cells_run=3))
    assert main(["tune", "suites/smoke.yaml", "--quiet"]) == 0


def search_trial(number: int, lr: float, value: float | None):
    """A finished search trial (its value None: an objective that never came back, as a frame's missing `select`)."""
    return FrozenTrial(number=number, trial_id=number, state=TrialState.COMPLETE, value=value, params={"lr": lr},
                       distributions={}, user_attrs={}, system_attrs={}, intermediate_values={},
                       datetime_start=None, datetime_complete=None)


def test_tunes_winner_is_the_selection_rules_choice_with_a_missing_value_and_a_tie():
    # lr 3e-3 has no value: the old rule counted it as -1.0 and tied it above nothing, choose_lr never picks it;
    # 1e-3 and 1e-2 tie at 80: the smaller lr wins
    trials = [search_trial(0, 3e-3, None), search_trial(1, 1e-2, 80.0), search_trial(2, 1e-3, 80.0),
              search_trial(3, 3e-2, 10.0)]
    frame = pd.DataFrame({"layer": "ln", "lr": [t.params["lr"] for t in trials],
                          "select": [math.nan if t.value is None else t.value for t in trials]})
    assert best_trial(trials).params["lr"] == chosen_lrs(frame, ["layer"])["lr"].item() == 1e-3
    only_missing = [search_trial(0, 3e-3, None), search_trial(1, 1e-2, -5.0)]  # a number beats no number
    assert best_trial(only_missing).number == 1
    same_lr = [search_trial(0, 1e-3, 50.0), search_trial(1, 1e-3, 70.0), search_trial(2, 1e-3, 70.0)]
    assert best_trial(same_lr).number == 1  # the lr's best val, ties to the earlier trial


def test_every_space_a_suite_may_hold_is_sampled_as_written():
    """A float range's step was dropped (drop_path_rate 0..0.3 by 0.1 sampled any float); contracts/suite.py checks
    a space against the rules `suggest` samples by."""
    import optuna

    from normbench.sweep.tune import suggest

    space = {"drop_path_rate": {"low": 0.0, "high": 0.3, "step": 0.1}, "depth": {"low": 1, "high": 7, "step": 2},
             "lr": {"low": 1e-4, "high": 1e-2, "log": True}, "weight_decay": {"choices": [0.0, 0.05]}}
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(20):
        trial = study.ask()
        drawn = {key: suggest(trial, key, dist) for key, dist in space.items()}
        assert round(drawn["drop_path_rate"] * 10, 9) in (0, 1, 2, 3), drawn
        assert drawn["depth"] in (1, 3, 5, 7) and 1e-4 <= drawn["lr"] <= 1e-2 and drawn["weight_decay"] in (0.0, 0.05)
        study.tell(trial, 0.0)


def test_a_confirmed_winner_is_the_best_mean_of_its_two_search_seeds():
    def trial(number: int, value: float) -> FrozenTrial:
        return FrozenTrial(number=number, state=TrialState.COMPLETE, value=value, datetime_start=None,
                           datetime_complete=None, params={"lr": 1e-3 * (number + 1)}, distributions={},
                           user_attrs={}, system_attrs={}, intermediate_values={}, trial_id=number)

    search = [trial(0, 90.0), trial(1, 80.0), trial(2, 85.0)]
    assert best_trial(search).number == 0  # one seed: the luckiest draw wins
    assert best_trial(search, {0: 60.0, 2: 84.0}).number == 2  # (90 + 60) / 2 < (85 + 84) / 2: its luck is gone
    assert best_trial(search, {0: 80.0, 2: 85.0}).number == 0  # a tie of means goes to the earlier trial


def test_the_best_trials_are_confirmed_on_a_second_seed_then_the_winner_reruns_on_the_report_seeds(write_suite,
                                                                                                    tmp_path):
    from normbench.sweep.tune import confirm_seed

    path = write_suite(name="tc", matrix={"depth": [1], "layer": ["layerscale"], "seed": [0]},
                       report_seeds=[100, 101],
                       tune={"trials": 3, "confirm_top": 2,
                             "space": {"lr": {"low": 1e-3, "high": 1e-2, "log": True},
                                       "layer.init_values": "source"}})
    suite = load_suite(path)
    assert (search_seed(suite), confirm_seed(suite), seeds(suite)) == (102, 103, [100, 101])
    out = tmp_path / "out"
    assert main(["tune", str(path), "--out", str(out), "--quiet"]) == 0
    ledger = Ledger(None, out)
    searched = ledger.study("tune:tc:depth=1,layer=layerscale").get_trials(deepcopy=False)
    assert all(1e-6 <= t.params["layer.init_values"] <= 0.1 for t in searched)  # LayerScale's own ε, searched
    confirmed = ledger.study("confirm:tc").get_trials(deepcopy=False)
    best_two = sorted(searched, key=lambda t: (-t.value, t.number))[:2]
    assert sorted(t.user_attrs["axes"]["search_trial"] for t in confirmed) == sorted(t.number for t in best_two)
    assert {t.user_attrs["axes"]["seed"] for t in confirmed} == {103} and len(confirmed) == 2  # each queued once
    # the winner is the lr the leaderboard's rule picks from both seeds of the confirmed trials (ties: smaller lr)
    both = [(searched[n].params["lr"], value) for t in confirmed
            for n in [t.user_attrs["axes"]["search_trial"]] for value in (searched[n].value, t.value)]
    lr = chosen_lrs(pd.DataFrame({"layer": "ls", "lr": [b[0] for b in both], "select": [b[1] for b in both]}),
                    ["layer"])["lr"].item()
    [winner] = [n for n in (t.user_attrs["axes"]["search_trial"] for t in confirmed) if searched[n].params["lr"] == lr]
    tuned = ledger.study("tuned:tc").get_trials(deepcopy=False)
    assert {t.user_attrs["axes"]["seed"] for t in tuned} == {100, 101}
    assert all(t.user_attrs["overrides"] == searched[winner].params for t in tuned)


def test_a_search_trial_finishing_after_the_confirmations_were_chosen_adds_none(write_suite, tmp_path):
    """A crashed slot re-run by a later start can finish after the best trials were queued on the confirmation
    seed; a third confirmation beside them could move the winner away from the re-runs already queued."""
    from optuna.distributions import FloatDistribution
    from optuna.trial import create_trial

    from normbench.contracts.names import StudyNames
    from normbench.sweep.cells import open_study_of_recipe
    from normbench.sweep.tune import _confirmations_queued

    suite = load_suite(write_suite(name="cq", matrix={"depth": [1], "layer": ["layernorm"], "seed": [0]},
                                   tune={"trials": 4, "confirm_top": 2,
                                         "space": {"lr": {"low": 1e-3, "high": 1e-2, "log": True}}}))
    ledger, names = Ledger(None, tmp_path), StudyNames("cq")
    key = {"depth": 1, "layer": "layernorm"}
    search = open_study_of_recipe(ledger, suite, names.tune("depth=1,layer=layernorm"))
    lr = {"lr": FloatDistribution(1e-3, 1e-2, log=True)}
    for value, rate in ((70.0, 1e-3), (80.0, 2e-3), (75.0, 4e-3)):
        search.add_trial(create_trial(value=value, params={"lr": rate}, distributions=lr))
    assert _confirmations_queued(ledger, names.confirm, [(key, search)], 2, suite)
    search.add_trial(create_trial(value=99.0, params={"lr": 8e-3}, distributions=lr))  # the late slot, the best
    _confirmations_queued(ledger, names.confirm, [(key, search)], 2, suite)
    confirmed = ledger.study(names.confirm).get_trials(deepcopy=False)
    assert sorted(t.user_attrs["axes"]["search_trial"] for t in confirmed) == [1, 2]


def test_confirmed_trials_whose_means_tie_go_to_the_smaller_lr_as_the_leaderboard_chooses():
    """Two confirmed trials tie on the mean of their two seeds (val on 360 images moves in steps of 1/3.6 points):
    the re-run must be the configuration the leaderboard's rule scores, or its report cells sit at an lr it did not
    choose. The old rule took the earlier trial."""
    search = [search_trial(0, 3e-3, 90.0), search_trial(1, 1e-3, 90.5), search_trial(2, 5e-3, 70.0)]
    confirmed = {0: 91.0, 1: 90.5}  # both mean 90.5
    frame = pd.DataFrame({"layer": "ln", "lr": [3e-3, 3e-3, 1e-3, 1e-3], "select": [90.0, 91.0, 90.5, 90.5]})
    assert best_trial(search, confirmed).number == 1
    assert best_trial(search, confirmed).params["lr"] == chosen_lrs(frame, ["layer"])["lr"].item() == 1e-3


def test_every_rows_random_startup_trials_draw_the_same_shared_values(write_suite, tmp_path):
    """Common random numbers: trial n of each row draws the same lr and weight decay (the row's own keys come
    after them), so two rows differ by what they train, not by a luckier draw."""
    path = write_suite(name="cr", matrix={"depth": [1], "layer": ["layernorm", "layerscale"], "seed": [0]},
                       tune={"trials": 2, "space": {"lr": {"low": 1e-3, "high": 1e-2, "log": True},
                                                    "weight_decay": {"low": 0.0, "high": 0.2},
                                                    "layer.init_values": "source"}})
    out = tmp_path / "out"
    assert main(["tune", str(path), "--out", str(out), "--quiet"]) == 0
    ledger = Ledger(None, out)
    rows = [sorted(ledger.study(f"tune:cr:depth=1,layer={layer}").get_trials(deepcopy=False), key=lambda t: t.number)
            for layer in ("layernorm", "layerscale")]
    shared = [[(t.params["lr"], t.params["weight_decay"]) for t in row] for row in rows]
    assert shared[0] == shared[1] and len(set(shared[0])) == 2, shared
    assert all("layer.init_values" in t.params for t in rows[1])


def test_a_space_value_no_cell_accepts_is_refused_before_any_trial(write_suite, tmp_path, capsys):
    path = write_suite(name="bs", matrix={"depth": [1], "layer": ["layernorm"], "seed": [0]},
                       tune={"trials": 2, "space": {"adam_beta2": {"choices": [0.95, 1.5]}}})
    for extra in (["--dry-run"], ["--quiet"]):
        assert main(["tune", str(path), "--out", str(tmp_path / "out"), *extra]) == 2
        assert "tune.space.adam_beta2 may draw 1.5: train.adam_beta2: must lie in (0, 1)" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # refused before OUT or its ledger is written: nothing to clean up


def test_a_suite_without_tune_is_refused_before_out_is_created(write_suite, tmp_path, capsys):
    path = write_suite(name="nt", matrix={"depth": [1], "layer": ["layernorm"], "seed": [0]})
    assert main(["tune", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    assert "has no `tune:` section" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # was: an empty ledger.journal that the next `run --out` had to accept


def test_a_restarted_tune_queues_no_search_slot_twice(write_suite, tmp_path):
    path = write_suite(name="rs", matrix={"depth": [1], "layer": ["layernorm"], "seed": [0]},
                       tune={"trials": 2, "space": {"lr": {"low": 1e-3, "high": 1e-2, "log": True}}})
    out = tmp_path / "out"
    for _ in range(2):  # the second run finds every slot finished: it must neither queue nor fail any
        assert main(["tune", str(path), "--out", str(out), "--quiet"]) == 0
    searched = Ledger(None, out).study("tune:rs:depth=1,layer=layernorm").get_trials(deepcopy=False)
    assert len(searched) == 2 and {t.state for t in searched} == {TrialState.COMPLETE}


def test_the_pruner_is_asked_only_after_prune_after_of_a_trials_epochs(write_suite, tmp_path, monkeypatch):
    from normbench.store.claim import Claim

    asked: list[int] = []

    def always(claim: Claim) -> bool:  # a pruner that stops every trial it is asked about
        asked.append(len(claim.trial.storage.get_trial(claim.id).intermediate_values))
        return True

    monkeypatch.setattr(Claim, "should_prune", always)
    path = write_suite(name="pa", matrix={"depth": [1], "layer": ["layernorm"], "seed": [0]},
                       train={"epochs": 4, "batch_size": 256, "warmup_epochs": 0},
                       tune={"trials": 1, "prune_after": 0.5, "space": {"lr": {"low": 1e-3, "high": 1e-2}}})
    out = tmp_path / "out"
    assert main(["tune", str(path), "--out", str(out), "--quiet"]) == 0
    [trial] = Ledger(None, out).study("tune:pa:depth=1,layer=layernorm").get_trials(deepcopy=False)
    assert asked == [2] and trial.state == TrialState.PRUNED  # epochs 1 and 2 trained, then asked once
    assert len(trial.user_attrs["history"]) == 2


def test_a_tune_resumed_with_another_search_space_is_refused_and_the_ledger_kept(write_suite, tmp_path, capsys):
    matrix = {"depth": [1], "layer": ["layernorm"], "seed": [0]}
    tune = {"trials": 1, "space": {"lr": {"low": 1e-3, "high": 1e-2, "log": True}}}
    out = tmp_path / "out"
    assert main(["tune", str(write_suite(name="ts", matrix=matrix, tune=tune)), "--out", str(out), "--quiet"]) == 0
    journal = (out / "ledger.journal").read_bytes()
    wider = {**tune, "space": {**tune["space"], "weight_decay": {"low": 0.0, "high": 0.2}}}
    assert main(["tune", str(write_suite(name="ts", matrix=matrix, tune=wider)), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "tune: space changed since the trials of tune:ts:depth=1,layer=layernorm were drawn" in err, err
    assert (out / "ledger.journal").read_bytes() == journal
    stricter = {**tune, "prune_after": 0.5}  # how trials are judged, too
    assert main(["tune", str(write_suite(name="ts", matrix=matrix, tune=stricter)), "--out", str(out), "--quiet"]) == 2
    assert "tune: prune_after changed" in capsys.readouterr().err
    more = {**tune, "trials": 2}  # a larger budget extends every row's search alike
    assert main(["tune", str(write_suite(name="ts", matrix=matrix, tune=more)), "--out", str(out), "--quiet"]) == 0
    assert len(Ledger(None, out).study("tune:ts:depth=1,layer=layernorm").get_trials(deepcopy=False)) == 2


def test_fused_search_trials_differ_in_decay_beta2_and_init_and_stay_within_the_startup_batch(write_suite, tmp_path):
    """`tune --fuse 4`: a search's trials (their lr, weight decay, beta2 and LayerScale ε apart) train fused, never
    more of them at once than TPE's random startup draws (2 here), and the top 2 confirmations fuse as well."""
    path = write_suite(name="tf", matrix={"depth": [1], "layer": ["layerscale"], "seed": [0]},
                       report_seeds=[100],
                       tune={"trials": 5, "confirm_top": 2, "sampler": "tpe", "startup_trials": 2,
                             "space": {"lr": {"low": 1e-3, "high": 1e-2, "log": True},
                                       "weight_decay": {"low": 0.0, "high": 0.2},
                                       "adam_beta2": {"choices": [0.95, 0.999]},
                                       "layer.init_values": "source"}})
    out = tmp_path / "out"
    assert main(["tune", str(path), "--out", str(out), "--quiet", "--fuse", "4"]) == 0
    searched = Ledger(None, out).study("tune:tf:depth=1,layer=layerscale").get_trials(deepcopy=False)
    assert len({(t.params["weight_decay"], t.params["layer.init_values"]) for t in searched}) == 5  # five draws
    groups = [t.user_attrs["result"]["fused_group"] for t in searched]
    assert sorted(groups) == [1, 2, 2, 2, 2], groups  # 2 + 2 + 1: batches no larger than the startup's
    cells = pd.read_csv(out / "results.csv")
    confirmations = cells[cells["seed"] == 102]  # confirm_seed: the search's seed + 1
    assert len(confirmations) == 2 and set(confirmations["fused_group"]) == {2}


def test_a_search_at_its_in_flight_bound_starts_no_trial_until_its_running_one_ends(write_suite, tmp_path):
    """TPE with 1 startup trial: while a peer trains one of the search's trials, this worker starts none of the
    others (unfused, too), and takes the search up once the peer's trial is back."""
    import threading
    from datetime import datetime, timedelta

    from normbench.sweep.cell_end import give_back
    from normbench.sweep.tune import open_tune
    from normbench.sweep.worker import work
    from normbench.tracking.tracker import Tracker

    suite = load_suite(write_suite(name="tb", matrix={"depth": [1], "layer": ["layernorm"], "seed": [0]},
                                   tune={"trials": 2, "sampler": "tpe", "startup_trials": 1,
                                         "space": {"lr": {"low": 1e-3, "high": 1e-2, "log": True}}}))
    ledger = Ledger(None, tmp_path)
    plan, _, progress = open_tune(suite, ledger, tmp_path, quiet=True)
    [search] = plan.jobs()
    assert search.max_in_flight == 1
    peer = ledger.claim(search.study)  # a peer's trial, training: the search stands at its bound
    released = datetime.now() + timedelta(seconds=2)
    timer = threading.Timer(2.0, give_back, [peer])  # the peer stops and gives it back
    timer.start()
    tracker = Tracker(tmp_path, suite.name)
    try:
        work(plan, ledger, tracker, "cpu", progress, suite.name)
    finally:
        timer.cancel()
        tracker.finish()
    trained = ledger.study(search.study.study_name).get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    assert len(trained) == 2  # the peer's slot, given back (its copy queued again), and the other
    assert min(t.datetime_start for t in trained) >= released - timedelta(seconds=0.5), [t.datetime_start
                                                                                           for t in trained]
