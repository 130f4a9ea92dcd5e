"""A damaged ledger.journal: a torn last record is cut off with a warning (and an append never glues onto it);
damage elsewhere stops with exit 2 naming the line, and `normbench ledger repair` recovers every intact record."""

from __future__ import annotations

import json

from normbench.cli import main
from normbench.store.journal import SafeJournalFileBackend
from tests.faults.helpers import assert_invariants

CELLS = ["depth=1,layer=layernorm,lr=0.001,seed=0", "depth=1,layer=layerscale,lr=0.001,seed=0"]


def _run(path, out, capsys) -> tuple[int, str]:
    code = main(["run", str(path), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


def test_torn_last_record_is_cut_with_a_warning_and_the_run_resumes(write_suite, tmp_path, capsys,
                                                                    one_torch_thread):
    path, out = write_suite(), tmp_path / "out"
    assert _run(path, out, capsys)[0] == 0
    journal = out / "ledger.journal"
    size = journal.stat().st_size
    with open(journal, "r+b") as f:  # a crash mid-write: the last record loses its end (`truncate -s -60`)
        f.truncate(size - 60)
    code, err = _run(path, out, capsys)
    assert code == 0
    assert "torn last record" in err and str(journal) in err
    assert journal.read_bytes().endswith(b"\n")
    assert all(json.loads(line) for line in journal.read_bytes().splitlines())  # every line parses: nothing glued
    assert (out / "ledger.journal.damaged").exists()  # what was cut is kept beside it
    assert_invariants(out, "tiny", CELLS)
    with open(journal, "r+b") as f:  # twice: the second tear is recovered as well as the first
        f.truncate(journal.stat().st_size - 60)
    assert _run(path, out, capsys)[0] == 0
    assert_invariants(out, "tiny", CELLS)


def test_appended_garbage_is_cut_like_a_torn_record(write_suite, tmp_path, capsys, one_torch_thread):
    path, out = write_suite(), tmp_path / "out"
    assert _run(path, out, capsys)[0] == 0
    with open(out / "ledger.journal", "ab") as f:
        f.write(b"garbage that is not json\n")
    code, err = _run(path, out, capsys)
    assert code == 0 and "torn last record" in err
    assert_invariants(out, "tiny", CELLS)


def test_an_append_never_glues_onto_a_torn_line(tmp_path, capsys):
    journal = tmp_path / "ledger.journal"
    backend = SafeJournalFileBackend(str(journal))
    backend.append_logs([{"op_code": 0, "worker_id": "a", "study_name": "s", "directions": [1]}])
    with open(journal, "ab") as f:  # another process dies mid-write after this one opened the file
        f.write(b'{"op_code": 5, "worker_id"')
    backend.append_logs([{"op_code": 1, "worker_id": "a", "study_id": 0}])
    lines = journal.read_bytes().splitlines()
    assert [json.loads(line)["op_code"] for line in lines] == [0, 1]
    assert "torn last record" in capsys.readouterr().err


def test_damage_in_the_middle_exits_2_naming_the_line_then_ledger_repair_recovers(write_suite, tmp_path, capsys,
                                                                                 one_torch_thread):
    path, out = write_suite(), tmp_path / "out"
    assert _run(path, out, capsys)[0] == 0
    journal = out / "ledger.journal"
    lines = journal.read_bytes().splitlines(keepends=True)
    bad = len(lines) - 3  # a record near the end (the last cell's finish), not the last line
    lines[bad] = b"\x00\x00 not a record \x00\n"
    journal.write_bytes(b"".join(lines))
    before = journal.read_bytes()

    code, err = _run(path, out, capsys)
    assert code == 2
    assert f"{journal}: line {bad + 1}" in err and f"the {bad} records before it are intact" in err
    assert f"normbench ledger repair {out}" in err
    assert journal.read_bytes() == before  # a refused run changes nothing

    assert main(["ledger", "repair", str(out)]) == 0
    assert f"kept the first {bad} records" in capsys.readouterr().out
    assert len(journal.read_bytes().splitlines()) == bad
    assert (out / "ledger.journal.damaged").read_bytes().count(b"\n") >= 3  # the moved lines are kept, not dropped
    assert _run(path, out, capsys)[0] == 0  # the cell whose records were moved runs again, once
    assert_invariants_ledger_and_csv(out)
    assert main(["ledger", "repair", str(out)]) == 0
    assert "nothing to repair" in capsys.readouterr().out


def assert_invariants_ledger_and_csv(out) -> None:
    """After a repair the cut-off cell's first MLflow run exists FINISHED (its ledger record was moved away), so
    MLflow holds it twice by design; the ledger and results.csv hold every cell once."""
    import pandas as pd
    from optuna.trial import TrialState

    from tests.faults.helpers import trials

    complete = sorted(t.user_attrs["cell_id"] for t in trials(out, "tiny") if t.state == TrialState.COMPLETE)
    assert complete == sorted(CELLS)
    assert sorted(pd.read_csv(out / "results.csv")["cell_id"]) == sorted(CELLS)
