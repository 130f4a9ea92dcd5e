"""normbench/store/upgrade.py: a ledger written before version 5 (finished trials with a `history`, no intermediate
values, no numeric scores) is rewritten with them, everything else kept; a second upgrade changes nothing; a ledger
in use is refused; a failed rewrite leaves the old file whole."""

from __future__ import annotations

import warnings
from pathlib import Path

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from normbench.errors import NormbenchError
from normbench.store import upgrade
from normbench.store.journal import SafeJournalFileBackend, ledger_identity
from normbench.store.locks import LifeLock
from normbench.store.upgrade import needs_upgrade, upgrade_journal


def epoch(i: int, val: float | None) -> dict:
    return {"epoch": i, "step": 16 * (i + 1), "images": 1024 * (i + 1), "train_loss": 1.0, "val_top1": val,
            "lr": 1e-3, "grad_norm": 1.0, "images_per_sec": 100.0}


OK = {"status": "ok", "val_top1": 60.0, "test_top1": 58.0, "final_val_top1": 60.0, "epochs_run": 3}
DIVERGED = {"status": "diverged", "val_top1": None, "test_top1": None, "final_val_top1": 12.0, "epochs_run": 2}
HISTORIES = {"ok": [epoch(0, 20.0), epoch(1, 45.0), epoch(2, 60.0)], "diverged": [epoch(0, 12.0), epoch(1, None)]}


def old_ledger(folder: Path, *, running: bool = False) -> Path:
    """Two studies in the version-4 shape: a named one with a COMPLETE, a diverged, a FAIL and a WAITING trial, and an
    unnamed one (an Optuna older than metric names) with a PRUNED trial; optionally a RUNNING trial."""
    path = folder / "ledger.journal"
    storage = JournalStorage(JournalFileBackend(str(path)))
    run = optuna.create_study(storage=storage, study_name="run:t", direction="maximize")
    with warnings.catch_warnings():  # "experimental": stable since Optuna 3.2
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        run.set_metric_names(["val_top1_final_epoch"])
    run.set_user_attr("recipe", "abc")
    dist = {"depth": optuna.distributions.IntDistribution(2, 8)}
    for depth, result in ((2, OK), (8, DIVERGED)):
        history = HISTORIES[result["status"]]
        run.add_trial(optuna.trial.create_trial(
            value=result["val_top1"] or 0.0, params={"depth": depth}, distributions=dist,
            user_attrs={"cell_id": f"depth={depth}", "axes": {"depth": depth}, "result": result, "history": history}))
    storage.set_study_system_attr(storage.get_study_id_from_name("run:t"), "kept", [1])
    run.add_trial(optuna.trial.create_trial(  # a FAIL record with a result (a duplicate's) is still no finished cell
        state=TrialState.FAIL, params={"depth": 2}, distributions=dist, system_attrs={"failed_trial": 0},
        user_attrs={"cell_id": "depth=2", "result": OK, "history": HISTORIES["ok"]}))
    run.add_trial(optuna.trial.create_trial(state=TrialState.WAITING, user_attrs={"cell_id": "depth=4"}))
    tune = optuna.create_study(storage=storage, study_name="tune:t:x", direction="maximize")
    tune.add_trial(optuna.trial.create_trial(state=TrialState.PRUNED, user_attrs={
        "result": {**OK, "status": "pruned", "test_top1": None}, "history": HISTORIES["ok"][:1]}))
    if running:
        run.ask()
    return path


def trials(path: Path) -> dict[str, list[optuna.trial.FrozenTrial]]:
    storage = JournalStorage(JournalFileBackend(str(path)))
    return {s.study_name: storage.get_all_trials(storage.get_study_id_from_name(s.study_name))
            for s in storage.get_all_studies()}


