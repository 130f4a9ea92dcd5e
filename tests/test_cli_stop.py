"""Stopping a suite: SIGTERM (a scheduler's stop, `kill`) says what was saved and how to resume, like Ctrl-C, and
both exit 143: one code for an interrupted run (docs/faults.md)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from normbench import cli, stopping


@pytest.mark.parametrize(("sig", "code", "said"), [(signal.SIGTERM, 143, "stopped by SIGTERM"),
                                                   (signal.SIGINT, 143, "interrupted")])
def test_a_stopped_run_says_what_was_saved_and_how_to_resume(monkeypatch, capsys, tmp_path: Path, sig, code, said):
    def run(args):  # stands in for the suite: the signal arrives while cells train, then a safe point comes
        os.kill(os.getpid(), sig)
        stopping.wait(5)  # SIGTERM ends the wait at once (stopping.py); Ctrl-C raises where it lands
        raise AssertionError("the signal did not stop the command")

    monkeypatch.setitem(cli.COMMANDS, "run", run)
    # a shell starting a job in the background hands it SIGINT ignored; a terminal's Ctrl-C reaches Python's handler
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        argv = ["run", "suites/smoke.yaml", "--out", str(tmp_path)]
        assert cli.main(argv) == code
    finally:
        signal.signal(signal.SIGINT, previous)
    err = capsys.readouterr().err
    assert said in err and f"saved in {tmp_path}" in err
    assert f"Resume with the same command: normbench run suites/smoke.yaml --out {tmp_path}" in err
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # main puts the old handler back


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
