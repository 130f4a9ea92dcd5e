"""Stopping a suite: SIGTERM (a scheduler's stop, `kill`) says what was saved and how to resume, like Ctrl-C."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from normbench import cli


@pytest.mark.parametrize(("sig", "code", "said"), [(signal.SIGTERM, 143, "stopped by SIGTERM"),
                                                   (signal.SIGINT, 130, "interrupted")])
def test_a_stopped_run_says_what_was_saved_and_how_to_resume(monkeypatch, capsys, tmp_path: Path, sig, code, said):
    def run(args):  # stands in for the suite: the signal arrives while cells train
        os.kill(os.getpid(), sig)
        time.sleep(5)
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
    monkeypatch.setitem(cli.COMMANDS, "run", lambda args: os.kill(os.getpid(), signal.SIGTERM) or time.sleep(5))
    assert cli.main(["run", "suites/smoke.yaml"]) == 143
    assert "saved in results/smoke " in capsys.readouterr().err
