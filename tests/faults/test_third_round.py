"""Faults, third round (issue 50): an edited matrix after a crash trains and scores only what it lists now; a full
disk mid-cell gives the cell's claim back; a suite file that is not UTF-8 (or not a file) is one line and exit 2;
Ctrl-C and SIGTERM end an interrupted run with one exit code, 143."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import sys
from collections import Counter

import pandas as pd
import pytest
from optuna.trial import TrialState

from normbench.cli import main
from normbench.contracts.suite import load_suite
from normbench.store import reserve
from normbench.store.ledger import Ledger
from normbench.sweep.run import open_run_study
from normbench.train import checkpoint
from tests.conftest import REPO
from tests.faults.helpers import as_from_a_terminal, finish, running, trials, wait_for


def _main(capsys, *args) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, out, err


# ------------------------------------------------------------- 1. an edited matrix after a run was killed


def test_an_edited_matrix_trains_and_scores_only_the_cells_it_lists_now(write_suite, tmp_path, capsys,
                                                                          one_torch_thread):
    out = tmp_path / "out"
    first = {"depth": [1], "layer": ["layernorm"], "lr": [1.0e-3, 3.0e-3], "seed": [0, 1]}
    path = write_suite(matrix=first)
    # the first run finished one cell (lr 3e-3, seed 0) and was killed with the others queued
    code, _, err = _main(capsys, "run", path, "--out", out, "--quiet", "--set", "matrix.lr=[3.0e-3]",
                         "--set", "matrix.seed=[0]")
    assert code == 0, err
    ledger = Ledger(None, out)
    ledger.enqueue(open_run_study(ledger, load_suite(path)), {c.cell_id: c.axes for c in load_suite(path).cells()})
    ledger.close()
    # the suite is edited: lr 3e-3 and seed 1 dropped, a layer added
    path = write_suite(matrix={"depth": [1], "layer": ["layernorm", "layerscale"], "lr": [1.0e-3], "seed": [0]})
    now = ["depth=1,layer=layernorm,lr=0.001,seed=0", "depth=1,layer=layerscale,lr=0.001,seed=0"]

    code, listed, _ = _main(capsys, "run", path, "--out", out, "--dry-run")
    assert code == 0
    assert "2 cells, 0 finished" in listed and "lr=0.003" not in listed, listed
    assert "1 finished cell(s) of the ledger left out: the suite's matrix no longer lists them" in listed

    code, _, err = _main(capsys, "run", path, "--out", out, "--quiet")
    assert code == 0, err
    ts = trials(out, "tiny")
    trained = Counter(t.user_attrs["cell_id"] for t in ts if t.state == TrialState.COMPLETE)
    assert trained == Counter([*now, "depth=1,layer=layernorm,lr=0.003,seed=0"])  # nothing it no longer lists
    waiting = sorted(t.user_attrs["cell_id"] for t in ts if t.state == TrialState.WAITING)
    assert waiting == ["depth=1,layer=layernorm,lr=0.001,seed=1", "depth=1,layer=layernorm,lr=0.003,seed=1"]
    assert sorted(pd.read_csv(out / "results.csv")["cell_id"]) == now  # scored: the current matrix only
    board = (out / "leaderboard.md").read_text()
    assert "- 1 finished cell of the ledger left out: the suite's matrix no longer lists them" in board
    assert "lrs tried: 0.001" in board and "lrs tried: 0.001, 0.003" not in board

    code, listed, _ = _main(capsys, "run", path, "--out", out, "--dry-run")
    assert "2 cells, 2 finished" in listed, listed


# --------------------------------------------------------------- 2. a full disk while a cell is in flight


def test_a_full_disk_mid_cell_gives_the_claim_of_the_cell_in_flight_back(write_suite, tmp_path, capsys, monkeypatch,
                                                                         one_torch_thread):
    """The sequence the issue saw on a 40 MiB filesystem: the checkpoint's write is refused (torch.save says so with
    a RuntimeError), then the journal's; the disk has room again once the folder's reserve is freed."""
    out = tmp_path / "out"
    path = write_suite(train={"epochs": 3, "batch_size": 256, "warmup_epochs": 0, "checkpoint_minutes": 1e-6})
    full, real_fsync, real_free = [], os.fsync, reserve.free

    def save(state, f):
        full.append(True)  # the disk fills up during the cell's first checkpoint
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")

    def fsync(fd):
        if full and os.path.samefile(f"/proc/self/fd/{fd}", out / "ledger.journal"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(fd)

    def free(folder):
        full.clear()  # the reserve's 1 MiB: room for the way out
        return real_free(folder)

    monkeypatch.setattr(checkpoint.torch, "save", save)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(reserve, "free", free)
    code, _, err = _main(capsys, "run", path, "--out", out, "--quiet")
    assert code == 2, err
    assert f"{out / 'ledger.journal'}: cannot write the ledger (No space left on device)" in err, err
    assert not (out / reserve.RESERVE).exists()
    states = Counter(t.state for t in trials(out, "tiny"))
    assert TrialState.RUNNING not in states, states  # given back: failed here, queued again
    assert states[TrialState.WAITING] == 2, states

    monkeypatch.undo()
    code, _, err = _main(capsys, "run", path, "--out", out, "--quiet")
    assert code == 0, err
    assert Counter(t.user_attrs["cell_id"] for t in trials(out, "tiny") if t.state == TrialState.COMPLETE) == \
        Counter(["depth=1,layer=layernorm,lr=0.001,seed=0", "depth=1,layer=layerscale,lr=0.001,seed=0"])


# ------------------------------------------------------------------- 3. a file that is not UTF-8 text


@pytest.mark.parametrize("command", [["run"], ["run", "--dry-run"], ["worker"]])
@pytest.mark.parametrize("content, said", [
    ("utf-16", "line 1: not UTF-8 text (byte 0xff at offset 0) (it looks like UTF-16); save the suite file as UTF-8"),
    ("binary", "line 2: not UTF-8 text (byte 0xe9 at offset 27); save the suite file as UTF-8"),
    ("folder", "a folder, not a suite file; name the file inside it"),
])
def test_a_suite_file_that_is_not_utf8_text_is_one_line_and_exit_2(tmp_path, capsys, command, content, said):
    path = tmp_path / "suite.yaml"
    if content == "folder":
        path.mkdir()
    else:
        text = "name: tiny\ndescription: caf\xe9\n"
        path.write_bytes(text.encode("utf-16") if content == "utf-16" else text.encode("latin-1"))
    out = tmp_path / "out"
    code, stdout, err = _main(capsys, command[0], path, *command[1:], "--out", out)
    assert code == 2
    assert err == f"normbench: error: {path}: {said}\n"
    assert not out.exists()


def test_set_values_and_weights_paths_that_cannot_be_read_are_one_line_and_exit_2(tmp_path, capsys, write_suite):
    path = write_suite()
    code, _, err = _main(capsys, "run", path, "--dry-run", "--set", "description=caf\udce9")  # argv's byte 0xe9
    assert (code, err) == (2, f"normbench: error: {path}: --set 'description=caf\\udce9': not UTF-8 text; give the "
                              "value in UTF-8\n")
    code, _, err = _main(capsys, "run", path, "--dry-run", "--set", "description=\x01")
    assert code == 2 and err.count("\n") == 1 and "the value is not valid YAML" in err, err
    (tmp_path / "w").mkdir()
    (tmp_path / "junk.safetensors").write_bytes(b"\xff" * 300)
    for weights, said in ((tmp_path / "w", "a folder, not a file"),
                          (tmp_path / "junk.safetensors", "not a readable safetensors file")):
        code, _, err = _main(capsys, "probe", "--weights", weights, "--out", tmp_path / "probe")
        assert code == 2 and said in err and err.count("\n") == 1, err
    assert not (tmp_path / "probe").exists()


# ------------------------------------------------------------------- 4. one exit code for an interrupted run


def test_ctrl_c_to_a_run_with_two_workers_exits_143_like_sigterm(write_suite, tmp_path):
    path = write_suite(train={"epochs": 15, "batch_size": 64, "warmup_epochs": 0})
    out = tmp_path / "out"
    # a terminal's Ctrl-C: SIGINT to the whole foreground process group, the parent and its workers alike (with
    # SIGINT as a terminal's job has it, even when the tests run in the background: else the run trains to its end)
    proc = subprocess.Popen([sys.executable, "-m", "normbench", "run", str(path), "--out", str(out), "--quiet",
                             "--workers", "2"], cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, start_new_session=True,
                            preexec_fn=as_from_a_terminal)
    try:
        wait_for(lambda: running(out, "tiny"), timeout=240, step=0.1, what="a cell in flight", alive=proc)
        os.killpg(proc.pid, signal.SIGINT)
        code, err = finish(proc, timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert code == 143, err
    assert err.count("Resume with the same command") == 1, err
    assert not running(out, "tiny")