def test_an_old_ledger_gets_its_curves_and_scores_and_keeps_everything_else(tmp_path: Path) -> None:
    path = old_ledger(tmp_path)
    before, identity = trials(path), ledger_identity(SafeJournalFileBackend(str(path)))
    assert needs_upgrade(path)
    summary = upgrade_journal(path)
    assert summary.changed and (summary.upgraded, summary.values_added, summary.names_added) == (3, 5, 1)
    after = trials(path)
    assert list(after) == list(before) == ["run:t", "tune:t:x"]
    ok, diverged, failed, waiting = after["run:t"]
    assert ok.intermediate_values == {16: 20.0, 32: 45.0, 48: 60.0}  # val top-1 at step = optimizer steps
    assert diverged.intermediate_values == {16: 12.0}  # the diverged epoch (None) is skipped
    assert (ok.user_attrs["test_top1"], ok.user_attrs["val_top1"]) == (58.0, 60.0)
    assert (diverged.user_attrs["test_top1"], diverged.user_attrs["val_top1"]) == (0.0, 0.0)  # diverged = 0
    for old, new in zip(before["run:t"] + before["tune:t:x"], after["run:t"] + after["tune:t:x"], strict=True):
        assert (new.number, new.state, new.params, new.value, new.system_attrs, new.datetime_start) == \
            (old.number, old.state, old.params, old.value, old.system_attrs, old.datetime_start)
        assert {k: new.user_attrs[k] for k in old.user_attrs} == old.user_attrs
    assert not failed.intermediate_values and "test_top1" not in failed.user_attrs  # unfinished: nothing added
    assert waiting.state == TrialState.WAITING and not waiting.intermediate_values
    assert after["tune:t:x"][0].intermediate_values == {16: 20.0}  # a PRUNED trial draws its curve too
    storage = JournalStorage(SafeJournalFileBackend(str(path)))
    assert optuna.load_study(study_name="run:t", storage=storage).user_attrs == {"recipe": "abc"}
    assert storage.get_study_system_attrs(storage.get_study_id_from_name("run:t"))["kept"] == [1]
    assert [optuna.load_study(study_name=n, storage=storage).metric_names for n in after] == \
        [["val_top1_final_epoch"]] * 2
    assert ledger_identity(SafeJournalFileBackend(str(path))) == identity  # the same ledger to MLflow's parent run
    assert not needs_upgrade(path)


def test_a_second_upgrade_changes_nothing_and_says_so(tmp_path: Path) -> None:
    path = old_ledger(tmp_path)
    upgrade_journal(path)
    written, stat = path.read_bytes(), path.stat()
    again = upgrade_journal(path)
    assert not again.changed and "nothing changed" in again.line()
    assert path.read_bytes() == written and path.stat().st_mtime_ns == stat.st_mtime_ns


@pytest.mark.parametrize("how", ["running trial", "live worker"])
def test_a_ledger_in_use_is_refused_untouched(tmp_path: Path, how: str) -> None:
    path = old_ledger(tmp_path, running=how == "running trial")
    life = LifeLock(tmp_path) if how == "live worker" else None
    written = path.read_bytes()
    try:
        with pytest.raises(NormbenchError) as refused:
            upgrade_journal(path)
    finally:
        if life is not None:
            life.release()
    message = str(refused.value)
    assert "in use" in message and "normbench ledger upgrade" in message and "\n" not in message
    assert ("trial(s) RUNNING" in message, "a live worker" in message) == (how == "running trial", how == "live worker")
    assert path.read_bytes() == written
    assert not Path(f"{path}.lock").exists()  # the journal's lock is given back


def test_a_rewrite_that_fails_leaves_the_old_file_whole_and_no_temp_file(tmp_path: Path, monkeypatch) -> None:
    path = old_ledger(tmp_path)
    written = path.read_bytes()

    def crash(*args, **kwargs):
        raise OSError("disk gone")

    monkeypatch.setattr(upgrade, "_keep_identity", crash)  # after every trial was copied, before the rename
    with pytest.raises(OSError):
        upgrade_journal(path)
    assert path.read_bytes() == written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.journal"]


def test_the_command_line_upgrades_and_names_a_missing_file(tmp_path: Path, capsys) -> None:
    path = old_ledger(tmp_path)
    assert upgrade.main([str(path)]) == 0
    assert "upgraded 3 of 5 trials" in capsys.readouterr().out
    assert upgrade.main([str(tmp_path / "nope.journal")]) == 2
    assert "no such ledger journal" in capsys.readouterr().err



def test_the_cli_verb_upgrades_a_folders_ledger_and_says_what_it_did(tmp_path: Path, capsys) -> None:
    from normbench.cli import main

    old_ledger(tmp_path)
    assert main(["ledger", "upgrade", str(tmp_path)]) == 0
    assert not needs_upgrade(tmp_path / "ledger.journal")
    assert "upgraded 3 of" in capsys.readouterr().out
