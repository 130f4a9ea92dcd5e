"""Faults, second round: a PostgreSQL blip while a worker idles and polls; a journal line that is JSON but no record;
a second suite on the same --out; `normbench leaderboard` on an empty folder. Each ends in a clear message or a
finished suite, never a traceback, and leaves the folder usable by the next command."""

from __future__ import annotations

import datetime
import json
import os
import signal
import time
from pathlib import Path

import optuna
import pytest
import sqlalchemy
from sqlalchemy.engine import make_url

from normbench.cli import main
from tests.faults.helpers import assert_invariants, finish, normbench, trials, wait_for
from tests.faults.test_postgres_faults import SLOW, Postgres, own_database  # noqa: F401  (fixture)

CELLS = ["depth=1,layer=layernorm,lr=0.001,seed=0", "depth=1,layer=layerscale,lr=0.001,seed=0"]


def _main(capsys, *args) -> tuple[int, str, str]:
    """`normbench ARGS` in this process: (exit code, stdout, stderr), after checking stderr has no traceback."""
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, out, err


def _snapshot(folder) -> dict:
    return {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in folder.rglob("*") if p.is_file()}


# ------------------------------------------------------------------------- 1. a blip while a worker polls


def _last_queries(url: str, pid: int) -> set[datetime.datetime]:
    """When the ledger sessions of process `pid` (its TCP connections to the server, matched by their local ports)
    started their latest query, as pg_stat_activity shows them."""
    server_port = make_url(url).port
    sockets = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            link = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if link.startswith("socket:["):
            sockets.add(link[len("socket:["):-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            local, remote, inode = line.split()[1], line.split()[2], line.split()[9]
            if inode in sockets and int(remote.rsplit(":", 1)[1], 16) == server_port:
                ports.add(int(local.rsplit(":", 1)[1], 16))
    if not ports:
        return set()
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as connection:
            return {row[0] for row in connection.execute(sqlalchemy.text(
                "SELECT query_start FROM pg_stat_activity WHERE client_port = ANY(:ports) AND query_start IS NOT NULL"),
                {"ports": sorted(ports)})}
    finally:
        engine.dispose()


@pytest.mark.postgres
@pytest.mark.parametrize("seconds", [3, 10])
def test_a_postgres_blip_while_a_worker_idles_and_polls_is_ridden_out(write_suite, tmp_path, postgres_url, request,
                                                                     seconds):
    """One cell, two workers: one trains it, the other polls the ledger every POLL_SECONDS (reclaim, claim, the
    RUNNING check: `study.get_trials`, which Optuna's cache sends to the storage's private `_get_trials`). The one
    training is stopped (SIGSTOP) mid-cell until the server is back, so the cell is in flight for as long as the other
    takes to start polling and for the whole blip, however fast it would train; only the poller can say it waited."""
    url, out = request.getfixturevalue("own_database"), tmp_path / "o"  # a database of its own: the server restarts
    # 30 epochs (~2 s on one core): the cell is still in flight a moment after its first epoch, when it is stopped
    path = write_suite(train={**SLOW, "epochs": 30}, matrix={"depth": [1], "layer": ["layernorm"], "lr": [1e-3],
                                                              "seed": [0]})
    server = Postgres(postgres_url)
    # a long grace: the stopped worker's heartbeats pause with it, and it must not be judged dead meanwhile
    env = {"NORMBENCH_HEARTBEAT_GRACE": "600"}
    procs = [normbench("worker", path, "--out", out, "--storage", url, "--quiet", env=env) for _ in range(2)]
    busy = None
    try:
        def in_flight() -> bool:  # an epoch reported: training, between two short writes of the ledger
            return any(t.state == optuna.trial.TrialState.RUNNING and t.intermediate_values
                       for t in trials(out, "tiny", url))

        wait_for(in_flight, step=0.05, what="the cell in flight")
        [pid] = [t.user_attrs["worker_pid"] for t in trials(out, "tiny", url)]
        [busy] = [p for p in procs if p.pid == pid]
        [idle] = [p for p in procs if p.pid != pid]
        os.kill(busy.pid, signal.SIGSTOP)
        assert in_flight(), "the cell ended before its worker was stopped"
        queries: set[datetime.datetime] = set()  # when the idle worker's sessions last sent the ledger a query

        def polling() -> bool:
            queries.update(_last_queries(url, idle.pid))
            # past its start (it found nothing to claim) and asking again: queries more than a poll (2 s) apart
            return bool(queries) and max(queries) - min(queries) > datetime.timedelta(seconds=3)

        wait_for(polling, timeout=240, step=0.5, what="the worker without a cell polling the ledger")
        assert all(p.poll() is None for p in procs), "both workers still running before the blip"
        server.stop()
        try:
            time.sleep(seconds)
        finally:
            server.start()
    finally:
        if busy is not None:
            os.kill(busy.pid, signal.SIGCONT)
    results = [finish(p) for p in procs]
    assert [code for code, _ in results] == [0, 0], results
    idle_err = results[procs.index(idle)][1]
    assert "is unreachable" in idle_err and "is back" in idle_err, results  # the poller waited, and said so
    assert main(["leaderboard", str(out), "--storage", url]) == 0
    assert_invariants(out, "tiny", CELLS[:1], storage=url)
    assert not [t for t in trials(out, "tiny", url) if t.state == optuna.trial.TrialState.FAIL]  # trained once


# ---------------------------------------------------------------- 4. a journal line that is JSON, not a record

NOT_RECORDS = {"empty object": {}, "newer op code": {"op_code": 99, "worker_id": "w-1", "study_id": 0}}


@pytest.mark.parametrize("record", NOT_RECORDS.values(), ids=NOT_RECORDS.keys())
def test_a_json_line_that_is_no_record_is_refused_by_line_then_repaired(write_suite, tmp_path, capsys, record,
                                                                       one_torch_thread):
    path, out = write_suite(), tmp_path / "out"
    assert _main(capsys, "run", path, "--out", out, "--quiet")[0] == 0
    journal = out / "ledger.journal"
    intact = len(journal.read_bytes().splitlines())
    with open(journal, "ab") as f:
        f.write(json.dumps(record).encode() + b"\n")
    before = _snapshot(out)

    for command in (["run", path, "--out", out, "--quiet"], ["run", path, "--out", out, "--dry-run"],
                    ["leaderboard", out]):
        code, _, err = _main(capsys, *command)
        assert code == 2, (command, err)
        assert f"{journal}: line {intact + 1} is JSON but not a ledger record" in err, err
        assert "another Optuna version" in err and f"normbench ledger repair {out}" in err, err
    assert _snapshot(out) == before  # refused: nothing changed, nothing cut off as if torn

    code, said, _ = _main(capsys, "ledger", "repair", out)
    assert code == 0 and f"kept the first {intact} records; moved 1" in said, said
    assert json.dumps(record) in (out / "ledger.journal.damaged").read_text()  # set aside, not dropped
    assert _main(capsys, "run", path, "--out", out, "--quiet")[0] == 0  # usable again: every cell was kept
    assert_invariants(out, "tiny", CELLS)
    assert "nothing to repair" in _main(capsys, "ledger", "repair", out)[1]


# ------------------------------------------------------------------------- 8. two suites on the same --out


@pytest.mark.parametrize("keep_suite_copy", [True, False], ids=["suite.yaml", "ledger alone"])
def test_a_second_suite_on_the_same_out_is_refused_before_anything_is_written(write_suite, tmp_path, capsys,
                                                                               keep_suite_copy, one_torch_thread):
    out = tmp_path / "out"
    assert _main(capsys, "run", write_suite(), "--out", out, "--quiet")[0] == 0
    if not keep_suite_copy:  # the ledger's studies still say whose folder it is
        (out / "suite.yaml").unlink()
    before = _snapshot(out)
    other = write_suite(name="other")
    for command in (["run", other, "--out", out, "--quiet"], ["worker", other, "--out", out, "--quiet"]):
        code, _, err = _main(capsys, *command)
        assert code == 2, (command, err)
        assert f"{out}: holds suite `tiny`" in err and "not `other`" in err and "--out" in err, err
    assert _snapshot(out) == before  # results.csv, leaderboard.md, suite.yaml, ledger, MLflow: untouched

    assert _main(capsys, "run", write_suite(), "--out", out, "--quiet")[0] == 0  # the folder's own suite goes on
    assert_invariants(out, "tiny", CELLS)
    assert _main(capsys, "run", other, "--out", tmp_path / "other", "--quiet")[0] == 0  # and the other, elsewhere
    assert_invariants(tmp_path / "other", "other", CELLS)


# ------------------------------------------------------------------ 9. `normbench leaderboard` on an empty folder


def test_leaderboard_on_an_empty_folder_says_run_the_suite_first_and_creates_nothing(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = _main(capsys, "leaderboard", empty)
    assert code != 0
    assert "no ledger here" in err and "run the suite first" in err and "output folder" in err, err
    assert list(empty.iterdir()) == []  # no empty ledger.journal left behind
