"""Which journal lines are ledger records: every record Optuna writes is; JSON it cannot replay (`{}`, an op code of
another Optuna version, a record missing a field) is refused by its line, and `repair` sets it aside."""

from __future__ import annotations

import json

import optuna
import pytest

from normbench.store.journal import LedgerDamagedError, SafeJournalFileBackend, check, is_record, repair


def _journal(tmp_path):
    """A journal with a record of each kind a suite writes: a study, its attrs, a trial, its param, attrs, an
    intermediate value and its state."""
    path = tmp_path / "ledger.journal"
    study = optuna.create_study(study_name="run:tiny", storage=optuna.storages.JournalStorage(
        SafeJournalFileBackend(str(path))))
    study.set_user_attr("suite", "tiny")
    study._storage.set_study_system_attr(study._study_id, "metric_names", ["val"])
    trial = study.ask()
    trial.suggest_float("lr", 1e-4, 1e-2, log=True)
    trial.set_user_attr("cell_id", "c")
    study._storage.set_trial_system_attr(trial._trial_id, "retry_history", [])
    trial.report(0.5, 0)
    study.tell(trial, 0.5)
    return path


def test_every_record_optuna_writes_is_one(tmp_path):
    lines = _journal(tmp_path).read_bytes().splitlines(keepends=True)
    ops = {json.loads(line)["op_code"] for line in lines}
    assert ops >= {0, 2, 3, 4, 5, 6, 7, 8, 9} and all(map(is_record, lines))


@pytest.mark.parametrize("line", [b"{}", b"[]", b'"text"', b'{"op_code": 99, "worker_id": "w"}',
                                  b'{"op_code": "4", "worker_id": "w", "study_id": 0, "datetime_start": null}',
                                  b'{"op_code": 8, "worker_id": "w", "trial_id": 0}', b"not json"])
def test_json_that_optuna_cannot_replay_is_no_record(line):
    assert not is_record(line + b"\n")


def test_a_json_line_in_the_middle_is_refused_by_line_and_repair_moves_it_and_the_rest(tmp_path):
    path = _journal(tmp_path)
    lines = path.read_bytes().splitlines(keepends=True)
    lines.insert(3, b'{"op_code": 99, "worker_id": "newer"}\n')
    path.write_bytes(b"".join(lines))
    with pytest.raises(LedgerDamagedError, match=r"line 4 is JSON but not a ledger record .* another Optuna version"):
        check(path)
    assert repair(path) == (3, len(lines) - 3)
    check(path)  # readable again
    assert b'"newer"' in (tmp_path / "ledger.journal.damaged").read_bytes()


def test_a_record_another_process_appends_mid_run_is_refused_by_line(tmp_path):
    """The file is checked whole when opened; a bad record appended later is refused as Optuna reads it."""
    path = tmp_path / "ledger.journal"
    storage = optuna.storages.JournalStorage(SafeJournalFileBackend(str(path)))
    optuna.create_study(study_name="run:tiny", storage=storage)
    with open(path, "ab") as f:
        f.write(b'{"op_code": 99, "worker_id": "newer"}\n')
    with pytest.raises(LedgerDamagedError, match=r"line 2 is JSON but not a ledger record"):
        storage.get_all_studies()
