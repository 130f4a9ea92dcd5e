"""Stopping a suite: SIGTERM (a scheduler's stop, `kill`) and SIGHUP (a closed terminal, a dropped ssh connection)
say what was saved and how to resume, like Ctrl-C, and all exit 143: one code for an interrupted run
(docs/faults.md). A SIGHUP ignored from the start (`nohup`) stays ignored."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from normbench import cli, stopping


@pytest.mark.parametrize(("sig", "code", "said"), [(signal.SIGTERM, 143, "stopped by SIGTERM"),
                                                   (signal.SIGHUP, 143, "stopped by SIGHUP"),
                                                   (signal.SIGINT, 143, "interrupted")])
def test_a_stopped_run_says_what_was_saved_and_how_to_resume(monkeypatch, capsys, tmp_path: Path, sig, code, said):
    def run(args):  # stands in for the suite: the signal arrives while cells train, then a safe point comes
        os.kill(os.getpid(), sig)
        stopping.wait(5)  # SIGTERM and SIGHUP end the wait at once (stopping.py); Ctrl-C raises where it lands
        raise AssertionError("the signal did not stop the command")

    monkeypatch.setitem(cli.COMMANDS, "run", run)
    # a shell starting a job in the background hands it SIGINT ignored; a terminal's Ctrl-C reaches Python's handler.
    # SIGHUP: not ignored (the tests may run under nohup), and a no-op rather than its default, so a SIGHUP main does
    # not take fails this test instead of killing pytest
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    previous_hup = signal.signal(signal.SIGHUP, lost_hangup := lambda signum, frame: None)
    try:
        argv = ["run", "suites/smoke.yaml", "--out", str(tmp_path)]
        assert cli.main(argv) == code
        assert signal.getsignal(signal.SIGHUP) is lost_hangup  # main puts the old handlers back
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGHUP, previous_hup)
    err = capsys.readouterr().err
    assert said in err and f"saved in {tmp_path}" in err
    assert f"Resume with the same command: normbench run suites/smoke.yaml --out {tmp_path}" in err
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_run_started_with_sighup_ignored_outlives_its_terminal(monkeypatch):
    """`nohup normbench run ...`: the user asked the run to survive a hang-up; it trains on (here: returns 0)."""
    def run(args):
        os.kill(os.getpid(), signal.SIGHUP)
        stopping.wait(0.3)  # a stop request would end the wait and raise
        return 0

    monkeypatch.setitem(cli.COMMANDS, "run", run)
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        assert cli.main(["run", "suites/smoke.yaml"]) == 0
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_without_out_the_message_names_the_default_folder(monkeypatch, capsys):
    monkeypatch.setitem(cli.COMMANDS, "run", lambda args: os.kill(os.getpid(), signal.SIGTERM) or stopping.wait(5))
    assert cli.main(["run", "suites/smoke.yaml"]) == 143
    assert "saved in runs/smoke " in capsys.readouterr().err


def test_sigterm_is_a_request_honoured_at_the_next_safe_point_not_an_exception_where_it_lands(monkeypatch):
    reached = []

    def run(args):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)  # library code between safe points: the signal must not raise in here
        reached.append("after the library call")
        stopping.check()  # the safe point
        reached.append("past the safe point")
        return 0

    monkeypatch.setitem(cli.COMMANDS, "run", run)
    assert cli.main(["run", "suites/smoke.yaml"]) == 143
    assert reached == ["after the library call"]


def test_a_sigterm_after_the_last_safe_point_still_exits_143(monkeypatch):
    monkeypatch.setitem(cli.COMMANDS, "run", lambda args: os.kill(os.getpid(), signal.SIGTERM) or 0)
    assert cli.main(["run", "suites/smoke.yaml"]) == 143
