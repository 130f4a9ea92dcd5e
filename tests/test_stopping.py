"""normbench/stopping.py's held Ctrl-C: a write inside the block completes, the caller learns a Ctrl-C came, and an
exception leaving the block with one held is raised as KeyboardInterrupt (the user's stop is never swallowed)."""

from __future__ import annotations

import os
import signal

import pytest

from normbench.stopping import interrupts_held


def test_a_ctrl_c_inside_the_block_is_held_and_reported(ctrl_c_raises):
    done = []
    with interrupts_held() as pressed:
        os.kill(os.getpid(), signal.SIGINT)
        done.append("the write went on")
    assert done and pressed
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_error_leaving_the_block_with_a_ctrl_c_held_is_a_keyboard_interrupt(ctrl_c_raises):
    with pytest.raises(KeyboardInterrupt) as stopped, interrupts_held():
        os.kill(os.getpid(), signal.SIGINT)
        raise OSError("the ledger's disk failed")
    assert isinstance(stopped.value.__cause__, OSError)
    with pytest.raises(OSError), interrupts_held():  # no Ctrl-C: the error as it was
        raise OSError("the ledger's disk failed")


def test_an_ignored_ctrl_c_stays_ignored():
    """A shell's background job starts with SIGINT ignored: holding must not turn a press into a stop."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interrupts_held() as pressed:
            os.kill(os.getpid(), signal.SIGINT)
        assert not pressed and signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
